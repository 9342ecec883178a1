//! The thread-context reference data a process keeps in its process context's extra
//! attributes (field 2, never the resource): `threadlocal.schema_version` and
//! `threadlocal.attribute_key_map`.

use core::fmt;

use crate::proto::{AnyValue, AnyValueView, ArrayView, KeyValue, ProcessContextView};

/// Key of the schema version attribute.
pub const SCHEMA_VERSION_KEY: &str = "threadlocal.schema_version";
/// Key of the attribute key map.
pub const ATTRIBUTE_KEY_MAP_KEY: &str = "threadlocal.attribute_key_map";
/// Schema of TLS records published through `otel_thread_ctx_v1` (development name).
pub const SCHEMA_TLSDESC_V1_DEV: &str = "tlsdesc_v1_dev";
/// The name the TLS schema will take once final.
pub const SCHEMA_TLS_V1: &str = "tls_v1";
/// Schema of Go processes, whose readers read pprof labels instead of records.
pub const SCHEMA_GO_PPROF_LABELS_V1: &str = "go_pprof_labels_v1";
/// Most names a key map can hold (key indexes are `u8`).
pub const MAX_KEY_MAP_LEN: usize = 256;
/// The name of the TLS symbol.
pub const TLS_SYMBOL: &str = "otel_thread_ctx_v1";
/// Keys of the reference data, in the order [`reference_data`] writes them.
pub const THREADLOCAL_KEYS: [&str; 2] = [SCHEMA_VERSION_KEY, ATTRIBUTE_KEY_MAP_KEY];

/// The two extra attributes for `schema_version` and `key_map`, ready to encode.
pub const fn reference_data<'a>(
    schema_version: &'a str,
    key_map: &'a [&'a str],
) -> [KeyValue<'a>; 2] {
    [
        KeyValue {
            key: SCHEMA_VERSION_KEY,
            value: AnyValue::String(schema_version),
        },
        KeyValue {
            key: ATTRIBUTE_KEY_MAP_KEY,
            value: AnyValue::StringArray(key_map),
        },
    ]
}

/// Why the reference data cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadlocalError {
    /// `threadlocal.schema_version` is not a string.
    SchemaVersionNotString,
    /// `threadlocal.attribute_key_map` is not an array.
    KeyMapNotArray,
    /// An element of the key map is not a string.
    KeyMapElementNotString {
        /// Position of the element.
        index: usize,
    },
    /// The key map has more than [`MAX_KEY_MAP_LEN`] names.
    KeyMapTooLong {
        /// Number of elements.
        len: usize,
    },
}

impl ThreadlocalError {
    /// The language-neutral error kind used in `spec-vectors/`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::SchemaVersionNotString => "schema_version_not_string",
            Self::KeyMapNotArray => "key_map_not_array",
            Self::KeyMapElementNotString { .. } => "key_map_element_not_string",
            Self::KeyMapTooLong { .. } => "key_map_too_long",
        }
    }
}

impl fmt::Display for ThreadlocalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SchemaVersionNotString => write!(f, "{SCHEMA_VERSION_KEY} is not a string"),
            Self::KeyMapNotArray => write!(f, "{ATTRIBUTE_KEY_MAP_KEY} is not an array"),
            Self::KeyMapElementNotString { index } => {
                write!(f, "{ATTRIBUTE_KEY_MAP_KEY}[{index}] is not a string")
            }
            Self::KeyMapTooLong { len } => write!(
                f,
                "{ATTRIBUTE_KEY_MAP_KEY} has {len} names, over the {MAX_KEY_MAP_LEN} a u8 index can reach"
            ),
        }
    }
}

impl core::error::Error for ThreadlocalError {}

/// The reference data found in a decoded process context.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct ThreadlocalView<'a> {
    /// `threadlocal.schema_version`, if present.
    pub schema_version: Option<&'a str>,
    /// `threadlocal.attribute_key_map`, if present.
    pub key_map: Option<KeyMapView<'a>>,
}

impl<'a> ThreadlocalView<'a> {
    /// Finds and checks the reference data in the extra attributes (the last
    /// occurrence of each key).
    pub fn from_context(ctx: &ProcessContextView<'a>) -> Result<Self, ThreadlocalError> {
        let schema_version = match ctx.attribute_value(SCHEMA_VERSION_KEY) {
            None => None,
            Some(AnyValueView::String(s)) => Some(s),
            Some(_) => return Err(ThreadlocalError::SchemaVersionNotString),
        };
        let key_map = match ctx.attribute_value(ATTRIBUTE_KEY_MAP_KEY) {
            None => None,
            Some(AnyValueView::Array(array)) => Some(KeyMapView::new(array)?),
            Some(_) => return Err(ThreadlocalError::KeyMapNotArray),
        };
        Ok(Self {
            schema_version,
            key_map,
        })
    }

    /// Number of names in the key map (0 without one).
    pub fn key_map_len(&self) -> usize {
        self.key_map.map_or(0, |m| m.len())
    }
}

/// A checked `threadlocal.attribute_key_map`: an array of at most 256 strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMapView<'a> {
    array: ArrayView<'a>,
    len: usize,
}

impl<'a> KeyMapView<'a> {
    /// Checks that every element is a string and that there are at most 256.
    pub fn new(array: ArrayView<'a>) -> Result<Self, ThreadlocalError> {
        let mut len = 0;
        for (index, value) in array.iter().enumerate() {
            if !matches!(value, AnyValueView::String(_)) {
                return Err(ThreadlocalError::KeyMapElementNotString { index });
            }
            len += 1;
        }
        if len > MAX_KEY_MAP_LEN {
            return Err(ThreadlocalError::KeyMapTooLong { len });
        }
        Ok(Self { array, len })
    }

    /// Number of names.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the map has no names.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The name of key index `index`.
    pub fn get(&self, index: u8) -> Option<&'a str> {
        self.iter().nth(usize::from(index))
    }

    /// The names in key-index order.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + Clone + 'a {
        self.array.iter().filter_map(|v| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Limits, ProcessContext};

    #[test]
    fn write_and_read() {
        let names = ["http.route", "http.method"];
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &names);
        let ctx = ProcessContext {
            resource: &[],
            attributes: &extra,
        };
        let mut buf = [0u8; 128];
        let n = ctx.encode(&mut buf).unwrap();
        let view = ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        let tl = ThreadlocalView::from_context(&view).unwrap();
        assert_eq!(tl.schema_version, Some(SCHEMA_TLSDESC_V1_DEV));
        let map = tl.key_map.unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map.get(1), Some("http.method"));
        assert_eq!(map.get(2), None);
    }

    #[test]
    fn wrong_types() {
        let extra = [KeyValue {
            key: ATTRIBUTE_KEY_MAP_KEY,
            value: AnyValue::Array(&[AnyValue::Int(1)]),
        }];
        let ctx = ProcessContext {
            resource: &[],
            attributes: &extra,
        };
        let mut buf = [0u8; 64];
        let n = ctx.encode(&mut buf).unwrap();
        let view = ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        assert_eq!(
            ThreadlocalView::from_context(&view),
            Err(ThreadlocalError::KeyMapElementNotString { index: 0 })
        );
    }
}
