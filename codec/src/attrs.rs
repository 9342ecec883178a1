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
///
/// Each value is kept as its place in the data (four bytes an entry, 1 KiB for the most
/// keys), so that the value, which a sampler hands on with every sample, is cheap to
/// move.
#[derive(Clone, Debug, Default)]
pub struct ResolvedAttrs<'a> {
    data: &'a [u8],
    entries: heapless::Vec<Kept, MAX_KEYS>,
    dropped: usize,
    max_unknown_index: Option<u8>,
    incomplete: bool,
}

/// A kept value: its key index, and its place in the data.
#[derive(Clone, Copy, Debug, Default)]
struct Kept {
    key: u8,
    len: u8,
    start: u16,
}

/// The most bytes of attrs-data resolved: the record's `attrs_data_size` is 16 bits wide.
const MAX_RESOLVED_DATA: usize = u16::MAX as usize;

impl<'a> ResolvedAttrs<'a> {
    /// Resolves `attrs_data` against a key map of `key_map_len` names.
    pub fn resolve(attrs_data: &'a [u8], key_map_len: usize) -> Self {
        let mut out = Self {
            data: attrs_data,
            ..Self::default()
        };
        let within = &attrs_data[..attrs_data.len().min(MAX_RESOLVED_DATA)];
        let mut iter = AttrsIter::new(within);
        while let Some((key, value)) = iter.next() {
            if usize::from(key) >= key_map_len {
                out.dropped += 1;
                out.max_unknown_index = out.max_unknown_index.max(Some(key));
                continue;
            }
            // The value ends where the rest begins; both fit 16 bits, as `within` does.
            let end = within.len() - iter.remainder().len();
            let kept = Kept {
                key,
                len: value.len() as u8,
                start: (end - value.len()) as u16,
            };
            match out.entries.binary_search_by_key(&key, |k| k.key) {
                Ok(i) => out.entries[i] = kept,
                Err(i) => {
                    // At most MAX_KEYS distinct u8 keys exist, so the vector cannot be full.
                    let _ = out.entries.insert(i, kept);
                }
            }
        }
        out.incomplete = !iter.remainder().is_empty() || within.len() < attrs_data.len();
        out
    }

    /// The value a kept entry names.
    fn value(&self, kept: Kept) -> &'a [u8] {
        let start = usize::from(kept.start);
        self.data
            .get(start..start + usize::from(kept.len))
            .unwrap_or_default()
    }

    /// The value of key index `key`, if present.
    pub fn get(&self, key: u8) -> Option<&'a [u8]> {
        self.entries
            .binary_search_by_key(&key, |k| k.key)
            .ok()
            .map(|i| self.value(self.entries[i]))
    }

    /// `(key index, value)` pairs in key-index order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + '_ {
        self.entries.iter().map(|&k| (k.key, self.value(k)))
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

    /// Entries past the 16-bit `attrs_data_size` are not resolved: the data is said to
    /// be incomplete, and what came before is kept.
    #[test]
    fn resolve_stops_at_the_largest_record() {
        // 257 entries of 255 bytes each, key 0 then key 1: the last key-1 entry crosses
        // 65,535 bytes.
        let mut data = [0u8; 257 * 257];
        for (i, entry) in data.chunks_mut(257).enumerate() {
            entry[0] = (i % 2) as u8;
            entry[1] = 255;
            entry[2..].fill(i as u8);
        }
        let r = ResolvedAttrs::resolve(&data, 2);
        assert!(r.incomplete());
        // Entry 254 (key 0) ends at 65,535; entry 253 is key 1's last whole one.
        assert_eq!(r.get(0), Some(&[254u8; 255][..]));
        assert_eq!(r.get(1), Some(&[253u8; 255][..]));
        let whole = ResolvedAttrs::resolve(&data[..255 * 257], 2);
        assert!(!whole.incomplete());
        assert_eq!(whole.get(0), Some(&[254u8; 255][..]));
    }
}
