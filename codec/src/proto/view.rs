//! Views of a checked payload: iterators and values that borrow it.

use super::validate::validate;
use super::wire::{
    Fields, Wire, AV_ARRAY, AV_BOOL, AV_BYTES, AV_DOUBLE, AV_INT, AV_KVLIST, AV_STRING, KV_KEY,
    KV_VALUE, LIST_VALUES, PC_ATTRIBUTES, PC_RESOURCE, RESOURCE_ATTRIBUTES,
};
use super::{AnyValue, DecodeError, KeyValue, Limits};

/// A decoded `ProcessContext` that borrows the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessContextView<'a> {
    bytes: &'a [u8],
}

impl<'a> ProcessContextView<'a> {
    /// Validates `payload` completely against `limits`; the view cannot fail afterwards.
    pub fn decode(payload: &'a [u8], limits: &Limits) -> Result<Self, DecodeError> {
        validate(payload, limits)?;
        Ok(Self { bytes: payload })
    }

    /// The encoded payload.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `resource.attributes`, in wire order.
    pub fn resource(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        Fields::new(self.bytes)
            .filter_map(|(f, w)| match (f, w) {
                (PC_RESOURCE, Wire::Len(b)) => Some(b),
                _ => None,
            })
            .flat_map(|res| Fields::new(res).filter_map(key_value_field(RESOURCE_ATTRIBUTES)))
    }

    /// `attributes` (the extra attributes, field 2), in wire order.
    pub fn attributes(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        Fields::new(self.bytes).filter_map(key_value_field(PC_ATTRIBUTES))
    }

    /// The value of the last resource attribute named `key`.
    pub fn resource_value(&self, key: &str) -> Option<AnyValueView<'a>> {
        self.resource()
            .filter(|kv| kv.key == key)
            .last()
            .map(|kv| kv.value)
    }

    /// The value of the last extra attribute named `key`.
    pub fn attribute_value(&self, key: &str) -> Option<AnyValueView<'a>> {
        self.attributes()
            .filter(|kv| kv.key == key)
            .last()
            .map(|kv| kv.value)
    }
}

fn key_value_field<'a>(
    number: u32,
) -> impl Fn((u32, Wire<'a>)) -> Option<KeyValueView<'a>> + Clone {
    move |(f, w)| match (f, w) {
        (n, Wire::Len(b)) if n == number => Some(KeyValueView::from_validated(b)),
        _ => None,
    }
}

/// A decoded `KeyValue`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyValueView<'a> {
    /// The key.
    pub key: &'a str,
    /// The value.
    pub value: AnyValueView<'a>,
}

impl<'a> KeyValueView<'a> {
    fn from_validated(bytes: &'a [u8]) -> Self {
        // The last occurrence of `key` wins, as for any scalar field.
        let key = Fields::new(bytes)
            .filter_map(|(f, w)| match (f, w) {
                (KV_KEY, Wire::Len(b)) => Some(core::str::from_utf8(b).unwrap_or_default()),
                _ => None,
            })
            .last()
            .unwrap_or_default();
        // Every occurrence of `value` merges into one AnyValue.
        let value = AnyValueView::from_source(AnySource {
            outer: bytes,
            field: KV_VALUE,
        });
        Self { key, value }
    }
}

/// A decoded `AnyValue`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyValueView<'a> {
    /// No field of the oneof was set.
    Empty,
    /// `string_value`.
    String(&'a str),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(&'a [u8]),
    /// `array_value`.
    Array(ArrayView<'a>),
    /// `kvlist_value`.
    KvList(KvListView<'a>),
}

/// Where an `AnyValue`'s fields are: one message, or every occurrence of field `field`
/// of an outer message, which protobuf merges into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AnySource<'a> {
    outer: &'a [u8],
    /// 0 when `outer` is the AnyValue itself.
    field: u32,
}

impl<'a> AnySource<'a> {
    const fn single(bytes: &'a [u8]) -> Self {
        Self {
            outer: bytes,
            field: 0,
        }
    }

    /// The AnyValue's fields, across all its occurrences, in wire order.
    fn fields(self) -> impl Iterator<Item = (u32, Wire<'a>)> + Clone + 'a {
        let field = self.field;
        let (single, merged) = if field == 0 {
            (Some(self.outer), None)
        } else {
            (None, Some(self.outer))
        };
        let occurrences = merged.into_iter().flat_map(move |outer| {
            Fields::new(outer).filter_map(move |(f, w)| match w {
                Wire::Len(b) if f == field => Some(b),
                _ => None,
            })
        });
        single.into_iter().chain(occurrences).flat_map(Fields::new)
    }
}

impl<'a> AnyValueView<'a> {
    /// Applies protobuf's merge rules: the last member of the oneof wins; occurrences of
    /// the same message member in a row (`array_value`, `kvlist_value`) merge, so their
    /// elements concatenate.
    fn from_source(source: AnySource<'a>) -> Self {
        let mut value = Self::Empty;
        let mut member = 0;
        let mut run_start = 0;
        for (index, (f, w)) in source.fields().enumerate() {
            if !(AV_STRING..=AV_BYTES).contains(&f) {
                continue;
            }
            if f != member {
                member = f;
                run_start = index;
            }
            value = match (f, w) {
                (AV_STRING, Wire::Len(b)) => {
                    Self::String(core::str::from_utf8(b).unwrap_or_default())
                }
                (AV_BOOL, Wire::Varint(v)) => Self::Bool(v != 0),
                (AV_INT, Wire::Varint(v)) => Self::Int(v as i64),
                (AV_DOUBLE, Wire::I64(v)) => Self::Double(f64::from_bits(v)),
                (AV_ARRAY, Wire::Len(_)) => Self::Array(ArrayView {
                    source,
                    from: run_start,
                }),
                (AV_KVLIST, Wire::Len(_)) => Self::KvList(KvListView {
                    source,
                    from: run_start,
                }),
                (AV_BYTES, Wire::Len(b)) => Self::Bytes(b),
                _ => continue,
            };
        }
        value
    }

    /// The protobuf name of the value's type (`string`, `bool`, `int`, `double`,
    /// `bytes`, `array`, `kvlist`, or `empty`).
    pub const fn type_name(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::String(_) => "string",
            Self::Bool(_) => "bool",
            Self::Int(_) => "int",
            Self::Double(_) => "double",
            Self::Bytes(_) => "bytes",
            Self::Array(_) => "array",
            Self::KvList(_) => "kvlist",
        }
    }

    /// The string, if this is a `string_value`.
    pub const fn as_str(&self) -> Option<&'a str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// A decoded `ArrayValue` (all merged occurrences).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayView<'a> {
    source: AnySource<'a>,
    /// Index, among the AnyValue's fields, of the first `array_value` of the last run.
    from: usize,
}

/// The bodies of field `member` in the last run of that oneof member.
fn member_bodies<'a>(
    source: AnySource<'a>,
    from: usize,
    member: u32,
) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
    source
        .fields()
        .skip(from)
        .filter_map(move |(f, w)| match w {
            Wire::Len(b) if f == member => Some(b),
            _ => None,
        })
}

impl<'a> ArrayView<'a> {
    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = AnyValueView<'a>> + Clone + 'a {
        member_bodies(self.source, self.from, AV_ARRAY).flat_map(|body| {
            Fields::new(body).filter_map(|(f, w)| match (f, w) {
                (LIST_VALUES, Wire::Len(b)) => {
                    Some(AnyValueView::from_source(AnySource::single(b)))
                }
                _ => None,
            })
        })
    }
}

/// A decoded `KeyValueList` (all merged occurrences).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvListView<'a> {
    source: AnySource<'a>,
    from: usize,
}

impl<'a> KvListView<'a> {
    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        member_bodies(self.source, self.from, AV_KVLIST)
            .flat_map(|body| Fields::new(body).filter_map(key_value_field(LIST_VALUES)))
    }
}

impl PartialEq<AnyValue<'_>> for AnyValueView<'_> {
    fn eq(&self, other: &AnyValue<'_>) -> bool {
        match (self, other) {
            (Self::String(a), AnyValue::String(b)) => a == b,
            (Self::Bool(a), AnyValue::Bool(b)) => a == b,
            (Self::Int(a), AnyValue::Int(b)) => a == b,
            (Self::Double(a), AnyValue::Double(b)) => a.to_bits() == b.to_bits(),
            (Self::Bytes(a), AnyValue::Bytes(b)) => a == b,
            (Self::Array(a), AnyValue::Array(b)) => a.iter().eq(b.iter().copied()),
            (Self::Array(a), AnyValue::StringArray(b)) => {
                a.iter().eq(b.iter().map(|s| AnyValue::String(s)))
            }
            (Self::KvList(a), AnyValue::KvList(b)) => a.iter().eq(b.iter().copied()),
            _ => false,
        }
    }
}

impl PartialEq<KeyValue<'_>> for KeyValueView<'_> {
    fn eq(&self, other: &KeyValue<'_>) -> bool {
        self.key == other.key && self.value == other.value
    }
}
