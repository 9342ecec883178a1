//! The one encoder of a `ProcessContext` payload, over either model: exact sizes first,
//! then the fields, into the caller's buffer.

use micropb::size::{sizeof_len_record, sizeof_varint32, sizeof_varint64};
use micropb::{PbEncoder, Tag};

use super::wire::{
    AV_ARRAY, AV_BOOL, AV_BYTES, AV_DOUBLE, AV_INT, AV_KVLIST, AV_STRING, KV_KEY, KV_VALUE,
    LIST_VALUES, PC_ATTRIBUTES, PC_RESOURCE, RESOURCE_ATTRIBUTES, WIRE_I64, WIRE_LEN, WIRE_VARINT,
};
use super::{EncodeError, EncodeKeyValue, EncodeValue, ProcessContext, ValueRef};

const fn tag_len(field: u32) -> usize {
    sizeof_varint32(field << 3)
}

const fn len_field(field: u32, len: usize) -> usize {
    tag_len(field) + sizeof_len_record(len)
}

/// Size of a `KeyValue`'s body.
fn key_value_len<K: EncodeKeyValue>(kv: &K) -> usize {
    let key = if kv.key().is_empty() {
        0
    } else {
        len_field(KV_KEY, kv.key().len())
    };
    key + len_field(KV_VALUE, value_len(kv.value()))
}

/// Size of an `AnyValue`'s body.
fn value_len<V: EncodeValue>(v: &V) -> usize {
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
    let mut out = Out {
        enc: PbEncoder::new(buf),
    };
    let written = (|| {
        out.len_header(PC_RESOURCE, list_len(RESOURCE_ATTRIBUTES, resource))?;
        for kv in resource {
            out.key_value(RESOURCE_ATTRIBUTES, kv)?;
        }
        for kv in attributes {
            out.key_value(PC_ATTRIBUTES, kv)?;
        }
        Ok::<(), ()>(())
    })();
    // The sizes computed above are exact, so the encoder neither runs out of room
    // nor leaves bytes unwritten; say so loudly in tests if that ever changes.
    debug_assert!(written.is_ok() && out.enc.as_writer().is_empty());
    written.map_err(|()| EncodeError::BufferTooSmall { needed, available })?;
    Ok(needed)
}

struct Out<'b> {
    enc: PbEncoder<&'b mut [u8]>,
}

impl Out<'_> {
    fn len_header(&mut self, field: u32, len: usize) -> Result<(), ()> {
        self.enc.encode_tag(Tag::from_parts(field, WIRE_LEN))?;
        self.enc.encode_varint64(len as u64)
    }

    fn key_value<K: EncodeKeyValue>(&mut self, field: u32, kv: &K) -> Result<(), ()> {
        self.len_header(field, key_value_len(kv))?;
        if !kv.key().is_empty() {
            self.enc.encode_tag(Tag::from_parts(KV_KEY, WIRE_LEN))?;
            self.enc.encode_string(kv.key())?;
        }
        self.len_header(KV_VALUE, value_len(kv.value()))?;
        self.any_value(kv.value())
    }

    fn any_value<V: EncodeValue>(&mut self, v: &V) -> Result<(), ()> {
        match v.value_ref() {
            ValueRef::Empty => Ok(()),
            ValueRef::String(s) => self.string(s),
            ValueRef::Bool(b) => {
                self.enc.encode_tag(Tag::from_parts(AV_BOOL, WIRE_VARINT))?;
                self.enc.encode_bool(b)
            }
            ValueRef::Int(i) => {
                self.enc.encode_tag(Tag::from_parts(AV_INT, WIRE_VARINT))?;
                self.enc.encode_int64(i)
            }
            ValueRef::Double(d) => {
                self.enc.encode_tag(Tag::from_parts(AV_DOUBLE, WIRE_I64))?;
                self.enc.encode_double(d)
            }
            ValueRef::Bytes(b) => {
                self.enc.encode_tag(Tag::from_parts(AV_BYTES, WIRE_LEN))?;
                self.enc.encode_bytes(b)
            }
            ValueRef::Array(values) => {
                self.len_header(AV_ARRAY, array_len(values))?;
                for v in values {
                    self.len_header(LIST_VALUES, value_len(v))?;
                    self.any_value(v)?;
                }
                Ok(())
            }
            ValueRef::KvList(kvs) => {
                self.len_header(AV_KVLIST, list_len(LIST_VALUES, kvs))?;
                for kv in kvs {
                    self.key_value(LIST_VALUES, kv)?;
                }
                Ok(())
            }
            ValueRef::StringArray(strings) => {
                self.len_header(AV_ARRAY, string_array_len(strings))?;
                for s in strings {
                    self.len_header(LIST_VALUES, len_field(AV_STRING, s.len()))?;
                    self.string(s)?;
                }
                Ok(())
            }
        }
    }

    fn string(&mut self, s: &str) -> Result<(), ()> {
        self.enc.encode_tag(Tag::from_parts(AV_STRING, WIRE_LEN))?;
        self.enc.encode_string(s)
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
