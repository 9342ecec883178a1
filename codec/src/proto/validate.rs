//! The one walk of a payload that [`ProcessContextView::decode`](super::ProcessContextView::decode)
//! makes before handing out a view: every wire type, length and UTF-8 string, and the size,
//! nesting depth and number of attributes by the rules of `limits.rs`.

use super::limits::Budget;
use super::wire::{
    expect_len, expect_str, expect_wire, Fields, AV_ARRAY, AV_BOOL, AV_BYTES, AV_DOUBLE, AV_INT,
    AV_KVLIST, AV_STRING, KV_KEY, KV_VALUE, LIST_VALUES, PC_ATTRIBUTES, PC_RESOURCE,
    RESOURCE_ATTRIBUTES, WIRE_I64, WIRE_VARINT,
};
use super::{DecodeError, Limits, Message};

/// Checks `payload` whole against `limits`: its size first, then every field, stopping at
/// the first problem in wire order.
pub(super) fn validate(payload: &[u8], limits: &Limits) -> Result<(), DecodeError> {
    let mut validator = Validator {
        budget: Budget::new(*limits),
    };
    validator.budget.check_size(payload.len())?;
    validator.process_context(payload)
}

/// The single validation walk; counts attributes and tracks depth.
struct Validator {
    budget: Budget,
}

impl Validator {
    /// One more key-value pair or array element, refused as soon as there are too many.
    fn count(&mut self) -> Result<(), DecodeError> {
        self.budget.count(1);
        self.budget.check_count()
    }

    fn process_context(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                PC_RESOURCE => self.resource(expect_len(Message::ProcessContext, field, wire)?)?,
                PC_ATTRIBUTES => {
                    self.count()?;
                    self.key_value(expect_len(Message::ProcessContext, field, wire)?, 1)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn resource(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            if field == RESOURCE_ATTRIBUTES {
                self.count()?;
                self.key_value(expect_len(Message::Resource, field, wire)?, 1)?;
            }
        }
        Ok(())
    }

    fn key_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                KV_KEY => {
                    expect_str(Message::KeyValue, field, wire)?;
                }
                KV_VALUE => self.any_value(expect_len(Message::KeyValue, field, wire)?, depth)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn any_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), DecodeError> {
        self.budget.check_depth(depth)?;
        let m = Message::AnyValue;
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                AV_STRING => {
                    expect_str(m, field, wire)?;
                }
                AV_BOOL | AV_INT => expect_wire(m, field, wire, WIRE_VARINT)?,
                AV_DOUBLE => expect_wire(m, field, wire, WIRE_I64)?,
                AV_BYTES => {
                    expect_len(m, field, wire)?;
                }
                AV_ARRAY => {
                    let mut inner = Fields::new(expect_len(m, field, wire)?);
                    while let Some((f, w)) = inner.next_field()? {
                        if f == LIST_VALUES {
                            self.count()?;
                            self.any_value(expect_len(Message::ArrayValue, f, w)?, depth + 1)?;
                        }
                    }
                }
                AV_KVLIST => {
                    let mut inner = Fields::new(expect_len(m, field, wire)?);
                    while let Some((f, w)) = inner.next_field()? {
                        if f == LIST_VALUES {
                            self.count()?;
                            self.key_value(expect_len(Message::KeyValueList, f, w)?, depth + 1)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::proto::{
        AnyValue, DecodeError, KeyValue, Limits, ProcessContext, ProcessContextView,
    };

    #[test]
    fn errors() {
        let d = |b: &[u8]| {
            ProcessContextView::decode(b, &Limits::default())
                .map(|_| ())
                .map_err(|e| e.kind())
        };
        assert_eq!(d(&[]), Ok(()));
        assert_eq!(d(&[0x12, 0x05, 0x0a]), Err("truncated"));
        assert_eq!(d(&[0x10, 0x01]), Err("wrong_wire_type"));
        assert_eq!(d(&[0x12, 0x03, 0x0a, 0x01, 0xff]), Err("invalid_utf8"));
        assert_eq!(
            d(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err("overlong_varint")
        );
        assert_eq!(d(&[0x1b]), Err("invalid_wire_type"));
        assert_eq!(d(&[0x07]), Err("invalid_field_number"));
        // Unknown field 3 of each wire type is skipped.
        assert_eq!(
            d(&[0x18, 0x01, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0x1a, 0x00, 0x1d, 0, 0, 0, 0]),
            Ok(())
        );
    }

    /// `ProcessContext { attributes: [KeyValue { key: "k", value: <depth nested arrays> }] }`.
    fn nested(depth: usize, out: &mut [u8; 256]) -> usize {
        let mut cur = [0u8; 256];
        let mut tmp = [0u8; 256];
        // Innermost AnyValue: an empty array.
        cur[..2].copy_from_slice(&[0x2a, 0x00]);
        let mut len = 2;
        for _ in 1..depth {
            // AnyValue { array_value: ArrayValue { values: [cur] } }
            tmp[..4].copy_from_slice(&[0x2a, (len + 2) as u8, 0x0a, len as u8]);
            tmp[4..4 + len].copy_from_slice(&cur[..len]);
            len += 4;
            cur[..len].copy_from_slice(&tmp[..len]);
        }
        out[..7].copy_from_slice(&[0x12, (len + 5) as u8, 0x0a, 0x01, b'k', 0x12, len as u8]);
        out[7..7 + len].copy_from_slice(&cur[..len]);
        7 + len
    }

    #[test]
    fn depth_limit() {
        let limits = Limits::default();
        let mut buf = [0u8; 256];
        let n = nested(limits.max_depth, &mut buf);
        assert!(ProcessContextView::decode(&buf[..n], &limits).is_ok());
        let n = nested(limits.max_depth + 1, &mut buf);
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &limits),
            Err(DecodeError::TooDeep {
                limit: limits.max_depth
            })
        );
    }

    #[test]
    fn attribute_limit() {
        let kv = KeyValue {
            key: "k",
            value: AnyValue::Int(1),
        };
        let many = [kv; 9];
        let ctx = ProcessContext {
            resource: &many,
            attributes: &[],
        };
        let mut buf = [0u8; 128];
        let n = ctx.encode(&mut buf).unwrap();
        let limits = Limits {
            max_attributes: 8,
            ..Limits::default()
        };
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &limits).map_err(|e| e.kind()),
            Err("too_many_attributes")
        );
        let small = Limits {
            max_payload_size: n - 1,
            ..Limits::default()
        };
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &small).map_err(|e| e.kind()),
            Err("payload_too_large")
        );
    }
}
