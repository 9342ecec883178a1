//! The names of code objects: qualified name, file, first line, and the line of an
//! instruction from the code object's location table. Read once per code object and
//! kept in a bounded cache; a code object that was freed and whose address was reused
//! by another is told apart by its stamp (first line and file pointer) and its type.

use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::PythonError;
use super::offsets::Offsets;
use otel_ctx_reader::thread::tls::TargetMemory;

/// The longest name or file kept, in characters; a longer one is cut.
pub const MAX_NAME_CHARS: usize = 512;

/// The largest location table read; a code object with a longer one has no lines (its
/// first line stands for them).
pub const MAX_LINE_TABLE: usize = 64 * 1024;

/// The most code objects the cache keeps before it starts again.
pub const MAX_CACHED_CODES: usize = 16 * 1024;

/// The most bytes the cache's names and location tables take before it starts again.
pub const MAX_CACHE_BYTES: usize = 16 << 20;

/// What a code object says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname`, such as `Worker.run`.
    pub qualname: Arc<str>,
    /// `co_filename`.
    pub filename: Arc<str>,
    /// `co_firstlineno`.
    pub first_line: u32,
    /// `_co_firsttraceable`: a frame whose instruction lies before it has not started
    /// (CPython's own walk skips it).
    pub first_traceable: u32,
    /// `co_linetable` (empty when it was too long to keep).
    line_table: Box<[u8]>,
}

impl CodeInfo {
    /// The line of the instruction at code unit `lasti` (its index from the start of
    /// the code), from the location table (PEP 626's format of 3.11 on); the first line
    /// when the table has none for it.
    pub fn line(&self, lasti: u32) -> u32 {
        line_at(&self.line_table, self.first_line, lasti).unwrap_or(self.first_line)
    }

    /// Bytes this entry keeps.
    fn bytes(&self) -> usize {
        self.qualname.len() + self.filename.len() + self.line_table.len() + 64
    }
}

/// Reads a varint of the location table: 6 bits per byte, low bits first, bit 6 set on
/// every byte but the last.
fn varint(table: &[u8], at: &mut usize) -> Option<u32> {
    let mut value: u32 = 0;
    let mut shift = 0;
    loop {
        let byte = *table.get(*at)?;
        *at += 1;
        value |= u32::from(byte & 63).checked_shl(shift)?;
        if byte & 64 == 0 {
            return Some(value);
        }
        shift += 6;
        if shift > 30 {
            return None;
        }
    }
}

/// A signed varint: the low bit is the sign.
fn svarint(table: &[u8], at: &mut usize) -> Option<i32> {
    let v = varint(table, at)?;
    let magnitude = (v >> 1) as i32;
    Some(if v & 1 == 1 { -magnitude } else { magnitude })
}

/// The line of code unit `lasti` from a location table (`Objects/locations.md` of
/// CPython 3.11 on): entries of a first byte `1cccclll` (code `cccc`, `lll + 1` code
/// units), and a line delta whose form the code gives. `None` for an instruction with no
/// line, or a table that ends first.
fn line_at(table: &[u8], first_line: u32, lasti: u32) -> Option<u32> {
    let mut at = 0;
    let mut line = i64::from(first_line);
    let mut unit: u64 = 0;
    while at < table.len() {
        let head = table[at];
        at += 1;
        if head & 0x80 == 0 {
            // Not the first byte of an entry: the table is not what it should be.
            return None;
        }
        let code = (head >> 3) & 15;
        let units = u64::from(head & 7) + 1;
        let delta: Option<i64> = match code {
            // No location.
            15 => None,
            // Long form: line delta, end line delta, column, end column.
            14 => {
                let d = svarint(table, &mut at)?;
                varint(table, &mut at)?;
                varint(table, &mut at)?;
                varint(table, &mut at)?;
                Some(i64::from(d))
            }
            // No column.
            13 => Some(i64::from(svarint(table, &mut at)?)),
            // One-line forms: the delta is the code less 10, two column bytes.
            10..=12 => {
                at += 2;
                Some(i64::from(code) - 10)
            }
            // Short forms: the same line, one column byte.
            _ => {
                at += 1;
                Some(0)
            }
        };
        if let Some(d) = delta {
            line += d;
        }
        if u64::from(lasti) < unit + units {
            return delta.and_then(|_| u32::try_from(line).ok());
        }
        unit += units;
    }
    None
}

/// A code object's stamp: its first line and the address of its file name. A code
/// object freed and replaced by another at the same address rarely has both alike.
pub(crate) fn stamp(first_line: u32, filename: u64) -> u64 {
    filename ^ (u64::from(first_line) << 48)
}

/// How long a code object's stamp, once read, stands for the code object at its address
/// without another read. A frame keeps its code object alive, so the address names
/// another code object only once that one was freed and its memory reused: a frame of
/// the new one is named after the old one for at most this long after the last read.
pub(crate) const STAMP_TRUST: Duration = Duration::from_millis(25);

/// The most code objects whose last stamp read is kept before the record starts again.
const MAX_STAMPS_READ: usize = 4096;

/// The stamps read of code objects, each with when the copy it came from was made.
#[derive(Debug, Default)]
pub(crate) struct StampsRead {
    read: HashMap<u64, (u64, Instant)>,
}

impl StampsRead {
    /// The stamp of code object `code`, if one was read less than [`STAMP_TRUST`]
    /// before `at`.
    pub(crate) fn fresh(&self, code: u64, at: Instant) -> Option<u64> {
        let &(stamp, read) = self.read.get(&code)?;
        (at.saturating_duration_since(read) < STAMP_TRUST).then_some(stamp)
    }

    /// Notes that `code`'s stamp read `stamp` in a copy made at `at`.
    pub(crate) fn note(&mut self, code: u64, stamp: u64, at: Instant) {
        if self.read.len() >= MAX_STAMPS_READ && !self.read.contains_key(&code) {
            self.read.clear();
        }
        self.read.insert(code, (stamp, at));
    }

    /// The code objects of `codes` whose stamps are not fresh at `at`, into `due`.
    pub(crate) fn due(&self, codes: &[u64], at: Instant, due: &mut Vec<u64>) {
        due.clear();
        due.extend(codes.iter().filter(|&&code| self.fresh(code, at).is_none()));
    }
}

fn read_word(mem: &dyn TargetMemory, what: &'static str, at: u64) -> Result<u64, PythonError> {
    mem.read_u64(at)
        .map_err(|_| PythonError::Memory { what, address: at })
}

fn read_u32(mem: &dyn TargetMemory, what: &'static str, at: u64) -> Result<u32, PythonError> {
    let mut b = [0u8; 4];
    mem.read_exact_at(at, &mut b)
        .map_err(|_| PythonError::Memory { what, address: at })?;
    Ok(u32::from_ne_bytes(b))
}

/// The text of a `str` object, at most [`MAX_NAME_CHARS`] characters (a longer one is
/// cut and ends with `…`). Compact strings only: every name CPython 3.11 on creates is
/// one.
pub(crate) fn read_str(
    mem: &dyn TargetMemory,
    offsets: &Offsets,
    object: u64,
) -> Result<String, PythonError> {
    read_str_max(mem, offsets, object, MAX_NAME_CHARS)
}

/// Like [`read_str`], cut at `max_chars` characters.
pub(crate) fn read_str_max(
    mem: &dyn TargetMemory,
    offsets: &Offsets,
    object: u64,
    max_chars: usize,
) -> Result<String, PythonError> {
    let length = read_word(
        mem,
        "a str object",
        object.wrapping_add(offsets.unicode_length),
    )?;
    let state = read_u32(
        mem,
        "a str object",
        object.wrapping_add(offsets.unicode_state),
    )?;
    // Include/cpython/unicodeobject.h: `interned:2, kind:3, compact:1, ascii:1`.
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || !matches!(kind, 1 | 2 | 4) || length > i64::MAX as u64 {
        return Err(PythonError::Malformed(
            "a str object that is not a compact string",
        ));
    }
    let data = object.wrapping_add(if ascii {
        offsets.unicode_ascii_size
    } else {
        offsets.unicode_compact_size
    });
    let chars = (length as usize).min(max_chars);
    let mut bytes = vec![0u8; chars * kind as usize];
    mem.read_exact_at(data, &mut bytes)
        .map_err(|_| PythonError::Memory {
            what: "the characters of a str object",
            address: data,
        })?;
    let mut text: String = match kind {
        1 => bytes.iter().map(|&b| char::from(b)).collect(),
        2 => bytes
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
            .map(|c| char::from_u32(c).unwrap_or('\u{fffd}'))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .map(|c| char::from_u32(c).unwrap_or('\u{fffd}'))
            .collect(),
    };
    if length as usize > chars {
        text.push('…');
    }
    Ok(text)
}

/// The bytes of a `bytes` object, or `None` when it holds more than `max`.
fn read_bytes(
    mem: &dyn TargetMemory,
    offsets: &Offsets,
    object: u64,
    max: usize,
) -> Result<Option<Vec<u8>>, PythonError> {
    let size = read_word(
        mem,
        "a bytes object",
        object.wrapping_add(offsets.bytes_size),
    )?;
    if size > max as u64 {
        return Ok(None);
    }
    let mut bytes = vec![0u8; size as usize];
    let at = object.wrapping_add(offsets.bytes_data);
    mem.read_exact_at(at, &mut bytes)
        .map_err(|_| PythonError::Memory {
            what: "the bytes of a location table",
            address: at,
        })?;
    Ok(Some(bytes))
}

/// Code objects already read, by address and stamp, within [`MAX_CACHED_CODES`] and
/// [`MAX_CACHE_BYTES`]: when either is reached the cache starts again (and counts it).
#[derive(Debug, Default)]
pub struct CodeCache {
    entries: HashMap<(u64, u64), Arc<CodeInfo>>,
    bytes: usize,
    /// How many times the cache was emptied for its bounds.
    pub resets: u64,
    /// Code objects read into it.
    pub reads: u64,
}

impl CodeCache {
    /// Code objects cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes its names and location tables take (an estimate of its memory).
    pub const fn bytes(&self) -> usize {
        self.bytes
    }

    /// The code object at `code` with stamp `stamp`, if it is cached.
    pub(crate) fn lookup(&self, code: u64, stamp: u64) -> Option<&Arc<CodeInfo>> {
        self.entries.get(&(code, stamp))
    }

    /// The code object at `code` whose stamp was `stamp` when it was sampled: from the
    /// cache, or read now. Reading checks that its type is `code_type` (`PyCode_Type`)
    /// and that its stamp is still the sampled one.
    pub(crate) fn get(
        &mut self,
        mem: &dyn TargetMemory,
        offsets: &Offsets,
        code_type: u64,
        code: u64,
        stamp_seen: u64,
    ) -> Result<Arc<CodeInfo>, PythonError> {
        if let Some(hit) = self.entries.get(&(code, stamp_seen)) {
            return Ok(hit.clone());
        }
        let ob_type = read_word(mem, "a code object", code.wrapping_add(offsets.ob_type))?;
        if ob_type != code_type {
            return Err(PythonError::NotCode { address: code });
        }
        let first_line = read_u32(
            mem,
            "a code object",
            code.wrapping_add(offsets.code_firstlineno),
        )?;
        let filename = read_word(
            mem,
            "a code object",
            code.wrapping_add(offsets.code_filename),
        )?;
        if stamp(first_line, filename) != stamp_seen {
            return Err(PythonError::Reused { address: code });
        }
        let qualname = read_word(
            mem,
            "a code object",
            code.wrapping_add(offsets.code_qualname),
        )?;
        let table = read_word(
            mem,
            "a code object",
            code.wrapping_add(offsets.code_linetable),
        )?;
        let first_traceable = read_u32(
            mem,
            "a code object",
            code.wrapping_add(offsets.code_firsttraceable),
        )?;
        let info = CodeInfo {
            qualname: read_str(mem, offsets, qualname)?.into(),
            filename: read_str(mem, offsets, filename)?.into(),
            first_line,
            first_traceable,
            line_table: read_bytes(mem, offsets, table, MAX_LINE_TABLE)?
                .unwrap_or_default()
                .into(),
        };
        let size = info.bytes();
        if self.entries.len() >= MAX_CACHED_CODES || self.bytes + size > MAX_CACHE_BYTES {
            self.entries.clear();
            self.bytes = 0;
            self.resets += 1;
        }
        self.reads += 1;
        self.bytes += size;
        let info = Arc::new(info);
        self.entries.insert((code, stamp_seen), info.clone());
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::super::offsets::PY311;
    use super::*;

    /// Sparse fake target memory.
    #[derive(Default)]
    struct Fake(RefCell<BTreeMap<u64, u8>>);

    impl Fake {
        fn put(&self, at: u64, bytes: &[u8]) {
            let mut m = self.0.borrow_mut();
            for (i, b) in bytes.iter().enumerate() {
                m.insert(at + i as u64, *b);
            }
        }

        /// A compact ASCII str of 3.11 at `at`, saying `length` characters.
        fn str(&self, at: u64, length: u64, text: &str) {
            self.put(at + 16, &length.to_ne_bytes());
            self.put(at + 32, &((1u32 << 2) | (1 << 5) | (1 << 6)).to_ne_bytes());
            self.put(at + 48, text.as_bytes());
        }

        /// A 3.11 code object at `at` of type `ty`, named `name`, first line `line`.
        fn code(&self, at: u64, ty: u64, name: u64, line: u32) {
            self.put(at + 8, &ty.to_ne_bytes());
            self.put(at + 72, &line.to_ne_bytes());
            self.put(at + 112, &0x9000u64.to_ne_bytes());
            self.put(at + 128, &name.to_ne_bytes());
            self.put(at + 136, &0xa000u64.to_ne_bytes());
            self.put(at + 168, &0u32.to_ne_bytes());
        }
    }

    impl TargetMemory for Fake {
        fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let m = self.0.borrow();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *m
                    .get(&(addr + i as u64))
                    .ok_or_else(|| std::io::Error::from_raw_os_error(14))?;
            }
            Ok(())
        }
    }

    #[test]
    fn a_freed_and_reused_code_object_is_not_misnamed() {
        const CODE_TYPE: u64 = 0x5000;
        let mem = Fake::default();
        mem.str(0x9000, 4, "a.py");
        mem.str(0x8000, 3, "old");
        mem.str(0x8100, 3, "new");
        mem.put(0xa000 + 16, &0u64.to_ne_bytes());
        mem.code(0x1000, CODE_TYPE, 0x8000, 10);
        let mut cache = CodeCache::default();
        let old = stamp(10, 0x9000);
        let info = cache.get(&mem, &PY311, CODE_TYPE, 0x1000, old).unwrap();
        assert_eq!(
            (&*info.qualname, &*info.filename, info.first_line),
            ("old", "a.py", 10)
        );
        // Freed, and another code object at the same address: sampled with its own
        // stamp, it is read again, not taken from the cache.
        mem.code(0x1000, CODE_TYPE, 0x8100, 20);
        let new = stamp(20, 0x9000);
        let info = cache.get(&mem, &PY311, CODE_TYPE, 0x1000, new).unwrap();
        assert_eq!(&*info.qualname, "new");
        assert_eq!(cache.reads, 2);
        // A frame sampled with the old stamp, named after the reuse: refused.
        let mut fresh = CodeCache::default();
        assert_eq!(
            fresh.get(&mem, &PY311, CODE_TYPE, 0x1000, old),
            Err(PythonError::Reused { address: 0x1000 })
        );
        // Reused by an object that is not code: refused by its type.
        mem.code(0x1000, 0x6000, 0x8100, 20);
        assert_eq!(
            fresh.get(&mem, &PY311, CODE_TYPE, 0x1000, new),
            Err(PythonError::NotCode { address: 0x1000 })
        );
        // Unmapped: a memory error, nothing cached.
        assert!(matches!(
            fresh.get(&mem, &PY311, CODE_TYPE, 0x7777_0000, new),
            Err(PythonError::Memory { .. })
        ));
        assert!(fresh.is_empty());
    }

    #[test]
    fn location_table_lines() {
        // A function at line 10: 2 units on line 10 (short form), 3 units one line
        // further (one-line form, code 11), 1 unit with no location, 2 units 5 lines
        // back (no-column form, svarint of -5 = 11), then a long form +20.
        let table = [
            0x80 | 1, // short form 0, 2 units
            0,
            0x80 | (11 << 3) | 2, // one-line +1, 3 units
            4,
            8,
            0x80 | (15 << 3),     // no location, 1 unit
            0x80 | (13 << 3) | 1, // no column, 2 units
            11,
            0x80 | (14 << 3), // long form, 1 unit: +20 (40), end +0, col 1, end col 2
            40,
            0,
            1,
            2,
        ];
        let lines: Vec<Option<u32>> = (0..10).map(|i| line_at(&table, 10, i)).collect();
        assert_eq!(
            lines,
            [
                Some(10),
                Some(10),
                Some(11),
                Some(11),
                Some(11),
                None,
                Some(6),
                Some(6),
                Some(26),
                None
            ]
        );
        // A broken table (a continuation byte where an entry starts) has no lines.
        assert_eq!(line_at(&[0x05], 1, 0), None);
        // A varint that never ends is refused, not looped over.
        assert_eq!(
            line_at(
                &[0x80 | (13 << 3), 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f],
                1,
                0
            ),
            None
        );
    }

    /// A stamp read stands for its code object for [`STAMP_TRUST`] after its copy, and
    /// only the code objects without a fresh one are due a read.
    #[test]
    fn a_stamp_stands_for_a_while_after_it_was_read() {
        let mut read = StampsRead::default();
        let t0 = Instant::now();
        read.note(0x1000, 7, t0);
        assert_eq!(read.fresh(0x1000, t0), Some(7));
        assert_eq!(read.fresh(0x1000, t0 + STAMP_TRUST / 2), Some(7));
        assert_eq!(read.fresh(0x1000, t0 + STAMP_TRUST), None);
        assert_eq!(read.fresh(0x2000, t0), None);
        let mut due = vec![0x9];
        read.due(&[0x1000, 0x2000], t0, &mut due);
        assert_eq!(due, [0x2000]);
        read.due(&[0x1000, 0x2000], t0 + STAMP_TRUST, &mut due);
        assert_eq!(due, [0x1000, 0x2000]);
        // A new read replaces the old one.
        read.note(0x1000, 8, t0 + STAMP_TRUST);
        assert_eq!(read.fresh(0x1000, t0 + STAMP_TRUST), Some(8));
        // Bounded: past the most kept, the record starts again.
        for code in 0..MAX_STAMPS_READ as u64 + 1 {
            read.note(0x10_0000 + code, 1, t0);
        }
        assert!(read.read.len() <= MAX_STAMPS_READ);
    }
}
