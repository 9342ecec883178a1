//! Owned attribute values: every `AnyValue` kind of the payload.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use otel_ctx_codec::proto::{AnyValue, KeyValue};

/// An owned `AnyValue`.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
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
    Array(Vec<Value>),
    /// `kvlist_value`.
    KvList(Vec<Attribute>),
}

impl Value {
    /// An `array_value` of `string_value`s.
    pub fn string_array<S: Into<String>>(strings: impl IntoIterator<Item = S>) -> Self {
        Self::Array(
            strings
                .into_iter()
                .map(|s| Self::String(s.into()))
                .collect(),
        )
    }

    /// The string, if this is a `string_value`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Self::Int(i)
    }
}

impl From<i32> for Value {
    fn from(i: i32) -> Self {
        Self::Int(i.into())
    }
}

impl From<u32> for Value {
    fn from(i: u32) -> Self {
        Self::Int(i.into())
    }
}

impl From<f64> for Value {
    fn from(d: f64) -> Self {
        Self::Double(d)
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Self::Bytes(b.to_vec())
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Self::Bytes(b)
    }
}

impl From<Vec<Value>> for Value {
    fn from(values: Vec<Value>) -> Self {
        Self::Array(values)
    }
}

impl From<Vec<Attribute>> for Value {
    fn from(entries: Vec<Attribute>) -> Self {
        Self::KvList(entries)
    }
}

impl From<AnyValue<'_>> for Value {
    /// Copies a borrowed codec value; a `StringArray` becomes an `Array` of `String`s,
    /// which encodes to the same bytes.
    fn from(value: AnyValue<'_>) -> Self {
        match value {
            AnyValue::String(s) => Self::String(s.to_string()),
            AnyValue::Bool(b) => Self::Bool(b),
            AnyValue::Int(i) => Self::Int(i),
            AnyValue::Double(d) => Self::Double(d),
            AnyValue::Bytes(b) => Self::Bytes(b.to_vec()),
            AnyValue::Array(values) => Self::Array(values.iter().map(|v| (*v).into()).collect()),
            AnyValue::KvList(entries) => {
                Self::KvList(entries.iter().map(|kv| (*kv).into()).collect())
            }
            AnyValue::StringArray(strings) => Self::string_array(strings.iter().copied()),
        }
    }
}

/// An owned `KeyValue`.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
}

impl Attribute {
    /// A key and its value.
    pub fn new(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl From<KeyValue<'_>> for Attribute {
    fn from(kv: KeyValue<'_>) -> Self {
        Self {
            key: kv.key.to_string(),
            value: kv.value.into(),
        }
    }
}

/// Attributes with unique keys, in the order their keys were first set.
///
/// Setting a key that is already present replaces its value in place.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes {
    entries: Vec<Attribute>,
}

impl Attributes {
    /// No attributes.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Sets `key` to `value`, replacing and returning the previous value of `key`.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|a| a.key == key) {
            Some(existing) => Some(core::mem::replace(&mut existing.value, value)),
            None => {
                self.entries.push(Attribute { key, value });
                None
            }
        }
    }

    /// [`set`](Self::set), for chaining.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.set(key, value);
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|a| a.key == key).map(|a| &a.value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let index = self.entries.iter().position(|a| a.key == key)?;
        Some(self.entries.remove(index).value)
    }

    /// The attributes in order.
    pub fn iter(&self) -> core::slice::Iter<'_, Attribute> {
        self.entries.iter()
    }

    /// The attributes in order, as a slice.
    pub fn as_slice(&self) -> &[Attribute] {
        &self.entries
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no attributes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = &'a Attribute;
    type IntoIter = core::slice::Iter<'a, Attribute>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Into<String>, V: Into<Value>> Extend<(K, V)> for Attributes {
    /// Sets each pair in turn: a later pair replaces an earlier one with the same key.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (key, value) in pairs {
            self.set(key, value);
        }
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Attributes {
    /// Sets each pair in turn: a later pair replaces an earlier one with the same key.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut attributes = Self::new();
        attributes.extend(pairs);
        attributes
    }
}

impl FromIterator<Attribute> for Attributes {
    /// Sets each attribute in turn: a later one replaces an earlier one with the same key.
    fn from_iter<I: IntoIterator<Item = Attribute>>(attributes: I) -> Self {
        attributes.into_iter().map(|a| (a.key, a.value)).collect()
    }
}
