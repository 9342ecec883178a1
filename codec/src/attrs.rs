//! attrs-data: the thread-context record's attributes, packed entries of
//! `key: u8, len: u8, value: [u8; len]` (UTF-8 values, no padding).
//!
//! Readers stop at an entry that does not fit, use the last occurrence of a key, and
//! ignore key indexes outside the process's `threadlocal.attribute_key_map`.

use core::fmt;

/// Bytes an entry takes besides its value (`key` and `len`).
pub const ENTRY_OVERHEAD: usize = 2;
/// Longest value an entry can hold (`len` is a `u8`).
pub const MAX_VALUE_LEN: usize = u8::MAX as usize;
/// Number of distinct key indexes (`key` is a `u8`).
pub const MAX_KEYS: usize = 256;

/// Why an entry could not be written. The buffer is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrsError {
    /// The value is longer than [`MAX_VALUE_LEN`] bytes.
    ValueTooLong {
        /// Length of the value.
        len: usize,
    },
    /// The entry does not fit in the space left.
    NoRoom {
        /// Bytes the entry needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
}

impl AttrsError {
    /// The language-neutral error kind used in `spec-vectors/`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::ValueTooLong { .. } => "value_too_long",
            Self::NoRoom { .. } => "no_room",
        }
    }
}

impl fmt::Display for AttrsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ValueTooLong { len } => write!(
                f,
                "attribute value of {len} bytes is over the {MAX_VALUE_LEN}-byte limit of one entry"
            ),
            Self::NoRoom { needed, available } => write!(
                f,
                "attribute entry needs {needed} bytes but only {available} are left in the record"
            ),
        }
    }
}

impl core::error::Error for AttrsError {}

/// Bytes the entry for `value` takes.
pub const fn entry_len(value: &[u8]) -> usize {
    ENTRY_OVERHEAD + value.len()
}

/// Writes one entry at the start of `buf` and returns its length; on error `buf` is
/// untouched.
pub fn encode_entry(buf: &mut [u8], key: u8, value: &[u8]) -> Result<usize, AttrsError> {
    let len =
        u8::try_from(value.len()).map_err(|_| AttrsError::ValueTooLong { len: value.len() })?;
    let needed = entry_len(value);
    let Some(dst) = buf.get_mut(..needed) else {
        return Err(AttrsError::NoRoom {
            needed,
            available: buf.len(),
        });
    };
    dst[0] = key;
    dst[1] = len;
    dst[ENTRY_OVERHEAD..].copy_from_slice(value);
    Ok(needed)
}

/// Appends entries to a caller's buffer, never leaving a partial entry.
#[derive(Debug)]
pub struct AttrsWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> AttrsWriter<'b> {
    /// Starts writing at the beginning of `buf`.
    pub fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, len: 0 }
    }

    /// Appends one entry, or returns an error and leaves the buffer as it was.
    pub fn push(&mut self, key: u8, value: &[u8]) -> Result<(), AttrsError> {
        self.len += encode_entry(&mut self.buf[self.len..], key, value)?;
        Ok(())
    }

    /// Bytes written so far: the `attrs_data_size`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The encoded attrs-data.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Iterates over the entries of attrs-data, without copying; stops at an entry that
/// does not fit.
#[derive(Clone, Debug)]
pub struct AttrsIter<'a> {
    rest: &'a [u8],
}

impl<'a> AttrsIter<'a> {
    /// Iterates over `attrs_data` (exactly `attrs_data_size` bytes).
    pub const fn new(attrs_data: &'a [u8]) -> Self {
        Self { rest: attrs_data }
    }

    /// The bytes not consumed: after the iterator ended, non-empty means the data ended
    /// in an incomplete entry.
    pub const fn remainder(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for AttrsIter<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let [key, len, tail @ ..] = self.rest else {
            return None;
        };
        let value = tail.get(..usize::from(*len))?;
        let key = *key;
        self.rest = &tail[value.len()..];
        Some((key, value))
    }
}

/// The attributes a reader keeps: one value per key index (the last occurrence), only
/// for indexes inside the key map, ordered by key index.
#[derive(Clone, Debug, Default)]
pub struct ResolvedAttrs<'a> {
    entries: heapless::Vec<(u8, &'a [u8]), MAX_KEYS>,
    dropped: usize,
    max_unknown_index: Option<u8>,
    incomplete: bool,
}

impl<'a> ResolvedAttrs<'a> {
    /// Resolves `attrs_data` against a key map of `key_map_len` names.
    pub fn resolve(attrs_data: &'a [u8], key_map_len: usize) -> Self {
        let mut out = Self::default();
        let mut iter = AttrsIter::new(attrs_data);
        for (key, value) in iter.by_ref() {
            if usize::from(key) >= key_map_len {
                out.dropped += 1;
                out.max_unknown_index = out.max_unknown_index.max(Some(key));
                continue;
            }
            match out.entries.binary_search_by_key(&key, |(k, _)| *k) {
                Ok(i) => out.entries[i].1 = value,
                Err(i) => {
                    // At most MAX_KEYS distinct u8 keys exist, so the vector cannot be full.
                    let _ = out.entries.insert(i, (key, value));
                }
            }
        }
        out.incomplete = !iter.remainder().is_empty();
        out
    }

    /// The value of key index `key`, if present.
    pub fn get(&self, key: u8) -> Option<&'a [u8]> {
        self.entries
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// `(key index, value)` pairs in key-index order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + '_ {
        self.entries.iter().copied()
    }

    /// Number of distinct keys kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key was kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries dropped because their key index is outside the key map.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// The largest key index outside the key map: a reader refreshes its cached key map
    /// once when this is set, then resolves again.
    pub fn max_unknown_index(&self) -> Option<u8> {
        self.max_unknown_index
    }

    /// Whether the data ended in an incomplete entry (which was ignored).
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_never_partial() {
        let mut buf = [0xaa; 6];
        let mut w = AttrsWriter::new(&mut buf);
        w.push(1, b"ab").unwrap();
        assert_eq!(
            w.push(2, b"ab"),
            Err(AttrsError::NoRoom {
                needed: 4,
                available: 2
            })
        );
        assert_eq!(w.as_bytes(), &[1, 2, b'a', b'b']);
        assert_eq!(&buf[4..], &[0xaa, 0xaa]);
        let long = [b'x'; 256];
        let mut buf = [0u8; 300];
        assert_eq!(
            encode_entry(&mut buf, 0, &long),
            Err(AttrsError::ValueTooLong { len: 256 })
        );
        assert_eq!(encode_entry(&mut buf, 0, &long[..255]), Ok(257));
    }

    #[test]
    fn decode_stops_at_incomplete() {
        let data = [0, 1, b'a', 1, 5, b'x'];
        let mut it = AttrsIter::new(&data);
        assert_eq!(it.next(), Some((0, &b"a"[..])));
        assert_eq!(it.next(), None);
        assert_eq!(it.remainder(), &[1, 5, b'x']);
        let mut it = AttrsIter::new(&[7]);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn resolve_last_wins_and_drops_unknown() {
        let data = [2, 1, b'a', 0, 1, b'b', 2, 1, b'c', 9, 1, b'z'];
        let r = ResolvedAttrs::resolve(&data, 3);
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(2), Some(&b"c"[..]));
        assert_eq!(r.get(0), Some(&b"b"[..]));
        assert_eq!(r.dropped(), 1);
        assert_eq!(r.max_unknown_index(), Some(9));
        assert!(!r.incomplete());
        let keys: heapless::Vec<u8, 4> = r.iter().map(|(k, _)| k).collect();
        assert_eq!(&keys[..], &[0, 2]);
    }
}
