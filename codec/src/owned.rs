//! The owned model of a process context (feature `alloc`).
//!
//! [`OwnedProcessContext`], [`OwnedKeyValue`] and [`OwnedValue`] are the one owned form of
//! the payload in this workspace: a writer builds one and encodes it with
//! [`OwnedProcessContext::encode`], which runs the same encoder as the borrowed
//! [`ProcessContext`](crate::proto::ProcessContext) and so writes the same bytes for the
//! same context; a reader copies a decoded [`ProcessContextView`] into one with
//! [`OwnedProcessContext::from_view`], to keep it after the payload's buffer is gone.
//! [`Threadlocal`] is the owned thread-context reference data.
//!
//! Lists keep their order and any duplicate keys; lookups take the last occurrence of a
//! key, as the decoder's do.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::proto::{
    check_context, context_len, encode_context, AnyValue, AnyValueView, DecodeError, EncodeError,
    EncodeKeyValue, EncodeValue, KeyValue, KeyValueView, Limits, ProcessContextView, ValueRef,
};
use crate::threadlocal::{ThreadlocalError, ThreadlocalView};

pub use crate::threadlocal::THREADLOCAL_KEYS;

/// An owned `AnyValue`: every member of the oneof, or none.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedValue {
    /// No member of the oneof is set. Encodes as an `AnyValue` with no field.
    Empty,
    /// `string_value`.
    String(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(Vec<u8>),
    /// `array_value`.
    Array(Vec<OwnedValue>),
    /// `kvlist_value`.
    KvList(Vec<OwnedKeyValue>),
}

impl OwnedValue {
    /// An `array_value` of `string_value`s, such as the attribute key map.
    pub fn string_array<S: Into<String>>(strings: impl IntoIterator<Item = S>) -> Self {
        Self::Array(
            strings
                .into_iter()
                .map(|s| Self::String(s.into()))
                .collect(),
        )
    }

    /// The protobuf name of the value's type, as [`AnyValueView::type_name`] gives it.
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
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// A value on one line, the one text form of the project's tools and profiles: a string
/// as it is at the top level and quoted inside arrays and kvlists, bytes as `0x` and
/// lowercase hex, doubles as Rust writes them (`1.0`), arrays as `[a, b]`, kvlists as
/// `{key: value}`, an empty value as `(empty)`.
impl fmt::Display for OwnedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(s) => f.write_str(s),
            other => Nested(other).fmt(f),
        }
    }
}

/// A value inside an array or a kvlist: strings quoted.
struct Nested<'a>(&'a OwnedValue);

impl fmt::Display for Nested<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            OwnedValue::Empty => f.write_str("(empty)"),
            OwnedValue::String(s) => write!(f, "{s:?}"),
            OwnedValue::Bool(b) => write!(f, "{b}"),
            OwnedValue::Int(i) => write!(f, "{i}"),
            OwnedValue::Double(d) => write!(f, "{d:?}"),
            OwnedValue::Bytes(b) => write!(f, "0x{}", crate::hex::Hex(b)),
            OwnedValue::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    Nested(item).fmt(f)?;
                }
                f.write_str("]")
            }
            OwnedValue::KvList(kvs) => {
                f.write_str("{")?;
                for (i, kv) in kvs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {}", kv.key, Nested(&kv.value))?;
                }
                f.write_str("}")
            }
        }
    }
}

impl From<&str> for OwnedValue {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl From<String> for OwnedValue {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<bool> for OwnedValue {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<i64> for OwnedValue {
    fn from(i: i64) -> Self {
        Self::Int(i)
    }
}

impl From<i32> for OwnedValue {
    fn from(i: i32) -> Self {
        Self::Int(i.into())
    }
}

impl From<u32> for OwnedValue {
    fn from(i: u32) -> Self {
        Self::Int(i.into())
    }
}

impl From<f64> for OwnedValue {
    fn from(d: f64) -> Self {
        Self::Double(d)
    }
}

impl From<&[u8]> for OwnedValue {
    fn from(b: &[u8]) -> Self {
        Self::Bytes(b.to_vec())
    }
}

impl From<Vec<u8>> for OwnedValue {
    fn from(b: Vec<u8>) -> Self {
        Self::Bytes(b)
    }
}

impl From<Vec<OwnedValue>> for OwnedValue {
    fn from(values: Vec<OwnedValue>) -> Self {
        Self::Array(values)
    }
}

impl From<Vec<OwnedKeyValue>> for OwnedValue {
    fn from(entries: Vec<OwnedKeyValue>) -> Self {
        Self::KvList(entries)
    }
}

impl From<AnyValue<'_>> for OwnedValue {
    /// Copies a borrowed value to encode; a `StringArray` becomes an `Array` of `String`s,
    /// which encodes to the same bytes.
    fn from(value: AnyValue<'_>) -> Self {
        match value {
            AnyValue::String(s) => Self::String(s.to_owned()),
            AnyValue::Bool(b) => Self::Bool(b),
            AnyValue::Int(i) => Self::Int(i),
            AnyValue::Double(d) => Self::Double(d),
            AnyValue::Bytes(b) => Self::Bytes(b.to_vec()),
            AnyValue::Array(values) => Self::Array(values.iter().map(|&v| v.into()).collect()),
            AnyValue::KvList(entries) => {
                Self::KvList(entries.iter().map(|&kv| kv.into()).collect())
            }
            AnyValue::StringArray(strings) => Self::string_array(strings.iter().copied()),
        }
    }
}

impl From<AnyValueView<'_>> for OwnedValue {
    /// Copies a decoded value. The decoder has bounded the nesting depth, so this
    /// recursion is bounded too.
    fn from(view: AnyValueView<'_>) -> Self {
        match view {
            AnyValueView::Empty => Self::Empty,
            AnyValueView::String(s) => Self::String(s.to_owned()),
            AnyValueView::Bool(b) => Self::Bool(b),
            AnyValueView::Int(i) => Self::Int(i),
            AnyValueView::Double(d) => Self::Double(d),
            AnyValueView::Bytes(b) => Self::Bytes(b.to_vec()),
            AnyValueView::Array(a) => Self::Array(a.iter().map(Self::from).collect()),
            AnyValueView::KvList(l) => Self::KvList(l.iter().map(OwnedKeyValue::from).collect()),
        }
    }
}

impl EncodeValue for OwnedValue {
    type KeyValue = OwnedKeyValue;

    fn value_ref(&self) -> ValueRef<'_, Self, OwnedKeyValue> {
        match self {
            Self::Empty => ValueRef::Empty,
            Self::String(s) => ValueRef::String(s),
            Self::Bool(b) => ValueRef::Bool(*b),
            Self::Int(i) => ValueRef::Int(*i),
            Self::Double(d) => ValueRef::Double(*d),
            Self::Bytes(b) => ValueRef::Bytes(b),
            Self::Array(values) => ValueRef::Array(values),
            Self::KvList(entries) => ValueRef::KvList(entries),
        }
    }
}

/// An owned `KeyValue`.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedKeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: OwnedValue,
}

impl OwnedKeyValue {
    /// A key and its value.
    pub fn new(key: impl Into<String>, value: impl Into<OwnedValue>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl From<KeyValue<'_>> for OwnedKeyValue {
    fn from(kv: KeyValue<'_>) -> Self {
        Self {
            key: kv.key.to_owned(),
            value: kv.value.into(),
        }
    }
}

impl From<KeyValueView<'_>> for OwnedKeyValue {
    fn from(view: KeyValueView<'_>) -> Self {
        Self {
            key: view.key.to_owned(),
            value: view.value.into(),
        }
    }
}

impl EncodeKeyValue for OwnedKeyValue {
    type Value = OwnedValue;

    fn key(&self) -> &str {
        &self.key
    }

    fn value(&self) -> &OwnedValue {
        &self.value
    }
}

/// An owned `ProcessContext`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnedProcessContext {
    /// `resource.attributes`.
    pub resource: Vec<OwnedKeyValue>,
    /// `attributes`: the extra attributes (field 2), such as the `threadlocal.*` keys.
    pub attributes: Vec<OwnedKeyValue>,
}

/// The value of the last entry of `list` named `key`.
fn last<'a>(list: &'a [OwnedKeyValue], key: &str) -> Option<&'a OwnedValue> {
    list.iter()
        .rev()
        .find(|kv| kv.key == key)
        .map(|kv| &kv.value)
}

impl OwnedProcessContext {
    /// Copies a decoded view.
    pub fn from_view(view: &ProcessContextView<'_>) -> Self {
        Self {
            resource: view.resource().map(OwnedKeyValue::from).collect(),
            attributes: view.attributes().map(OwnedKeyValue::from).collect(),
        }
    }

    /// The value of the last resource attribute named `key`.
    pub fn resource_value(&self, key: &str) -> Option<&OwnedValue> {
        last(&self.resource, key)
    }

    /// The value of the last extra attribute named `key`.
    pub fn attribute_value(&self, key: &str) -> Option<&OwnedValue> {
        last(&self.attributes, key)
    }

    /// The resource's `service.name`, when it is a string.
    pub fn service_name(&self) -> Option<&str> {
        self.resource_value("service.name")?.as_str()
    }

    /// The resource's `service.instance.id`, when it is a string.
    pub fn service_instance_id(&self) -> Option<&str> {
        self.resource_value("service.instance.id")?.as_str()
    }

    /// The resource's `service.version`, when it is a string.
    pub fn service_version(&self) -> Option<&str> {
        self.resource_value("service.version")?.as_str()
    }

    /// Exact size of the encoded payload.
    pub fn encoded_len(&self) -> usize {
        context_len(&self.resource, &self.attributes)
    }

    /// Encodes into the start of `buf` and returns the payload size, exactly as
    /// [`ProcessContext::encode`](crate::proto::ProcessContext::encode) does: the resource
    /// is always written, an empty key is omitted, and [`OwnedValue::Empty`] is an
    /// `AnyValue` with no field.
    ///
    /// This checks no [`Limits`]: a context nested deeper, or with more attributes, than a
    /// reader accepts still encodes ([`check_limits`](Self::check_limits) says whether it
    /// would).
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        encode_context(&self.resource, &self.attributes, buf)
    }

    /// Checks that a reader decoding with `limits` accepts the encoded payload, by the
    /// same rules as
    /// [`ProcessContext::check_limits`](crate::proto::ProcessContext::check_limits): the nesting depth and the number of
    /// attributes, counted as its decoder counts them, then the payload's size. Too deep is
    /// reported before too many attributes, and both before too large.
    pub fn check_limits(&self, limits: &Limits) -> Result<(), DecodeError> {
        self.checked_len(limits).map(drop)
    }

    /// [`check_limits`](Self::check_limits), and the payload's exact size when it passes
    /// ([`encoded_len`](Self::encoded_len)), from one walk of the context.
    pub fn checked_len(&self, limits: &Limits) -> Result<usize, DecodeError> {
        check_context(&self.resource, &self.attributes, limits)
    }
}

/// The thread-context reference data (the `threadlocal.*` extra attributes), owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Threadlocal {
    /// `threadlocal.schema_version`, if present.
    pub schema_version: Option<String>,
    /// `threadlocal.attribute_key_map`, if present: position = key index.
    pub attribute_key_map: Option<Vec<String>>,
}

impl Threadlocal {
    /// Checks and copies the reference data of a decoded context, with the rules of
    /// [`ThreadlocalView::from_context`] (extra attributes only, last occurrence wins, at
    /// most 256 string names).
    pub fn from_view(view: &ProcessContextView<'_>) -> Result<Self, ThreadlocalError> {
        let tl = ThreadlocalView::from_context(view)?;
        Ok(Self {
            schema_version: tl.schema_version.map(str::to_owned),
            attribute_key_map: tl.key_map.map(|m| m.iter().map(str::to_owned).collect()),
        })
    }

    /// Whether the process publishes any thread-context reference data.
    pub const fn is_present(&self) -> bool {
        self.schema_version.is_some() || self.attribute_key_map.is_some()
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;
    use crate::proto::{Limits, ProcessContext};
    use crate::threadlocal::{reference_data, SCHEMA_TLSDESC_V1_DEV};

    /// Encodes `borrowed` and its owned copy, checks the bytes are the same, and returns
    /// them.
    fn same_bytes(borrowed: &ProcessContext<'_>) -> Vec<u8> {
        let owned = OwnedProcessContext {
            resource: borrowed.resource.iter().map(|&kv| kv.into()).collect(),
            attributes: borrowed.attributes.iter().map(|&kv| kv.into()).collect(),
        };
        assert_eq!(owned.encoded_len(), borrowed.encoded_len());
        let mut want = vec![0u8; borrowed.encoded_len()];
        assert_eq!(borrowed.encode(&mut want), Ok(want.len()));
        let mut got = vec![0xa5u8; owned.encoded_len()];
        assert_eq!(owned.encode(&mut got), Ok(got.len()));
        assert_eq!(got, want, "owned and borrowed encodings differ");
        got
    }

    fn decode(payload: &[u8]) -> ProcessContextView<'_> {
        ProcessContextView::decode(payload, &Limits::default()).unwrap()
    }

    #[test]
    fn values_on_one_line() {
        let v = OwnedValue::Array(vec![
            OwnedValue::String("a".into()),
            OwnedValue::Bytes(vec![0, 255]),
            OwnedValue::KvList(vec![OwnedKeyValue {
                key: "k".into(),
                value: OwnedValue::Double(1.0),
            }]),
            OwnedValue::Empty,
        ]);
        assert_eq!(v.to_string(), r#"["a", 0x00ff, {k: 1.0}, (empty)]"#);
        assert_eq!(OwnedValue::String("plain".into()).to_string(), "plain");
        assert_eq!(OwnedValue::Int(-3).to_string(), "-3");
    }

    #[test]
    fn every_kind_encodes_as_the_borrowed_model_does() {
        let values = [
            AnyValue::String(""),
            AnyValue::String("text"),
            AnyValue::Bool(false),
            AnyValue::Bool(true),
            AnyValue::Int(0),
            AnyValue::Int(-1),
            AnyValue::Int(i64::MAX),
            AnyValue::Double(-0.0),
            AnyValue::Double(f64::NAN),
            AnyValue::Bytes(&[]),
            AnyValue::Bytes(&[0, 255]),
            AnyValue::Array(&[]),
            AnyValue::KvList(&[]),
            AnyValue::StringArray(&[]),
            AnyValue::StringArray(&["http.route", ""]),
        ];
        for value in values {
            for key in ["", "k"] {
                let kv = [KeyValue { key, value }];
                same_bytes(&ProcessContext {
                    resource: &kv,
                    attributes: &[],
                });
                same_bytes(&ProcessContext {
                    resource: &[],
                    attributes: &kv,
                });
            }
        }
        same_bytes(&ProcessContext::default());
    }

    #[test]
    fn nested_values_encode_as_the_borrowed_model_does() {
        let deepest = [AnyValue::Array(&[]), AnyValue::StringArray(&["x", "y"])];
        let inner_kvs = [
            KeyValue {
                key: "inner",
                value: AnyValue::Array(&deepest),
            },
            KeyValue {
                key: "d",
                value: AnyValue::Double(2.5),
            },
        ];
        let elements = [
            AnyValue::Int(1),
            AnyValue::KvList(&inner_kvs),
            AnyValue::Array(&deepest),
            AnyValue::Bytes(&[7; 200]),
        ];
        let outer_kvs = [
            KeyValue {
                key: "a",
                value: AnyValue::Array(&elements),
            },
            KeyValue {
                key: "m",
                value: AnyValue::KvList(&inner_kvs),
            },
        ];
        let resource = [
            KeyValue {
                key: "service.name",
                value: AnyValue::String("svc"),
            },
            KeyValue {
                key: "outer",
                value: AnyValue::KvList(&outer_kvs),
            },
        ];
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user.id"]);
        let borrowed = ProcessContext {
            resource: &resource,
            attributes: &extra,
        };
        let payload = same_bytes(&borrowed);
        let view = decode(&payload);
        assert!(view.resource().eq(resource.iter().copied()));
        assert!(view.attributes().eq(extra.iter().copied()));

        // The owned tree written out by hand is what the conversion made.
        let deepest = OwnedValue::Array(vec![
            OwnedValue::Array(vec![]),
            OwnedValue::string_array(["x", "y"]),
        ]);
        let inner = vec![
            OwnedKeyValue::new("inner", deepest.clone()),
            OwnedKeyValue::new("d", 2.5),
        ];
        let by_hand = OwnedProcessContext {
            resource: vec![
                OwnedKeyValue::new("service.name", "svc"),
                OwnedKeyValue::new(
                    "outer",
                    vec![
                        OwnedKeyValue::new(
                            "a",
                            vec![
                                OwnedValue::Int(1),
                                OwnedValue::KvList(inner.clone()),
                                deepest,
                                OwnedValue::Bytes(vec![7; 200]),
                            ],
                        ),
                        OwnedKeyValue::new("m", inner),
                    ],
                ),
            ],
            attributes: vec![
                OwnedKeyValue::new(THREADLOCAL_KEYS[0], SCHEMA_TLSDESC_V1_DEV),
                OwnedKeyValue::new(
                    THREADLOCAL_KEYS[1],
                    OwnedValue::string_array(["http.route", "user.id"]),
                ),
            ],
        };
        let mut buf = vec![0u8; by_hand.encoded_len()];
        assert_eq!(by_hand.encode(&mut buf), Ok(payload.len()));
        assert_eq!(buf, payload);
        assert_eq!(OwnedProcessContext::from_view(&view), by_hand);
    }

    #[test]
    fn empty_is_an_any_value_with_no_field() {
        let owned = OwnedProcessContext {
            resource: vec![],
            attributes: vec![
                OwnedKeyValue::new("e", OwnedValue::Empty),
                OwnedKeyValue::new("a", vec![OwnedValue::Empty, OwnedValue::Int(1)]),
            ],
        };
        let mut buf = [0u8; 64];
        let n = owned.encode(&mut buf).unwrap();
        assert_eq!(n, owned.encoded_len());
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x0a, 0x00, // resource: empty
            0x12, 0x05, // attributes[0]: KeyValue
                0x0a, 0x01, b'e', // key "e"
                0x12, 0x00, // value: AnyValue with no field
            0x12, 0x0d, // attributes[1]: KeyValue
                0x0a, 0x01, b'a', // key "a"
                0x12, 0x08, // value: AnyValue
                    0x2a, 0x06, // array_value
                        0x0a, 0x00, // values[0]: AnyValue with no field
                        0x0a, 0x02, 0x18, 0x01, // values[1]: int_value 1
        ];
        assert_eq!(&buf[..n], want);
        let view = decode(&buf[..n]);
        assert_eq!(view.attribute_value("e"), Some(AnyValueView::Empty));
        assert_eq!(OwnedProcessContext::from_view(&view), owned);
    }

    #[test]
    fn buffer_too_small() {
        let owned = OwnedProcessContext {
            resource: vec![OwnedKeyValue::new("k", "v")],
            attributes: vec![],
        };
        let n = owned.encoded_len();
        let mut buf = vec![0u8; n];
        assert_eq!(
            owned.encode(&mut buf[..n - 1]),
            Err(EncodeError::BufferTooSmall {
                needed: n,
                available: n - 1
            })
        );
        assert_eq!(owned.encode(&mut buf), Ok(n));
    }

    #[test]
    fn copies_a_view_and_takes_the_last_occurrence() {
        let inner = [AnyValue::Int(-7), AnyValue::String("x")];
        let kvs = [KeyValue {
            key: "k",
            value: AnyValue::Bool(true),
        }];
        let resource = [
            KeyValue {
                key: "service.name",
                value: AnyValue::String("first"),
            },
            KeyValue {
                key: "service.version",
                value: AnyValue::String("1.0"),
            },
            KeyValue {
                key: "service.instance.id",
                value: AnyValue::Int(3),
            },
            KeyValue {
                key: "d",
                value: AnyValue::Double(2.5),
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
            KeyValue {
                key: "service.name",
                value: AnyValue::String("second"),
            },
        ];
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route"]);
        let payload = same_bytes(&ProcessContext {
            resource: &resource,
            attributes: &extra,
        });
        let view = decode(&payload);
        let owned = OwnedProcessContext::from_view(&view);
        assert_eq!(owned.resource.len(), 8);
        assert_eq!(owned.service_name(), Some("second"));
        assert_eq!(owned.service_version(), Some("1.0"));
        assert_eq!(owned.service_instance_id(), None, "not a string");
        assert_eq!(owned.resource_value("d"), Some(&OwnedValue::Double(2.5)));
        assert_eq!(
            owned.resource_value("b"),
            Some(&OwnedValue::Bytes(vec![0, 255]))
        );
        assert_eq!(
            owned.resource_value("a"),
            Some(&OwnedValue::Array(vec![
                OwnedValue::Int(-7),
                OwnedValue::String("x".into())
            ]))
        );
        assert_eq!(
            owned.resource_value("m"),
            Some(&OwnedValue::KvList(vec![OwnedKeyValue::new("k", true)]))
        );
        assert_eq!(owned.resource_value("absent"), None);
        assert_eq!(
            owned
                .attribute_value(THREADLOCAL_KEYS[0])
                .map(OwnedValue::type_name),
            Some("string")
        );
        assert_eq!(owned.attribute_value("service.name"), None);
    }

    #[test]
    fn threadlocal_from_view() {
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user.id"]);
        let payload = same_bytes(&ProcessContext {
            resource: &[],
            attributes: &extra,
        });
        let tl = Threadlocal::from_view(&decode(&payload)).unwrap();
        assert!(tl.is_present());
        assert_eq!(tl.schema_version.as_deref(), Some(SCHEMA_TLSDESC_V1_DEV));
        assert_eq!(
            tl.attribute_key_map,
            Some(vec!["http.route".to_owned(), "user.id".to_owned()])
        );

        let none = same_bytes(&ProcessContext::default());
        assert!(!Threadlocal::from_view(&decode(&none)).unwrap().is_present());

        let wrong = [KeyValue {
            key: THREADLOCAL_KEYS[0],
            value: AnyValue::Int(1),
        }];
        let wrong = same_bytes(&ProcessContext {
            resource: &[],
            attributes: &wrong,
        });
        assert_eq!(
            Threadlocal::from_view(&decode(&wrong)),
            Err(ThreadlocalError::SchemaVersionNotString)
        );
    }

    #[test]
    fn conversions() {
        assert_eq!(OwnedValue::from("s"), OwnedValue::String("s".into()));
        assert_eq!(OwnedValue::from(String::from("s")).as_str(), Some("s"));
        assert_eq!(OwnedValue::from(true), OwnedValue::Bool(true));
        assert_eq!(OwnedValue::from(-1i32), OwnedValue::Int(-1));
        assert_eq!(OwnedValue::from(u32::MAX), OwnedValue::Int(u32::MAX.into()));
        assert_eq!(OwnedValue::from(i64::MIN), OwnedValue::Int(i64::MIN));
        assert_eq!(OwnedValue::from(0.5), OwnedValue::Double(0.5));
        assert_eq!(OwnedValue::from(&[1u8][..]), OwnedValue::Bytes(vec![1]));
        assert_eq!(OwnedValue::from(vec![1u8]), OwnedValue::Bytes(vec![1]));
        assert_eq!(
            OwnedValue::from(AnyValue::StringArray(&["a"])),
            OwnedValue::string_array(["a"])
        );
        assert_eq!(OwnedValue::Empty.type_name(), "empty");
        assert_eq!(OwnedValue::Int(1).as_str(), None);
    }
}
