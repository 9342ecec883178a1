//! The one encoder of a `ProcessContext` payload, over either model: exact sizes first,
//! then the fields, into the caller's buffer.

use micropb::size::{sizeof_len_record, sizeof_varint32, sizeof_varint64};

use super::wire::{
    AV_ARRAY, AV_BOOL, AV_BYTES, AV_DOUBLE, AV_INT, AV_KVLIST, AV_STRING, KV_KEY, KV_VALUE,
    LIST_VALUES, PC_ATTRIBUTES, PC_RESOURCE, RESOURCE_ATTRIBUTES, WIRE_I64, WIRE_LEN, WIRE_VARINT,
};
use super::{EncodeError, EncodeKeyValue, EncodeValue, ProcessContext, ValueRef};

const fn tag_len(field: u32) -> usize {
    sizeof_varint32(field << 3)
}

pub(super) const fn len_field(field: u32, len: usize) -> usize {
    tag_len(field) + sizeof_len_record(len)
}

/// Size of a `KeyValue`'s body.
fn key_value_len<K: EncodeKeyValue>(kv: &K) -> usize {
    key_value_len_with(kv.key(), value_len(kv.value()))
}

/// Size of a `KeyValue`'s body with `key` and a value of `value_len` bytes (an empty key
/// is omitted).
pub(super) const fn key_value_len_with(key: &str, value_len: usize) -> usize {
    let key = if key.is_empty() {
        0
    } else {
        len_field(KV_KEY, key.len())
    };
    key + len_field(KV_VALUE, value_len)
}

/// Size of an `AnyValue`'s body.
pub(super) fn value_len<V: EncodeValue>(v: &V) -> usize {
    match v.value_ref() {
        ValueRef::Empty => 0,
        ValueRef::String(s) => len_field(AV_STRING, s.len()),
        ValueRef::Bool(_) => tag_len(AV_BOOL) + 1,
        ValueRef::Int(i) => tag_len(AV_INT) + sizeof_varint64(i as u64),
        ValueRef::Double(_) => tag_len(AV_DOUBLE) + 8,
        ValueRef::Bytes(b) => len_field(AV_BYTES, b.len()),
        ValueRef::Array(values) => len_field(AV_ARRAY, array_len(values)),
        ValueRef::KvList(kvs) => len_field(AV_KVLIST, list_len(LIST_VALUES, kvs)),
        ValueRef::StringArray(strings) => len_field(AV_ARRAY, string_array_len(strings)),
    }
}

/// Size of an `ArrayValue`'s body.
fn array_len<V: EncodeValue>(values: &[V]) -> usize {
    values
        .iter()
        .map(|v| len_field(LIST_VALUES, value_len(v)))
        .sum()
}

/// Size of the body of an `ArrayValue` of `string_value`s.
fn string_array_len(strings: &[&str]) -> usize {
    strings
        .iter()
        .map(|s| len_field(LIST_VALUES, len_field(AV_STRING, s.len())))
        .sum()
}

/// Size of `kvs` as repeated field `field`.
fn list_len<K: EncodeKeyValue>(field: u32, kvs: &[K]) -> usize {
    kvs.iter()
        .map(|kv| len_field(field, key_value_len(kv)))
        .sum()
}

/// Exact size of a `ProcessContext` payload.
pub(crate) fn context_len<K: EncodeKeyValue>(resource: &[K], attributes: &[K]) -> usize {
    len_field(PC_RESOURCE, list_len(RESOURCE_ATTRIBUTES, resource))
        + list_len(PC_ATTRIBUTES, attributes)
}

/// Encodes a `ProcessContext` payload into the start of `buf` and returns its size. The
/// resource is always written, even when empty; an empty key is omitted, as proto3 does.
///
/// One pass computes the exact size; a second writes the fields from the end of that
/// span toward its start, last field first, so that every nested message's length is the
/// number of bytes just written when its tag and length go in front of it. Each value is
/// visited once per pass, however deep it nests (a forward writer needs every nested
/// length before the body, and computes each subtree's size again at every level).
pub(crate) fn encode_context<K: EncodeKeyValue>(
    resource: &[K],
    attributes: &[K],
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let needed = context_len(resource, attributes);
    let available = buf.len();
    let Some(buf) = buf.get_mut(..needed) else {
        return Err(EncodeError::BufferTooSmall { needed, available });
    };
    let mut out = Backward { buf, at: needed };
    let written = (|| {
        for kv in attributes.iter().rev() {
            out.message(PC_ATTRIBUTES, |out| out.key_value(kv))?;
        }
        out.message(PC_RESOURCE, |out| {
            for kv in resource.iter().rev() {
                out.message(RESOURCE_ATTRIBUTES, |out| out.key_value(kv))?;
            }
            Ok(())
        })
    })();
    // The size computed above is exact, so the writer neither runs out of room nor
    // leaves bytes unwritten; say so loudly in tests if that ever changes.
    debug_assert!(written.is_ok() && out.at == 0);
    written.map_err(|()| EncodeError::BufferTooSmall { needed, available })?;
    let start = out.at;
    // Unreachable while the sizes are exact; keeps the payload at the buffer's start.
    buf.copy_within(start.., 0);
    Ok(needed - start)
}

/// A writer that fills `buf[..at]` from its end toward its start.
struct Backward<'b> {
    buf: &'b mut [u8],
    /// Where the bytes written so far begin.
    at: usize,
}

impl Backward<'_> {
    /// Puts `bytes` in front of what is written.
    #[inline]
    fn put(&mut self, bytes: &[u8]) -> Result<(), ()> {
        let start = self.at.checked_sub(bytes.len()).ok_or(())?;
        self.buf[start..self.at].copy_from_slice(bytes);
        self.at = start;
        Ok(())
    }

    #[inline]
    fn byte(&mut self, b: u8) -> Result<(), ()> {
        let start = self.at.checked_sub(1).ok_or(())?;
        self.buf[start] = b;
        self.at = start;
        Ok(())
    }

    #[inline]
    fn varint(&mut self, v: u64) -> Result<(), ()> {
        if v < 0x80 {
            return self.byte(v as u8);
        }
        let n = sizeof_varint64(v);
        let start = self.at.checked_sub(n).ok_or(())?;
        let mut rest = v;
        for b in &mut self.buf[start..self.at] {
            *b = (rest as u8) | 0x80;
            rest >>= 7;
        }
        // The last byte has no continuation bit (n >= 2 here).
        self.buf[self.at - 1] &= 0x7f;
        self.at = start;
        Ok(())
    }

    /// Every field number here is below 16: a tag is one byte.
    #[inline]
    fn tag(&mut self, field: u32, wire_type: u8) -> Result<(), ()> {
        debug_assert!(field < 16);
        self.byte(((field << 3) as u8) | wire_type)
    }

    /// A length-delimited field whose body `body` writes (backward).
    fn message(
        &mut self,
        field: u32,
        body: impl FnOnce(&mut Self) -> Result<(), ()>,
    ) -> Result<(), ()> {
        let end = self.at;
        body(self)?;
        self.varint((end - self.at) as u64)?;
        self.tag(field, WIRE_LEN)
    }

    /// A length-delimited field of `bytes`.
    fn bytes_field(&mut self, field: u32, bytes: &[u8]) -> Result<(), ()> {
        self.put(bytes)?;
        self.varint(bytes.len() as u64)?;
        self.tag(field, WIRE_LEN)
    }

    /// A `KeyValue`'s body: the key (omitted when empty), then the value.
    fn key_value<K: EncodeKeyValue>(&mut self, kv: &K) -> Result<(), ()> {
        self.message(KV_VALUE, |out| out.any_value(kv.value()))?;
        if kv.key().is_empty() {
            return Ok(());
        }
        self.bytes_field(KV_KEY, kv.key().as_bytes())
    }

    /// An `AnyValue`'s body.
    fn any_value<V: EncodeValue>(&mut self, v: &V) -> Result<(), ()> {
        match v.value_ref() {
            ValueRef::Empty => Ok(()),
            ValueRef::String(s) => self.bytes_field(AV_STRING, s.as_bytes()),
            ValueRef::Bool(b) => {
                self.byte(u8::from(b))?;
                self.tag(AV_BOOL, WIRE_VARINT)
            }
            ValueRef::Int(i) => {
                self.varint(i as u64)?;
                self.tag(AV_INT, WIRE_VARINT)
            }
            ValueRef::Double(d) => {
                self.put(&d.to_le_bytes())?;
                self.tag(AV_DOUBLE, WIRE_I64)
            }
            ValueRef::Bytes(b) => self.bytes_field(AV_BYTES, b),
            ValueRef::Array(values) => self.message(AV_ARRAY, |out| {
                for v in values.iter().rev() {
                    out.message(LIST_VALUES, |out| out.any_value(v))?;
                }
                Ok(())
            }),
            ValueRef::KvList(kvs) => self.message(AV_KVLIST, |out| {
                for kv in kvs.iter().rev() {
                    out.message(LIST_VALUES, |out| out.key_value(kv))?;
                }
                Ok(())
            }),
            ValueRef::StringArray(strings) => self.message(AV_ARRAY, |out| {
                for s in strings.iter().rev() {
                    out.message(LIST_VALUES, |out| out.bytes_field(AV_STRING, s.as_bytes()))?;
                }
                Ok(())
            }),
        }
    }
}

impl ProcessContext<'_> {
    /// Exact size of the encoded payload.
    pub fn encoded_len(&self) -> usize {
        context_len(self.resource, self.attributes)
    }

    /// Encodes into the start of `buf` and returns the payload size. The resource is
    /// always written, even when empty; an empty key is omitted, as proto3 does.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        encode_context(self.resource, self.attributes, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AnyValueView, Limits, ProcessContextView};
    use super::*;
    use crate::proto::{AnyValue, KeyValue};

    #[test]
    fn every_kind_round_trips() {
        let inner = [AnyValue::Int(-1), AnyValue::String("x")];
        let kvs = [KeyValue {
            key: "k",
            value: AnyValue::Bool(true),
        }];
        let resource = [
            KeyValue {
                key: "service.name",
                value: AnyValue::String("svc"),
            },
            KeyValue {
                key: "d",
                value: AnyValue::Double(1.5),
            },
            KeyValue {
                key: "b",
                value: AnyValue::Bytes(&[0, 255]),
            },
            KeyValue {
                key: "a",
                value: AnyValue::Array(&inner),
            },
            KeyValue {
                key: "m",
                value: AnyValue::KvList(&kvs),
            },
        ];
        let extra = [KeyValue {
            key: "s",
            value: AnyValue::StringArray(&["p", "q"]),
        }];
        let ctx = ProcessContext {
            resource: &resource,
            attributes: &extra,
        };
        let mut buf = [0u8; 256];
        let n = ctx.encode(&mut buf).unwrap();
        assert_eq!(ctx.checked_len(&Limits::default()), Ok(n));
        let view = ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        assert!(view.resource().eq(resource.iter().copied()));
        assert!(view.attributes().eq(extra.iter().copied()));
        assert_eq!(
            view.resource_value("service.name"),
            Some(AnyValueView::String("svc"))
        );
        assert_eq!(
            ctx.encode(&mut buf[..n - 1]),
            Err(EncodeError::BufferTooSmall {
                needed: n,
                available: n - 1
            })
        );
    }
}
