//! The attribute key map in a fixed-capacity structure: no heap.

use core::fmt;

use otel_ctx_codec::proto::KeyValue;
use otel_ctx_codec::threadlocal::{reference_data, MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV};

use super::Key;

/// The names of `threadlocal.attribute_key_map`, in key-index order, held in a fixed array
/// of 256 names (the most a `u8` key index reaches): append-only, no allocation.
///
/// It is the key map of the `std` registry (`thread::register`), and the one a program
/// without a heap keeps itself, publishing it with
/// [`reference_data`](Self::reference_data) in the extra attributes of its
/// `process::BufferPublisher`.
///
/// ```
/// use otel_ctx_writer::thread::KeyMap;
///
/// let mut keys = KeyMap::new();
/// let route = keys.register("http.route")?;
/// assert_eq!(keys.register("http.route")?, route);
/// assert_eq!(keys.names(), ["http.route"]);
/// # Ok::<(), otel_ctx_writer::thread::KeyMapFull>(())
/// ```
#[derive(Clone)]
pub struct KeyMap<'a> {
    names: [&'a str; MAX_KEY_MAP_LEN],
    len: usize,
}

/// The key map already holds 256 names: no key index is left for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMapFull;

impl fmt::Display for KeyMapFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the attribute key map already holds {MAX_KEY_MAP_LEN} names, the most a u8 key \
             index can reach; reuse an existing key"
        )
    }
}

impl core::error::Error for KeyMapFull {}

impl<'a> KeyMap<'a> {
    /// An empty key map.
    pub const fn new() -> Self {
        Self {
            names: [""; MAX_KEY_MAP_LEN],
            len: 0,
        }
    }

    /// The key of `name`, if it is in the map.
    pub fn key(&self, name: &str) -> Option<Key> {
        self.names()
            .iter()
            .position(|known| *known == name)
            // The map holds at most 256 names, so every position is a `u8`.
            .map(|index| Key::from_index(index as u8))
    }

    /// The key of `name`, appending it to the map if it is new. Fails only when the map
    /// is full and `name` is not in it.
    pub fn register(&mut self, name: &'a str) -> Result<Key, KeyMapFull> {
        if let Some(key) = self.key(name) {
            return Ok(key);
        }
        let index = u8::try_from(self.len).map_err(|_| KeyMapFull)?;
        self.names[self.len] = name;
        self.len += 1;
        Ok(Key::from_index(index))
    }

    /// The key index a name appended now would get, or `None` when the map is full.
    pub fn next_key(&self) -> Option<Key> {
        u8::try_from(self.len).ok().map(Key::from_index)
    }

    /// The name of `key`, if the map has that many names.
    pub fn name(&self, key: Key) -> Option<&'a str> {
        self.names().get(usize::from(key.index())).copied()
    }

    /// The names, in key-index order.
    pub fn names(&self) -> &[&'a str] {
        &self.names[..self.len]
    }

    /// Number of names.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the map has no name.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The two extra attributes that publish this map for readers:
    /// `threadlocal.schema_version = "tlsdesc_v1_dev"` and
    /// `threadlocal.attribute_key_map`, ready to encode.
    pub fn reference_data(&self) -> [KeyValue<'_>; 2] {
        reference_data(SCHEMA_TLSDESC_V1_DEV, self.names())
    }
}

impl Default for KeyMap<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for KeyMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_appended_once_and_keep_their_index() {
        let mut map = KeyMap::new();
        assert!(map.is_empty());
        let a = map.register("a").unwrap();
        let b = map.register("b").unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(map.register("a"), Ok(a));
        assert_eq!(map.names(), ["a", "b"]);
        assert_eq!(map.name(b), Some("b"));
        assert_eq!(map.name(Key::from_index(2)), None);
        assert_eq!(map.next_key(), Some(Key::from_index(2)));
    }

    #[test]
    fn holds_256_names_and_refuses_the_next() {
        // Distinct names: the index in decimal, kept in a fixed table of strings.
        let mut storage = [[0u8; 3]; 257];
        let mut map = KeyMap::new();
        let mut texts: [&str; 257] = [""; 257];
        for (i, bytes) in storage.iter_mut().enumerate() {
            bytes[0] = b'0' + (i / 100) as u8;
            bytes[1] = b'0' + (i / 10 % 10) as u8;
            bytes[2] = b'0' + (i % 10) as u8;
        }
        for (text, bytes) in texts.iter_mut().zip(&storage) {
            *text = core::str::from_utf8(bytes).unwrap();
        }
        for (i, name) in texts[..256].iter().enumerate() {
            assert_eq!(map.register(name).unwrap().index() as usize, i);
        }
        assert_eq!(map.len(), 256);
        assert_eq!(map.next_key(), None);
        assert_eq!(map.register(texts[256]), Err(KeyMapFull));
        // A name already there is still found.
        assert_eq!(map.register(texts[7]), Ok(Key::from_index(7)));
        let [schema, key_map] = map.reference_data();
        assert_eq!(schema.key, "threadlocal.schema_version");
        assert_eq!(key_map.key, "threadlocal.attribute_key_map");
    }
}
