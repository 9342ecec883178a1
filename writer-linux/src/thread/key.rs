//! Attribute keys: positions in `threadlocal.attribute_key_map`.

/// An attribute key: its index in the process's `threadlocal.attribute_key_map`.
///
/// With `std`, [`register`](super::register) hands out keys and publishes the key map. A
/// writer that publishes its own key map (for example without `std`) makes keys with
/// [`Key::from_index`]; readers ignore entries whose index is outside the published map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(u8);

impl Key {
    /// The key at position `index` of the key map.
    pub const fn from_index(index: u8) -> Self {
        Self(index)
    }

    /// The position of this key in the key map (the `key` byte of an entry).
    pub const fn index(self) -> u8 {
        self.0
    }
}
