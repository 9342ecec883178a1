//! Owned mirrors of the codec's borrowed views, so a decoded context outlives the copy
//! of the payload it came from.

use otel_ctx_codec::proto::{AnyValueView, KeyValueView, ProcessContextView};
use otel_ctx_codec::threadlocal::{
    ThreadlocalError, ThreadlocalView, ATTRIBUTE_KEY_MAP_KEY, SCHEMA_VERSION_KEY,
};

/// An owned `AnyValue`, mirroring [`AnyValueView`].
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedValue {
    /// No field of the oneof was set.
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

impl From<AnyValueView<'_>> for OwnedValue {
    /// Copies a view. The codec has bounded the nesting depth, so the recursion is too.
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

/// An owned `KeyValue`, mirroring [`KeyValueView`].
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedKeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: OwnedValue,
}

impl From<KeyValueView<'_>> for OwnedKeyValue {
    fn from(view: KeyValueView<'_>) -> Self {
        Self {
            key: view.key.to_owned(),
            value: view.value.into(),
        }
    }
}

/// An owned `ProcessContext`, mirroring [`ProcessContextView`]. Lists keep wire order and
/// duplicates; lookups take the last occurrence of a key, as the codec's do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnedProcessContext {
    /// `resource.attributes`.
    pub resource: Vec<OwnedKeyValue>,
    /// `attributes`: the extra attributes (field 2), such as the `threadlocal.*` keys.
    pub attributes: Vec<OwnedKeyValue>,
}

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
}

/// The thread-context reference data (`threadlocal.*` extra attributes), owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Threadlocal {
    /// `threadlocal.schema_version`, if present.
    pub schema_version: Option<String>,
    /// `threadlocal.attribute_key_map`: position = key index.
    pub attribute_key_map: Option<Vec<String>>,
}

impl Threadlocal {
    /// Checks and copies the reference data of a decoded context, with the codec's rules
    /// (field 2 only, last occurrence wins, at most 256 string names).
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

/// Keys of the reference data, which [`OwnedProcessContext::attributes`] also lists.
pub const THREADLOCAL_KEYS: [&str; 2] = [SCHEMA_VERSION_KEY, ATTRIBUTE_KEY_MAP_KEY];

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_codec::proto::{AnyValue, KeyValue, Limits, ProcessContext};
    use otel_ctx_codec::threadlocal::reference_data;

    #[test]
    fn mirrors_every_kind_and_last_occurrence() {
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
        let extra = reference_data("tlsdesc_v1_dev", &["http.route"]);
        let ctx = ProcessContext {
            resource: &resource,
            attributes: &extra,
        };
        let mut buf = [0u8; 512];
        let n = ctx.encode(&mut buf).unwrap();
        let view =
            otel_ctx_codec::ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        let owned = OwnedProcessContext::from_view(&view);
        assert_eq!(owned.resource.len(), 6);
        assert_eq!(owned.service_name(), Some("second"));
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
            Some(&OwnedValue::KvList(vec![OwnedKeyValue {
                key: "k".into(),
                value: OwnedValue::Bool(true)
            }]))
        );
        let tl = Threadlocal::from_view(&view).unwrap();
        assert_eq!(tl.schema_version.as_deref(), Some("tlsdesc_v1_dev"));
        assert_eq!(tl.attribute_key_map, Some(vec!["http.route".to_owned()]));
        assert_eq!(
            owned
                .attribute_value(THREADLOCAL_KEYS[0])
                .map(OwnedValue::type_name),
            Some("string")
        );
    }
}
