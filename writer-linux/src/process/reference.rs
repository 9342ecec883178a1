//! The thread-context reference data (OTEP 4947) of the process: `threadlocal.schema_version`
//! and `threadlocal.attribute_key_map`, which every publication carries in its extra
//! attributes (field 2) once the process has set them.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use otel_ctx_codec::owned::OwnedValue;
use otel_ctx_codec::threadlocal::{
    ATTRIBUTE_KEY_MAP_KEY, MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV, SCHEMA_VERSION_KEY,
};

use super::{Attributes, Error};

/// The schema version and the key map (position `i` names key index `i`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadReference {
    schema_version: String,
    key_map: Vec<String>,
}

impl ThreadReference {
    /// What a process that attaches thread contexts of this crate announces before it
    /// registers any key: the TLS schema, and an empty key map.
    pub(crate) fn announced() -> Self {
        Self {
            schema_version: SCHEMA_TLSDESC_V1_DEV.to_string(),
            key_map: Vec::new(),
        }
    }

    /// The reference data that replaces `current` (if any): `key_map` must keep every
    /// name of the current map at its index, and hold at most 256 names.
    pub(crate) fn replacing(
        current: Option<&Self>,
        schema_version: &str,
        key_map: &[&str],
    ) -> Result<Self, Error> {
        if key_map.len() > MAX_KEY_MAP_LEN {
            return Err(Error::KeyMapTooLong { len: key_map.len() });
        }
        let published = current.map_or(&[][..], |current| current.key_map.as_slice());
        let given = key_map
            .iter()
            .copied()
            .map(Some)
            .chain(core::iter::repeat(None));
        if let Some((index, (published, given))) = published
            .iter()
            .zip(given)
            .enumerate()
            .find(|(_, (published, given))| *given != Some(published.as_str()))
        {
            return Err(Error::KeyMapNotAppendOnly {
                index,
                published: published.clone(),
                given: given.map(str::to_string),
            });
        }
        Ok(Self {
            schema_version: schema_version.to_string(),
            key_map: key_map.iter().map(|name| name.to_string()).collect(),
        })
    }

    /// `attributes` with the two `threadlocal.*` keys set to this reference data (a value
    /// the caller gave them is replaced: one definition per process).
    pub(crate) fn apply(&self, mut attributes: Attributes) -> Attributes {
        attributes.set(SCHEMA_VERSION_KEY, self.schema_version.as_str());
        attributes.set(
            ATTRIBUTE_KEY_MAP_KEY,
            OwnedValue::string_array(self.key_map.iter().map(String::as_str)),
        );
        attributes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn the_key_map_only_grows_at_its_end() {
        let first = ThreadReference::replacing(None, SCHEMA_TLSDESC_V1_DEV, &["a"]).unwrap();
        let grown =
            ThreadReference::replacing(Some(&first), SCHEMA_TLSDESC_V1_DEV, &["a", "b"]).unwrap();
        assert_eq!(grown.key_map, ["a", "b"]);
        assert_eq!(
            ThreadReference::replacing(Some(&grown), SCHEMA_TLSDESC_V1_DEV, &["b", "a"]),
            Err(Error::KeyMapNotAppendOnly {
                index: 0,
                published: "a".to_string(),
                given: Some("b".to_string()),
            })
        );
        assert_eq!(
            ThreadReference::replacing(Some(&grown), SCHEMA_TLSDESC_V1_DEV, &["a"]),
            Err(Error::KeyMapNotAppendOnly {
                index: 1,
                published: "b".to_string(),
                given: None,
            })
        );
        let names = vec!["k"; MAX_KEY_MAP_LEN + 1];
        assert_eq!(
            ThreadReference::replacing(None, SCHEMA_TLSDESC_V1_DEV, &names),
            Err(Error::KeyMapTooLong {
                len: MAX_KEY_MAP_LEN + 1
            })
        );
    }

    #[test]
    fn applied_keys_replace_the_callers() {
        let reference = ThreadReference::announced();
        let attributes = Attributes::new()
            .with("deployment.slot", "blue")
            .with(SCHEMA_VERSION_KEY, "bogus");
        let applied = reference.apply(attributes);
        assert_eq!(applied.len(), 3);
        assert_eq!(
            applied.get(SCHEMA_VERSION_KEY),
            Some(&OwnedValue::from(SCHEMA_TLSDESC_V1_DEV))
        );
        assert_eq!(
            applied.get(ATTRIBUTE_KEY_MAP_KEY),
            Some(&OwnedValue::Array(Vec::new()))
        );
    }
}
