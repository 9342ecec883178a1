//! Attributes with unique keys, of the codec's owned values.

use alloc::string::String;
use alloc::vec::Vec;

use otel_ctx_codec::owned::{OwnedKeyValue, OwnedValue};

/// Attributes with unique keys, in the order their keys were first set.
///
/// Setting a key that is already present replaces its value in place.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes {
    entries: Vec<OwnedKeyValue>,
}

impl Attributes {
    /// No attributes.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Entries whose keys are known to be unique, such as those taken out with
    /// [`into_vec`](Self::into_vec).
    pub(crate) fn from_unique(entries: Vec<OwnedKeyValue>) -> Self {
        Self { entries }
    }

    /// Sets `key` to `value`, replacing and returning the previous value of `key`.
    pub fn set(
        &mut self,
        key: impl Into<String>,
        value: impl Into<OwnedValue>,
    ) -> Option<OwnedValue> {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|a| a.key == key) {
            Some(existing) => Some(core::mem::replace(&mut existing.value, value)),
            None => {
                self.entries.push(OwnedKeyValue { key, value });
                None
            }
        }
    }

    /// [`set`](Self::set), for chaining.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<OwnedValue>) -> Self {
        self.set(key, value);
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&OwnedValue> {
        self.entries.iter().find(|a| a.key == key).map(|a| &a.value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<OwnedValue> {
        let index = self.entries.iter().position(|a| a.key == key)?;
        Some(self.entries.remove(index).value)
    }

    /// The attributes in order.
    pub fn iter(&self) -> core::slice::Iter<'_, OwnedKeyValue> {
        self.entries.iter()
    }

    /// The attributes in order, as a slice.
    pub fn as_slice(&self) -> &[OwnedKeyValue] {
        &self.entries
    }

    /// The attributes in order, as the list an
    /// [`OwnedProcessContext`](otel_ctx_codec::owned::OwnedProcessContext) holds.
    pub fn into_vec(self) -> Vec<OwnedKeyValue> {
        self.entries
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
    type Item = &'a OwnedKeyValue;
    type IntoIter = core::slice::Iter<'a, OwnedKeyValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Into<String>, V: Into<OwnedValue>> Extend<(K, V)> for Attributes {
    /// Sets each pair in turn: a later pair replaces an earlier one with the same key.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (key, value) in pairs {
            self.set(key, value);
        }
    }
}

impl<K: Into<String>, V: Into<OwnedValue>> FromIterator<(K, V)> for Attributes {
    /// Sets each pair in turn: a later pair replaces an earlier one with the same key.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut attributes = Self::new();
        attributes.extend(pairs);
        attributes
    }
}

impl FromIterator<OwnedKeyValue> for Attributes {
    /// Sets each attribute in turn: a later one replaces an earlier one with the same key.
    fn from_iter<I: IntoIterator<Item = OwnedKeyValue>>(attributes: I) -> Self {
        attributes.into_iter().map(|a| (a.key, a.value)).collect()
    }
}
