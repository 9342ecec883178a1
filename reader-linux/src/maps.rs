//! Finding the `OTEL_CTX` mapping in `/proc/<pid>/maps` (OTEP 4719, "Read", step 1).
//!
//! A process can have millions of mappings, and the kernel holds the process's mmap lock
//! while it prints them. The file is therefore streamed once through a fixed buffer that
//! [`MapsScanner`] keeps between scans: the cost is one pass over the file and no
//! allocation that grows with it.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::ops::ControlFlow;

/// Size of the buffer a [`MapsScanner`] streams through. A maps line is at most a few
/// hundred bytes plus a path of at most `PATH_MAX` (4096) bytes, so every line fits.
pub const SCAN_BUFFER_SIZE: usize = 16 * 1024;

/// Most candidate mappings kept from one scan. The process context is a singleton, so more
/// than one `OTEL_CTX` mapping is already unusual; the rest are ignored.
pub const MAX_CANDIDATES: usize = 8;

/// The suffix the kernel appends to the name of a file-backed mapping whose file is gone.
const DELETED_SUFFIX: &[u8] = b" (deleted)";

/// The kernel's name of the vDSO's mapping.
const VDSO_NAME: &[u8] = b"[vdso]";

/// How a context mapping is named in `/proc/<pid>/maps`, which says how it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MappingKind {
    /// `[anon_shmem:OTEL_CTX]`: a memfd mapping that `prctl(PR_SET_VMA_ANON_NAME)` named.
    AnonShmem,
    /// `[anon:OTEL_CTX]`: an anonymous mapping that `prctl(PR_SET_VMA_ANON_NAME)` named.
    Anon,
    /// `/memfd:OTEL_CTX`: a memfd mapping on a kernel without `CONFIG_ANON_VMA_NAME`.
    Memfd,
}

impl MappingKind {
    /// The name as the kernel prints it, without ` (deleted)`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::AnonShmem => "[anon_shmem:OTEL_CTX]",
            Self::Anon => "[anon:OTEL_CTX]",
            Self::Memfd => "/memfd:OTEL_CTX",
        }
    }

    const ALL: [Self; 3] = [Self::AnonShmem, Self::Anon, Self::Memfd];
}

/// The name of a context mapping: one that starts with one of the three names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MappingName {
    /// Which of the names it starts with.
    pub kind: MappingKind,
    /// Whether the kernel appended ` (deleted)` (a memfd whose descriptor was closed).
    pub deleted: bool,
    /// Whether the name is exactly the kind's name, with or without ` (deleted)`; readers
    /// that compare whole names (such as the OpenTelemetry eBPF profiler) find only
    /// these.
    pub exact: bool,
}

impl MappingName {
    /// Matches a maps pathname against the context mapping names: OTEP 4719 reading step
    /// 1 takes the entries whose names *start with* `[anon_shmem:OTEL_CTX]`,
    /// `[anon:OTEL_CTX]` or `/memfd:OTEL_CTX` (` (deleted)` after a memfd name is one such
    /// case). Names that only contain one of them, or none, give `None`.
    pub fn parse(name: &[u8]) -> Option<Self> {
        MappingKind::ALL.into_iter().find_map(|kind| {
            let rest = name.strip_prefix(kind.name().as_bytes())?;
            let deleted = rest.ends_with(DELETED_SUFFIX);
            Some(Self {
                kind,
                deleted,
                exact: rest.is_empty() || rest == DELETED_SUFFIX,
            })
        })
    }
}

impl fmt::Display for MappingName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if !self.exact {
            f.write_str("...")?;
        }
        if self.deleted {
            f.write_str(" (deleted)")?;
        }
        Ok(())
    }
}

/// One parsed line of `/proc/<pid>/maps`, borrowing the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The four permission characters, such as `rw-p`.
    pub perms: [u8; 4],
    /// Offset into the mapped file.
    pub offset: u64,
    /// Device of the mapped file (`major:minor` in the file), as `st_dev` encodes it.
    pub dev: u64,
    /// Inode of the mapped file, 0 for anonymous memory.
    pub inode: u64,
    /// The pathname column, possibly empty; it may contain spaces.
    pub name: &'a [u8],
}

fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b' ')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// A hexadecimal field of at most 16 digits (maps lines have millions of them: no UTF-8
/// check, no allocation).
fn parse_hex(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

/// A decimal field (the inode), at most `u64::MAX`.
fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

impl<'a> MapsLine<'a> {
    /// Parses `start-end perms offset dev inode [name]`; `None` when the line does not
    /// have that shape.
    pub fn parse(line: &'a [u8]) -> Option<Self> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let (range, rest) = split_field(line)?;
        let dash = range.iter().position(|&b| b == b'-')?;
        let start = parse_hex(&range[..dash])?;
        let end = parse_hex(&range[dash + 1..])?;
        let (perms, rest) = split_field(rest)?;
        let perms: [u8; 4] = perms.try_into().ok()?;
        let (offset, rest) = split_field(rest)?;
        let offset = parse_hex(offset)?;
        let (dev, rest) = split_field(rest)?;
        let colon = dev.iter().position(|&b| b == b':')?;
        let major = u32::try_from(parse_hex(&dev[..colon])?).ok()?;
        let minor = u32::try_from(parse_hex(&dev[colon + 1..])?).ok()?;
        let (inode, name) = match split_field(rest) {
            Some((inode, name)) => (inode, name),
            None => (rest, &rest[rest.len()..]),
        };
        let inode = parse_decimal(inode)?;
        let padding = name.iter().take_while(|&&b| b == b' ').count();
        Some(Self {
            start,
            end,
            perms,
            offset,
            dev: rustix::fs::makedev(major, minor),
            inode,
            name: &name[padding..],
        })
    }

    /// Whether the mapping may execute code (`x` in the permissions).
    pub const fn is_executable(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// The context mapping this line describes: the name matches exactly and the mapping
    /// is not executable.
    pub fn context_mapping(&self) -> Option<ContextMapping> {
        if self.is_executable() {
            return None;
        }
        MappingName::parse(self.name).map(|name| ContextMapping {
            start: self.start,
            end: self.end,
            name,
        })
    }
}

/// A mapping whose name says it holds a process context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContextMapping {
    /// Address of the header in the publishing process.
    pub start: u64,
    /// One past the mapping's last address.
    pub end: u64,
    /// The name it has in `/proc/<pid>/maps`.
    pub name: MappingName,
}

impl ContextMapping {
    /// Size of the mapping in bytes.
    pub const fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the mapping is empty (never the case for a real one).
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a line may name a context mapping: a cheap search for `OTEL_CTX`, so the other
/// lines of a huge maps file are not parsed at all.
fn may_name_context(line: &[u8]) -> bool {
    // One searcher for every line: building one per call costs more than the search.
    static OTEL_CTX: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"OTEL_CTX"));
    OTEL_CTX.find(line).is_some()
}

/// Streams maps files through one reused fixed-size buffer.
#[derive(Debug)]
pub struct MapsScanner {
    buf: Box<[u8]>,
}

impl Default for MapsScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl MapsScanner {
    /// A scanner with a [`SCAN_BUFFER_SIZE`] buffer.
    pub fn new() -> Self {
        Self {
            buf: vec![0; SCAN_BUFFER_SIZE].into_boxed_slice(),
        }
    }

    /// Calls `f` on every line of `input` (without its newline) until `f` breaks. A line
    /// longer than the buffer cannot be a maps line this crate looks for (paths are at
    /// most 4096 bytes), and is skipped whole.
    pub fn for_each_line<R: Read>(
        &mut self,
        mut input: R,
        mut f: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> io::Result<()> {
        let buf = &mut self.buf[..];
        let mut filled = 0;
        let mut skipping_long_line = false;
        loop {
            let n = match input.read(&mut buf[filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                if filled > 0 && !skipping_long_line {
                    // The last line has no newline.
                    let _ = f(&buf[..filled]);
                }
                return Ok(());
            }
            let end = filled + n;
            let mut line_start = 0;
            // Lines are searched only in the new bytes: the carried-over part has none.
            let mut search_from = filled;
            while let Some(at) = memchr::memchr(b'\n', &buf[search_from..end]) {
                let newline = search_from + at;
                if skipping_long_line {
                    skipping_long_line = false;
                } else if f(&buf[line_start..newline]).is_break() {
                    return Ok(());
                }
                line_start = newline + 1;
                search_from = line_start;
            }
            buf.copy_within(line_start..end, 0);
            filled = end - line_start;
            if filled == buf.len() {
                skipping_long_line = true;
                filled = 0;
            }
        }
    }

    /// Calls `f` on every line of the maps of process `pid`, as
    /// [`for_each_line`](Self::for_each_line) does: `/proc/<pid>/maps`, or, when that shows
    /// nothing because the main thread has exited while others run, the maps of a live
    /// thread (`/proc/<pid>/task/<tid>/maps`), which show the same address space.
    pub fn for_each_process_line(
        &mut self,
        pid: u32,
        mut f: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> io::Result<()> {
        let mut lines = 0usize;
        let file = File::open(format!("/proc/{pid}/maps"))?;
        self.for_each_line(file, |line| {
            lines += 1;
            f(line)
        })?;
        if lines > 0 {
            return Ok(());
        }
        match crate::memory::live_thread(pid) {
            Some(tid) if tid != pid => {
                let file = File::open(format!("/proc/{pid}/task/{tid}/maps"))?;
                self.for_each_line(file, f)
            }
            _ => Ok(()),
        }
    }

    /// Finds the context mappings of process `pid` (see
    /// [`for_each_process_line`](Self::for_each_process_line)), in file order, at most
    /// [`MAX_CANDIDATES`] of them.
    pub fn find_process_context_mappings(&mut self, pid: u32) -> io::Result<Vec<ContextMapping>> {
        let mut found = Vec::new();
        self.for_each_process_line(pid, |line| collect_candidate(&mut found, line))?;
        Ok(found)
    }

    /// Finds the context mappings in a maps file, in file order, at most
    /// [`MAX_CANDIDATES`] of them.
    pub fn find_context_mappings<R: Read>(&mut self, input: R) -> io::Result<Vec<ContextMapping>> {
        let mut found = Vec::new();
        self.for_each_line(input, |line| collect_candidate(&mut found, line))?;
        Ok(found)
    }
}

/// Most distinct files a [`ProcessMaps`] keeps; further files are counted in
/// [`ProcessMaps::files_dropped`]. A process maps a few hundred at most.
pub const MAX_MAPPED_FILES: usize = 16 * 1024;

/// Most mappings kept per file: an ELF module has four or five, and a file mapped
/// thousands of times costs no more than this.
pub const MAX_RANGES_PER_FILE: usize = 64;

/// One mapping of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRange {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset of `start` in the file.
    pub offset: u64,
    /// The four permission characters.
    pub perms: [u8; 4],
}

impl FileRange {
    /// Whether the mapping may execute code.
    pub const fn is_executable(&self) -> bool {
        self.perms[2] == b'x'
    }
}

/// A file the process maps, with its mappings in address order: what a module list, a
/// symbolizer or an unwinder starts from. The path is the target's, to be opened only
/// through [`files::open_mapped`](crate::files::open_mapped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path as the target sees it, without ` (deleted)`.
    pub path: String,
    /// Whether the kernel marked the path ` (deleted)`: the file was removed or
    /// replaced since it was mapped.
    pub deleted: bool,
    /// Device of the mapped file (`st_dev`).
    pub dev: u64,
    /// Inode of the mapped file.
    pub inode: u64,
    /// Its mappings (at most [`MAX_RANGES_PER_FILE`]).
    pub ranges: Vec<FileRange>,
}

impl MappedFile {
    /// Whether any mapping of the file may execute code.
    pub fn is_executable(&self) -> bool {
        self.ranges.iter().any(FileRange::is_executable)
    }
}

/// Everything one pass over `/proc/<pid>/maps` tells: the process-context candidates
/// and the mapped files, so that finding the context and listing the modules read the
/// file once (the kernel holds the target's mmap lock while it prints it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMaps {
    /// The process.
    pub pid: u32,
    /// Context mappings, in file order, at most [`MAX_CANDIDATES`], as
    /// [`MapsScanner::find_process_context_mappings`] finds them.
    pub context_mappings: Vec<ContextMapping>,
    /// File-backed mappings by file (device and inode), in order of first appearance.
    pub files: Vec<MappedFile>,
    /// Files past [`MAX_MAPPED_FILES`], left out.
    pub files_dropped: usize,
    /// The `[vdso]` mapping (start and end): the kernel's small shared object every
    /// process maps, whose code `clock_gettime` and `gettimeofday` run. Its ELF image is
    /// read from the process's memory, not from a file.
    pub vdso: Option<std::ops::Range<u64>>,
    /// Lines read.
    pub lines: usize,
}

impl ProcessMaps {
    /// Reads the maps of process `pid` once (see
    /// [`MapsScanner::for_each_process_line`]).
    pub fn read(pid: u32) -> io::Result<Self> {
        MapsScanner::new().process_maps(pid)
    }

    /// The mapped file that holds address `addr`, and the mapping it is in.
    pub fn file_at(&self, addr: u64) -> Option<(&MappedFile, &FileRange)> {
        self.files.iter().find_map(|file| {
            let range = file
                .ranges
                .iter()
                .find(|r| (r.start..r.end).contains(&addr))?;
            Some((file, range))
        })
    }
}

/// One line of a maps file as a pass first sees it, before it is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawLine<'a> {
    /// The line, without its newline.
    pub bytes: &'a [u8],
    /// Whether the line has a `/` or a `[`. Every file path, every memfd name, every
    /// `[anon:...]` or `[anon_shmem:...]` name (so every context name) and the kernel's
    /// bracketed names have one; a line without either is unnamed memory, or one of the
    /// kernel's few other names (`anon_inode:bpf-map`).
    pub slash_or_bracket: bool,
}

impl<'a> RawLine<'a> {
    /// Looks at `bytes` once for a `/` or a `[`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            slash_or_bracket: memchr::memchr2(b'/', b'[', bytes).is_some(),
        }
    }
}

/// A caller's look at the lines of a pass: `wants` sees each raw line and says whether
/// `visit` should see it parsed.
struct Visit<'v> {
    wants: &'v mut dyn FnMut(RawLine<'_>) -> bool,
    visit: &'v mut dyn FnMut(&MapsLine<'_>),
}

/// Builds a [`ProcessMaps`] line by line.
#[derive(Default)]
struct MapsCollector {
    maps: ProcessMaps,
    by_identity: std::collections::HashMap<(u64, u64), usize>,
}

impl MapsCollector {
    /// Takes one line; `visit`, when given, sees every line parsed.
    fn line(&mut self, line: &[u8], visit: Option<&mut Visit<'_>>) -> ControlFlow<()> {
        self.maps.lines += 1;
        // One search per line: a line without a '/' or a '[' names neither a context nor
        // a file, so the million anonymous mappings of a large process cost this search
        // and nothing more.
        let marked = memchr::memchr2(b'/', b'[', line);
        if marked.is_some() {
            let _ = collect_candidate(&mut self.maps.context_mappings, line);
        }
        // The visitor sees the lines it wants, parsed; the rest is for the modules: only
        // file paths (and memfd names) have a '/', found from the first mark on.
        let raw = RawLine {
            bytes: line,
            slash_or_bracket: marked.is_some(),
        };
        let mut visit = visit.and_then(|v| if (v.wants)(raw) { Some(v) } else { None });
        if marked.is_some() && line.ends_with(VDSO_NAME) {
            if let Some(vdso) = MapsLine::parse(line).filter(|l| l.name == VDSO_NAME) {
                self.maps.vdso = Some(vdso.start..vdso.end);
            }
        }
        let has_slash = marked
            .is_some_and(|at| line[at] == b'/' || memchr::memchr(b'/', &line[at..]).is_some());
        if visit.is_none() && !has_slash {
            return ControlFlow::Continue(());
        }
        let Some(parsed) = MapsLine::parse(line) else {
            return ControlFlow::Continue(());
        };
        if let Some(visit) = visit.as_mut() {
            (visit.visit)(&parsed);
        }
        if parsed.inode == 0 || !parsed.name.starts_with(b"/") {
            return ControlFlow::Continue(());
        }
        let range = FileRange {
            start: parsed.start,
            end: parsed.end,
            offset: parsed.offset,
            perms: parsed.perms,
        };
        let key = (parsed.dev, parsed.inode);
        if let Some(&at) = self.by_identity.get(&key) {
            let ranges = &mut self.maps.files[at].ranges;
            if ranges.len() < MAX_RANGES_PER_FILE {
                ranges.push(range);
            }
            return ControlFlow::Continue(());
        }
        if self.maps.files.len() >= MAX_MAPPED_FILES {
            self.maps.files_dropped += 1;
            return ControlFlow::Continue(());
        }
        let (name, deleted) = match parsed.name.strip_suffix(DELETED_SUFFIX) {
            Some(name) => (name, true),
            None => (parsed.name, false),
        };
        self.by_identity.insert(key, self.maps.files.len());
        self.maps.files.push(MappedFile {
            path: String::from_utf8_lossy(name).into_owned(),
            deleted,
            dev: parsed.dev,
            inode: parsed.inode,
            ranges: vec![range],
        });
        ControlFlow::Continue(())
    }
}

impl MapsScanner {
    /// Reads the maps of process `pid` once into a [`ProcessMaps`].
    pub fn process_maps(&mut self, pid: u32) -> io::Result<ProcessMaps> {
        let mut collector = MapsCollector::default();
        self.for_each_process_line(pid, |line| collector.line(line, None))?;
        collector.maps.pid = pid;
        Ok(collector.maps)
    }

    /// Like [`process_maps`](Self::process_maps), and shows `visit` the lines of the same
    /// pass that `wants` asks for (it sees each raw line first, with what the pass has
    /// already learnt of it), for what a caller looks for beyond it (the checker's
    /// near-miss names and unnamed mappings). A line `wants` turns down is not parsed for
    /// it: on a process with a million anonymous mappings, parsing each costs as much
    /// again as reading the file.
    pub fn process_maps_visiting(
        &mut self,
        pid: u32,
        mut wants: impl FnMut(RawLine<'_>) -> bool,
        mut visit: impl FnMut(&MapsLine<'_>),
    ) -> io::Result<ProcessMaps> {
        let mut collector = MapsCollector::default();
        let mut look = Visit {
            wants: &mut wants,
            visit: &mut visit,
        };
        self.for_each_process_line(pid, |line| collector.line(line, Some(&mut look)))?;
        collector.maps.pid = pid;
        Ok(collector.maps)
    }

    /// A [`ProcessMaps`] of a maps file's text (recorded lines, in tests).
    pub fn maps_of<R: Read>(&mut self, pid: u32, input: R) -> io::Result<ProcessMaps> {
        let mut collector = MapsCollector::default();
        self.for_each_line(input, |line| collector.line(line, None))?;
        collector.maps.pid = pid;
        Ok(collector.maps)
    }
}

fn collect_candidate(found: &mut Vec<ContextMapping>, line: &[u8]) -> ControlFlow<()> {
    if !may_name_context(line) {
        return ControlFlow::Continue(());
    }
    let Some(mapping) = MapsLine::parse(line).and_then(|l| l.context_mapping()) else {
        return ControlFlow::Continue(());
    };
    if found.len() < MAX_CANDIDATES {
        found.push(mapping);
    } else if mapping.name.exact {
        // Full: an exact name (what every reader finds) takes the place of the last name
        // that only starts with one, so a crowd of those cannot hide the context.
        match found.iter().rposition(|m| !m.name.exact) {
            Some(at) => {
                found.remove(at);
                found.push(mapping);
            }
            None => return ControlFlow::Break(()),
        }
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines recorded from real processes: each form a publisher can produce, and
    /// neighbours that must not match.
    const RECORDED: &str = "\
55ad2272d000-55ad228bd000 rw-p 00000000 00:00 0                          [heap]
7f4138bef000-7f4138bf0000 rw-s 00000000 00:01 1027                       /dev/zero (deleted)
7f4138bf0000-7f4138bf1000 rw-p 00000000 00:01 1026                       /memfd:OTEL_CTX (deleted)
7f4138bf1000-7f4138bf2000 rw-p 00000000 00:01 1030                       /memfd:OTEL_CTX
7f4138bf2000-7f4138bf3000 rw-p 00000000 00:01 1031                       [anon_shmem:OTEL_CTX]
7f4138bf3000-7f4138bf4000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX]
7f4138bf4000-7f4138bf5000 r-xp 00000000 00:00 0                          [anon:OTEL_CTX]
7f4138bf5000-7f4138bf6000 rw-p 00000000 00:01 1032                       /memfd:OTEL_CTX_BACKUP (deleted)
7f4138bf6000-7f4138bf7000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX2]
7f4138bf7000-7f4138bf8000 rw-p 00000000 08:01 4242                       /tmp/OTEL_CTX
7f4138bf8000-7f4138bf9000 rw-p 00000000 00:00 0                          [anon:xOTEL_CTX]
7f4138c00000-7f4138c02000 r-xp 00000000 00:00 0                          [vdso]
7ffc82429000-7ffc8244a000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
7f4138bf9000-7f4138bfa000 rw-p 00000000 00:00 0 
";

    #[test]
    fn parses_every_field() {
        let line = MapsLine::parse(
            b"7f4138bf0000-7f4138bf1000 rw-p 00001000 00:01 1026                       /memfd:OTEL_CTX (deleted)",
        )
        .unwrap();
        assert_eq!(line.start, 0x7f41_38bf_0000);
        assert_eq!(line.end, 0x7f41_38bf_1000);
        assert_eq!(&line.perms, b"rw-p");
        assert_eq!(line.offset, 0x1000);
        assert_eq!(line.dev, rustix::fs::makedev(0, 1));
        assert_eq!(line.inode, 1026);
        let big = MapsLine::parse(b"55e1-55e2 r--p 00000000 103:0a 5382313 /usr/bin/x").unwrap();
        assert_eq!(big.dev, rustix::fs::makedev(0x103, 0x0a));
        assert_eq!(line.name, b"/memfd:OTEL_CTX (deleted)");
        let anon = MapsLine::parse(b"7f4138bf9000-7f4138bfa000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.name, b"");
        let bare = MapsLine::parse(b"7f4138bf9000-7f4138bfa000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(bare.name, b"");
        assert_eq!(MapsLine::parse(b"not a maps line"), None);
        assert_eq!(MapsLine::parse(b"7f-zz rw-p 0 00:00 0"), None);
        assert_eq!(MapsLine::parse(b""), None);
        // Fields that overflow, or are not numbers, refuse the line.
        assert_eq!(MapsLine::parse(b"10000000000000000-1 rw-p 0 00:00 0"), None);
        assert_eq!(
            MapsLine::parse(b"1-2 rw-p 0 00:00 18446744073709551616"),
            None
        );
        assert_eq!(MapsLine::parse(b"1-2 rw-p 0 00:00 12a"), None);
        assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_hex(b"DeadBeef"), Some(0xdead_beef));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn recorded_lines_every_form() {
        let mut scanner = MapsScanner::new();
        let found = scanner.find_context_mappings(RECORDED.as_bytes()).unwrap();
        let names: Vec<String> = found.iter().map(|m| m.name.to_string()).collect();
        // Names that start with one of the three count too (OTEP 4719 reading step 1);
        // executable mappings and names that only contain `OTEL_CTX` do not.
        assert_eq!(
            names,
            [
                "/memfd:OTEL_CTX (deleted)",
                "/memfd:OTEL_CTX",
                "[anon_shmem:OTEL_CTX]",
                "[anon:OTEL_CTX]",
                "/memfd:OTEL_CTX... (deleted)",
            ]
        );
        assert!(found[..4].iter().all(|m| m.name.exact));
        assert!(!found[4].name.exact && found[4].name.deleted);
        assert_eq!(found[0].start, 0x7f41_38bf_0000);
        assert_eq!(found[0].len(), 4096);
        assert_eq!(found[2].name.kind, MappingKind::AnonShmem);
        assert!(!found[2].name.deleted);
    }

    #[test]
    fn one_search_per_line_keeps_every_file_and_context() {
        let maps = MapsScanner::new().maps_of(1, RECORDED.as_bytes()).unwrap();
        let found = MapsScanner::new()
            .find_context_mappings(RECORDED.as_bytes())
            .unwrap();
        assert_eq!(maps.context_mappings, found);
        assert_eq!(maps.lines, RECORDED.lines().count());
        let paths: Vec<&str> = maps.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/dev/zero",
                "/memfd:OTEL_CTX",
                "/memfd:OTEL_CTX",
                "/memfd:OTEL_CTX_BACKUP",
                "/tmp/OTEL_CTX"
            ]
        );
        assert_eq!(maps.vdso, Some(0x7f41_38c0_0000..0x7f41_38c0_2000));
        // A file named like it is not the vDSO.
        let named = "1000-2000 r-xp 00000000 08:01 7 /tmp/[vdso]\n";
        assert_eq!(
            MapsScanner::new()
                .maps_of(1, named.as_bytes())
                .unwrap()
                .vdso,
            None
        );
        for line in RECORDED.lines() {
            let raw = RawLine::new(line.as_bytes());
            let name = MapsLine::parse(line.as_bytes()).unwrap().name;
            assert_eq!(raw.slash_or_bracket, !name.is_empty(), "{line}");
        }
        assert!(!RawLine::new(b"10-20 rw-s 00000000 00:0f 12 anon_inode:bpf-map").slash_or_bracket);
    }

    #[test]
    fn a_visiting_pass_shows_each_raw_line_once() {
        let mut scanner = MapsScanner::new();
        let (mut seen, mut parsed) = (Vec::new(), 0usize);
        let maps = scanner
            .process_maps_visiting(
                std::process::id(),
                |raw| {
                    assert_eq!(raw, RawLine::new(raw.bytes));
                    seen.push(raw.bytes.to_vec());
                    !raw.slash_or_bracket
                },
                |line| {
                    assert!(line.name.is_empty());
                    parsed += 1;
                },
            )
            .unwrap();
        assert_eq!(seen.len(), maps.lines);
        assert!(parsed <= seen.len());
        // The test binary and its libraries, found though their lines were not visited.
        assert!(maps.files.iter().any(|f| f.is_executable()));
    }

    #[test]
    fn names_match_by_prefix() {
        for good in [
            "[anon_shmem:OTEL_CTX]",
            "[anon_shmem:OTEL_CTX] (deleted)",
            "[anon:OTEL_CTX]",
            "[anon:OTEL_CTX] (deleted)",
            "/memfd:OTEL_CTX",
            "/memfd:OTEL_CTX (deleted)",
        ] {
            let name = MappingName::parse(good.as_bytes()).unwrap();
            assert!(name.exact, "{good:?}");
            assert_eq!(name.to_string(), good);
        }
        for (prefixed, kind, deleted) in [
            ("/memfd:OTEL_CTX ", MappingKind::Memfd, false),
            (
                "/memfd:OTEL_CTX (deleted) (deleted)",
                MappingKind::Memfd,
                true,
            ),
            ("/memfd:OTEL_CTX_BACKUP (deleted)", MappingKind::Memfd, true),
            ("[anon:OTEL_CTX]2", MappingKind::Anon, false),
            ("[anon_shmem:OTEL_CTX]x", MappingKind::AnonShmem, false),
        ] {
            let name = MappingName::parse(prefixed.as_bytes()).unwrap();
            assert_eq!(
                (name.kind, name.deleted, name.exact),
                (kind, deleted, false)
            );
        }
        for bad in [
            "OTEL_CTX",
            "/memfd:otel_ctx",
            "[anon:OTEL_CTX",
            "[anon:OTEL_CTX2]",
            "/tmp/OTEL_CTX",
            "[anon:xOTEL_CTX]",
            " (deleted)",
            "",
        ] {
            assert_eq!(MappingName::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn names_that_only_start_with_ours_cannot_hide_an_exact_one() {
        let mut maps = String::new();
        for i in 0..3 * MAX_CANDIDATES {
            maps.push_str(&format!(
                "7f41{i:08x}-7f41{:08x} rw-p 00000000 00:01 7 /memfd:OTEL_CTX_v{i} (deleted)\n",
                i + 1
            ));
        }
        maps.push_str(
            "7fff00000000-7fff00001000 rw-p 00000000 00:01 8 /memfd:OTEL_CTX (deleted)\n",
        );
        let found = MapsScanner::new()
            .find_context_mappings(maps.as_bytes())
            .unwrap();
        assert_eq!(found.len(), MAX_CANDIDATES);
        assert_eq!(found.iter().filter(|m| m.name.exact).count(), 1);
        assert_eq!(found.last().map(|m| m.start), Some(0x7fff_0000_0000));
    }

    #[test]
    fn executable_mapping_skipped() {
        let line = MapsLine::parse(
            b"7f4138bf4000-7f4138bf5000 r-xp 00000000 00:00 0                          [anon:OTEL_CTX]",
        )
        .unwrap();
        assert!(line.is_executable());
        assert_eq!(line.context_mapping(), None);
    }

    /// Reads at most `chunk` bytes per call, like the kernel's page-at-a-time output.
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.chunk.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn lines_split_across_reads() {
        let mut scanner = MapsScanner::new();
        for chunk in [1, 7, 64, 4096] {
            let mut lines = Vec::new();
            scanner
                .for_each_line(
                    Chunked {
                        data: RECORDED.as_bytes(),
                        chunk,
                    },
                    |line| {
                        lines.push(line.to_vec());
                        ControlFlow::Continue(())
                    },
                )
                .unwrap();
            let expected: Vec<Vec<u8>> = RECORDED.lines().map(|l| l.as_bytes().to_vec()).collect();
            assert_eq!(lines, expected, "chunk {chunk}");
        }
    }

    #[test]
    fn last_line_without_newline_and_overlong_lines() {
        let mut input = Vec::new();
        input.extend_from_slice(b"10-20 rw-p 00000000 00:00 0 /");
        input.extend(std::iter::repeat_n(b'a', SCAN_BUFFER_SIZE * 2));
        input.extend_from_slice(b"\n30-40 rw-p 00000000 00:00 0 [anon:OTEL_CTX]");
        let found = MapsScanner::new()
            .find_context_mappings(Chunked {
                data: &input,
                chunk: 1000,
            })
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].start, found[0].end), (0x30, 0x40));
    }

    #[test]
    fn stops_at_max_candidates() {
        let line = "10-20 rw-p 00000000 00:00 0 [anon:OTEL_CTX]\n";
        let input = line.repeat(MAX_CANDIDATES + 3);
        let found = MapsScanner::new()
            .find_context_mappings(input.as_bytes())
            .unwrap();
        assert_eq!(found.len(), MAX_CANDIDATES);
    }
}
