//! Perf maps: `/tmp/perf-<pid>.map`, where a JIT runtime names the code it generates,
//! one `START SIZE name` line per function (hex, with or without `0x`), as the Linux
//! perf tool reads them (`tools/perf/Documentation/jit-interface.txt`). Node writes one
//! with `--perf-basic-prof`, the JVM on `jcmd <pid> Compiler.perfmap`, .NET with
//! `DOTNET_PerfMapEnabled=1`, CPython 3.12 and later with `-X perf`.
//!
//! The pid in the name is the process's pid in its own pid namespace, and the path is
//! in its own root. The file is the target's, so hostile: opened with the reader's safe
//! open (a FIFO or a device is refused, never opened for reading), read under the
//! module budget (a larger file is read from its end, where the newest entries are),
//! and a line that does not parse is skipped and counted. It is read when a profile is
//! made, so that what the runtime wrote during the run counts.

use std::io::Read;

use otel_ctx_reader::files::{open_in, BudgetedReader, FileBudget, Refusal, Root};

use crate::symbolize::demangle;

/// Most functions kept of one perf map.
pub(crate) const MAX_ENTRIES: usize = 1 << 20;

/// Longest line parsed; a longer one is skipped as malformed.
const MAX_LINE: usize = 64 * 1024;

/// Longest name kept, in bytes.
const MAX_NAME: usize = 4096;

/// How far back from an address the entries that may hold it are looked through
/// (entries that overlap it, of code replaced since).
const MAX_OVERLAP: usize = 64;

/// What was read of a process's perf map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PerfMapStats {
    /// Its path in the target's root.
    pub path: String,
    /// Functions read.
    pub symbols: usize,
    /// Lines skipped because they do not parse.
    pub bad_lines: u64,
    /// Why it was refused, or read only in part.
    pub problem: Option<String>,
    /// Whether its frames that nothing names are the budget's: the map was read only
    /// in part.
    pub partial: bool,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    /// Its line's order: a later line describes the code at its address now.
    seq: u32,
    name: (u32, u32),
}

/// A perf map's functions by address.
#[derive(Debug, Default)]
pub(crate) struct PerfMap {
    entries: Vec<Entry>,
    names: String,
    pub stats: PerfMapStats,
}

impl PerfMap {
    /// The map of a process with pid `nspid` in its own namespace, in the root of
    /// process `pid`; `None` when it has none.
    pub fn read(pid: u32, nspid: u32, budget: FileBudget) -> Option<Self> {
        let path = format!("/tmp/perf-{nspid}.map");
        let mut map = Self {
            stats: PerfMapStats {
                path: path.clone(),
                ..PerfMapStats::default()
            },
            ..Self::default()
        };
        let opened = match open_in(Root::Target(pid), &path) {
            Ok(opened) => opened,
            Err(Refusal::Missing) => return None,
            Err(Refusal::NotRegular(kind)) => {
                map.stats.problem = Some(format!("refused: it is {kind}, not a regular file"));
                return Some(map);
            }
            Err(other) => {
                map.stats.problem = Some(format!("refused: it {other}"));
                return Some(map);
            }
        };
        let skip = opened.size.saturating_sub(budget.max_bytes);
        if skip > 0 {
            map.stats.partial = true;
            map.stats.problem = Some(format!(
                "{} MiB: only its last {} MiB read (the module budget)",
                opened.size >> 20,
                budget.max_bytes >> 20
            ));
        }
        let mut reader = BudgetedReader::new(opened.file, skip, budget);
        if let Err(e) = map.parse(&mut reader, skip > 0) {
            map.stats.partial = true;
            map.stats.problem = Some(match reader.exceeded() {
                Some(exceeded) => format!("read in part: {exceeded}"),
                None => format!("read in part: {e}"),
            });
        }
        map.finish();
        Some(map)
    }

    /// Parses the lines `input` gives, the first one skipped when it is the end of a
    /// line cut by where reading started.
    fn parse(&mut self, input: &mut impl Read, mut skip_first: bool) -> std::io::Result<()> {
        let mut buf = vec![0u8; 256 * 1024];
        let mut line: Vec<u8> = Vec::new();
        let mut too_long = false;
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let mut rest = &buf[..n];
            while let Some(at) = memchr::memchr(b'\n', rest) {
                let long = too_long || line.len() + at > MAX_LINE;
                if !long {
                    line.extend_from_slice(&rest[..at]);
                }
                if skip_first {
                    skip_first = false;
                } else if long {
                    self.stats.bad_lines += 1;
                } else {
                    self.line(&line);
                }
                line.clear();
                too_long = false;
                rest = &rest[at + 1..];
            }
            if line.len() + rest.len() > MAX_LINE {
                too_long = true;
                line.clear();
            } else if !too_long {
                line.extend_from_slice(rest);
            }
        }
        if too_long {
            self.stats.bad_lines += 1;
        } else if !line.is_empty() && !skip_first {
            // A last line without its newline: the runtime may be writing it.
            self.line(&line);
        }
        Ok(())
    }

    /// Takes one line: `START SIZE name`.
    fn line(&mut self, line: &[u8]) {
        match parse_line(line) {
            None => self.stats.bad_lines += 1,
            Some((_, 0, _)) => {}
            Some((start, size, name)) => {
                if self.entries.len() >= MAX_ENTRIES {
                    self.stats.partial = true;
                    self.stats.problem =
                        Some(format!("read in part: more than {MAX_ENTRIES} functions"));
                    return;
                }
                let name = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)]);
                let (Ok(at), Ok(len), Ok(seq)) = (
                    u32::try_from(self.names.len()),
                    u32::try_from(name.len()),
                    u32::try_from(self.entries.len()),
                ) else {
                    return;
                };
                self.names.push_str(&name);
                self.entries.push(Entry {
                    start,
                    end: start.saturating_add(size),
                    seq,
                    name: (at, len),
                });
            }
        }
    }

    fn finish(&mut self) {
        self.entries.sort_unstable_by_key(|e| (e.start, e.seq));
        self.entries.shrink_to_fit();
        self.stats.symbols = self.entries.len();
    }

    /// The name of the function that holds `address`, demangled: of the entries that
    /// hold it, the one written last.
    pub fn lookup(&self, address: u64) -> Option<String> {
        let after = self.entries.partition_point(|e| e.start <= address);
        let found = self.entries[after.saturating_sub(MAX_OVERLAP)..after]
            .iter()
            .filter(|e| address < e.end)
            .max_by_key(|e| e.seq)?;
        let (at, len) = (found.name.0 as usize, found.name.1 as usize);
        self.names.get(at..at + len).map(demangle)
    }
}

/// `START SIZE name`: two hex numbers (with or without `0x`), then the name, which may
/// hold spaces.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.splitn(3, |&b| b == b' ');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?;
    if name.is_empty() || start.checked_add(size).is_none() {
        return None;
    }
    Some((start, size, name))
}

fn hex(field: &[u8]) -> Option<u64> {
    let digits = field
        .strip_prefix(b"0x")
        .or_else(|| field.strip_prefix(b"0X"))
        .unwrap_or(field);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &[u8], skip_first: bool) -> PerfMap {
        let mut map = PerfMap::default();
        map.parse(&mut &text[..], skip_first).unwrap();
        map.finish();
        map
    }

    #[test]
    fn lines_of_every_runtime_and_bad_ones() {
        let map = parsed(
            b"7f0010 40 LazyCompile:*fib /srv/app.js:3\n\
              0x7f0100 0x20 Ljava/lang/String;::hashCode\n\
              7f0200 10 _ZN3foo3barE\n\
              not a line\n\
              7f0300 zz bad size\n\
              7f0400\n\
              ffffffffffffffff 10 overflows\n\
              7f0500 0 empty\n\
              7f0600 8 py::main:/srv/app.py\r\n\
              7f0700 8 last line without a newline",
            false,
        );
        assert_eq!(map.stats.bad_lines, 4);
        assert_eq!(map.stats.symbols, 5);
        assert_eq!(
            map.lookup(0x7f0010).as_deref(),
            Some("LazyCompile:*fib /srv/app.js:3")
        );
        assert_eq!(
            map.lookup(0x7f004f).as_deref(),
            Some("LazyCompile:*fib /srv/app.js:3")
        );
        assert_eq!(map.lookup(0x7f0050), None);
        assert_eq!(
            map.lookup(0x7f0110).as_deref(),
            Some("Ljava/lang/String;::hashCode")
        );
        assert_eq!(map.lookup(0x7f0200).as_deref(), Some("foo::bar"));
        assert_eq!(
            map.lookup(0x7f0600).as_deref(),
            Some("py::main:/srv/app.py")
        );
        assert_eq!(
            map.lookup(0x7f0707).as_deref(),
            Some("last line without a newline")
        );
        assert_eq!(map.lookup(0x10), None);
    }

    #[test]
    fn later_lines_replace_earlier_ones() {
        let map = parsed(b"1000 100 old\n1000 100 new\n1080 10 inner\n", false);
        assert_eq!(map.lookup(0x1000).as_deref(), Some("new"));
        assert_eq!(map.lookup(0x1085).as_deref(), Some("inner"));
        assert_eq!(map.lookup(0x10f0).as_deref(), Some("new"));
    }

    #[test]
    fn cut_and_endless_lines_are_skipped() {
        // Read from the middle of a line: its end is not a line.
        let map = parsed(b"0 zz cut\n1000 10 whole\n", true);
        assert_eq!((map.stats.bad_lines, map.stats.symbols), (0, 1));
        // A "line" of zeros with no newline (a sparse file), then a good one.
        let mut text = vec![0u8; 3 * MAX_LINE];
        text.extend_from_slice(b"\n2000 10 after\n");
        let map = parsed(&text, false);
        assert_eq!((map.stats.bad_lines, map.stats.symbols), (1, 1));
        assert_eq!(map.lookup(0x2000).as_deref(), Some("after"));
    }
}
