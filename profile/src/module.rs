//! Modules: the ELF files a target maps, each read once (headers, unwind sections,
//! symbol tables, DWARF) and cached by build id, else by device and inode.
//!
//! A target's files are hostile input. They are opened only with
//! [`otel_ctx_reader::files::open_mapped`] (which never blocks, never opens a FIFO or a
//! device, resolves the path inside the target's root and checks device and inode), and
//! read with `pread` through [`BudgetedFile`], which charges every range to a
//! [`FileBudget`] before it is allocated: a section header that claims gigabytes costs
//! nothing, and a file truncated while it is read makes a read fail, where an `mmap`
//! would kill this process with `SIGBUS`. Nothing here maps a target file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::ops::{Deref, Range};
use std::rc::Rc;
use std::sync::Arc;

use object::elf::{EM_AARCH64, EM_X86_64, NT_GNU_BUILD_ID, PF_X, PT_LOAD, PT_NOTE};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{CompressionFormat, Endianness, Object, ObjectSection};
use otel_ctx_reader::files::{open_mapped, BoundedRead, BudgetedFile, FileBudget};
use otel_ctx_reader::maps::{FileRange, MappedFile};

use crate::symbolize::{Symbol, SymbolTable};
use crate::{hex, Arch};

/// The gimli reader of a module's DWARF: section bytes owned by the module.
pub(crate) type DwarfReader = gimli::EndianArcSlice<gimli::LittleEndian>;

/// Section bytes owned by a module and shared, without copying, with the unwinder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bytes(Arc<[u8]>);

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What identifies a module's contents across processes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKey {
    /// The GNU build id (`NT_GNU_BUILD_ID` note).
    BuildId(Box<[u8]>),
    /// No build id: the file's device and inode.
    File {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        inode: u64,
    },
}

impl fmt::Display for ModuleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BuildId(id) => f.write_str(&hex(id)),
            Self::File { dev, inode } => write!(f, "dev {dev:#x} inode {inode}"),
        }
    }
}

/// A `PT_LOAD` segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// The sections framehop unwinds with, and the addresses it needs to read them.
#[derive(Clone, Debug, Default)]
pub(crate) struct UnwindSections {
    pub text_svma: Option<Range<u64>>,
    pub got_svma: Option<Range<u64>>,
    pub eh_frame: Option<(Range<u64>, Bytes)>,
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    pub debug_frame: Option<Bytes>,
}

impl UnwindSections {
    /// The sections, less an `.eh_frame_hdr` the unwinder may not trust
    /// ([`eh_frame_hdr_is_sound`]).
    pub fn checked(mut self) -> Self {
        let sound = match (&self.eh_frame_hdr, &self.eh_frame) {
            (Some((hdr, bytes)), Some((eh_frame, _))) => {
                eh_frame_hdr_is_sound(hdr.start, bytes, eh_frame)
            }
            _ => false,
        };
        if !sound {
            self.eh_frame_hdr = None;
        }
        self
    }
}

/// One module's contents, as read once.
pub(crate) struct ModuleData {
    pub key: ModuleKey,
    pub build_id: Option<Box<[u8]>>,
    pub arch: Arch,
    pub segments: Vec<Segment>,
    pub unwind: UnwindSections,
    pub symbols: SymbolTable,
    pub dwarf: Option<addr2line::Context<DwarfReader>>,
    /// Why the DWARF was left out, when the file has some.
    pub dwarf_note: Option<String>,
    pub bytes_read: u64,
    /// Symbolized addresses (`svma`, with lines or not), at most
    /// [`MAX_SYMBOLIZED_PER_MODULE`].
    pub symbolized: RefCell<Symbolized>,
}

/// A module's symbolized addresses: by `svma` and whether lines were asked for.
pub(crate) type Symbolized = HashMap<(u64, bool), Rc<[Symbol]>>;

/// Addresses a module keeps symbolized; past that the cache starts over.
pub(crate) const MAX_SYMBOLIZED_PER_MODULE: usize = 1 << 16;

impl fmt::Debug for ModuleData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleData")
            .field("key", &self.key)
            .field("arch", &self.arch)
            .field("symbols", &self.symbols.len())
            .field("dwarf", &self.dwarf.is_some())
            .field("dwarf_note", &self.dwarf_note)
            .field("bytes_read", &self.bytes_read)
            .finish_non_exhaustive()
    }
}

impl ModuleData {
    /// The load bias of the file mapped as `ranges`: what is added to an address of
    /// the file (`svma`) to give the address in the process. `None` when no mapping of
    /// the file lines up with one of its `PT_LOAD` segments.
    pub fn bias(&self, ranges: &[FileRange]) -> Option<u64> {
        ranges.iter().filter(|r| r.is_executable()).find_map(|r| {
            let seg = self.segments.iter().find(|s| {
                s.executable
                    && s.offset & !0xfff <= r.offset
                    && r.offset < s.offset.saturating_add(s.filesz.max(1))
            })?;
            // r.start holds file offset r.offset, which the segment puts at
            // vaddr + (r.offset - offset).
            let svma = seg.vaddr.wrapping_add(r.offset).wrapping_sub(seg.offset);
            Some(r.start.wrapping_sub(svma))
        })
    }
}

/// Why a module was not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipReason(pub String);

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a module cache may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheLimits {
    /// Modules kept; past that, the modules no profiler uses any more are dropped.
    /// Default 1024.
    pub max_modules: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self { max_modules: 1024 }
    }
}

#[derive(Debug, Default)]
struct CacheInner {
    modules: HashMap<ModuleKey, Rc<ModuleData>>,
    limits: CacheLimits,
    loads: u64,
    hits: u64,
}

/// Modules read so far, by build id (else device and inode), shared by the profilers
/// of one thread: a module mapped by many processes, or mapped again, is read once,
/// with the budget and [`debug_info`](crate::ProfileOptions::debug_info) option of the
/// profiler that read it first. Cloning gives another handle to the same cache.
#[derive(Clone, Debug, Default)]
pub struct ModuleCache(Rc<RefCell<CacheInner>>);

/// How a module cache has been used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Modules in the cache.
    pub modules: usize,
    /// Modules read from their files.
    pub loads: u64,
    /// Modules found in the cache instead.
    pub hits: u64,
}

impl ModuleCache {
    /// An empty cache with these limits.
    pub fn new(limits: CacheLimits) -> Self {
        Self(Rc::new(RefCell::new(CacheInner {
            limits,
            ..CacheInner::default()
        })))
    }

    /// How it has been used.
    pub fn stats(&self) -> CacheStats {
        let inner = self.0.borrow();
        CacheStats {
            modules: inner.modules.len(),
            loads: inner.loads,
            hits: inner.hits,
        }
    }

    fn get(&self, key: &ModuleKey) -> Option<Rc<ModuleData>> {
        let mut inner = self.0.borrow_mut();
        let found = inner.modules.get(key).cloned();
        if found.is_some() {
            inner.hits += 1;
        }
        found
    }

    fn insert(&self, module: Rc<ModuleData>) {
        let mut inner = self.0.borrow_mut();
        inner.loads += 1;
        if inner.modules.len() >= inner.limits.max_modules {
            // Only this cache holds them: no profiler maps them any more.
            inner.modules.retain(|_, m| Rc::strong_count(m) > 1);
        }
        if inner.modules.len() < inner.limits.max_modules {
            inner.modules.insert(module.key.clone(), module);
        }
    }

    /// The module `file` of process `pid` maps: from the cache, or read now.
    pub(crate) fn module(
        &self,
        pid: u32,
        file: &MappedFile,
        options: &LoadOptions,
    ) -> Result<Rc<ModuleData>, SkipReason> {
        let opened = open_mapped(pid, file).map_err(|e| SkipReason(format!("not opened: {e}")))?;
        let budgeted = BudgetedFile::new(opened.file, opened.size, options.budget);
        let head = read_head(&budgeted, file).map_err(|e| budget_reason(&budgeted, e))?;
        if let Some(module) = self.get(&head.key) {
            return Ok(module);
        }
        let module = Rc::new(load(&budgeted, head, options)?);
        self.insert(module.clone());
        Ok(module)
    }
}

/// What reading a module may cost and what is read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoadOptions {
    pub budget: FileBudget,
    pub debug_info: bool,
}

/// The reason a read failed: the budget's, when it ran out, else `what`.
fn budget_reason(file: &BudgetedFile, what: String) -> SkipReason {
    match file.exceeded() {
        Some(exceeded) => SkipReason(format!("skipped: {exceeded}")),
        None => SkipReason(what),
    }
}

/// The ELF header, segments and build id, read before the cache is asked.
struct Head {
    key: ModuleKey,
    build_id: Option<Box<[u8]>>,
    arch: Arch,
    segments: Vec<Segment>,
}

/// Reads the ELF header, the program headers and the build-id note (a few hundred
/// bytes), enough to find the module in the cache.
fn read_head(file: &BudgetedFile, mapped: &MappedFile) -> Result<Head, String> {
    let data = file.read();
    let header = object::elf::FileHeader64::<Endianness>::parse(data)
        .map_err(|e| format!("not a 64-bit ELF file ({e})"))?;
    let endian = header
        .endian()
        .map_err(|e| format!("not a 64-bit ELF file ({e})"))?;
    if endian != Endianness::Little {
        return Err("a big-endian ELF file, which this profiler does not read".into());
    }
    let arch = match header.e_machine(endian) {
        EM_X86_64 => Arch::X86_64,
        EM_AARCH64 => Arch::Aarch64,
        other => {
            return Err(format!(
                "an ELF file for machine {other}, not x86_64 or aarch64"
            ))
        }
    };
    let phdrs = header
        .program_headers(endian, data)
        .map_err(|e| format!("malformed program headers ({e})"))?;
    let mut segments = Vec::new();
    let mut build_id = None;
    for ph in phdrs {
        match ph.p_type(endian) {
            PT_LOAD => segments.push(Segment {
                vaddr: ph.p_vaddr(endian),
                offset: ph.p_offset(endian),
                filesz: ph.p_filesz(endian),
                executable: ph.p_flags(endian) & PF_X != 0,
            }),
            PT_NOTE if build_id.is_none() => {
                let Ok(Some(mut notes)) = ph.notes(endian, data) else {
                    continue;
                };
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == b"GNU" && note.n_type(endian) == NT_GNU_BUILD_ID {
                        let desc = note.desc();
                        if !desc.is_empty() && desc.len() <= 64 {
                            build_id = Some(desc.into());
                        }
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    let key = match &build_id {
        Some(id) => ModuleKey::BuildId(Box::clone(id)),
        None => ModuleKey::File {
            dev: mapped.dev,
            inode: mapped.inode,
        },
    };
    Ok(Head {
        key,
        build_id,
        arch,
        segments,
    })
}

/// Reads what unwinding and symbolizing need: the sections and symbol tables first,
/// then (when asked, and while the budget lasts) the DWARF.
fn load(file: &BudgetedFile, head: Head, options: &LoadOptions) -> Result<ModuleData, SkipReason> {
    let data = file.read();
    let elf = ElfFile64::<Endianness, BoundedRead<'_>>::parse(data)
        .map_err(|e| budget_reason(file, format!("malformed ELF file ({e})")))?;
    let section = |name: &str| -> Result<Option<(Range<u64>, Bytes)>, SkipReason> {
        let left = options.budget.max_bytes.saturating_sub(file.bytes_read());
        section_bytes(&elf, name, left)
            .map_err(|e| budget_reason(file, format!("section {name}: {e}")))
    };
    let range_of = |name: &str| {
        elf.section_by_name(name)
            .map(|s| s.address()..s.address().saturating_add(s.size()))
    };
    let unwind = UnwindSections {
        text_svma: range_of(".text"),
        got_svma: range_of(".got"),
        eh_frame: section(".eh_frame")?,
        eh_frame_hdr: section(".eh_frame_hdr")?,
        debug_frame: section(".debug_frame")?.map(|(_, bytes)| bytes),
    }
    .checked();
    let symbols = SymbolTable::read(&elf);
    if let Some(exceeded) = file.exceeded() {
        return Err(SkipReason(format!("skipped: {exceeded}")));
    }
    let mut dwarf = None;
    let mut dwarf_note = None;
    if options.debug_info && elf.section_by_name(".debug_info").is_some() {
        match read_dwarf(&elf, file, options.budget.max_bytes) {
            Ok(context) => dwarf = Some(context),
            Err(e) => {
                dwarf_note = Some(match file.exceeded() {
                    Some(exceeded) => format!("debug info left out: {exceeded}"),
                    None => format!("debug info left out: {e}"),
                })
            }
        }
    }
    Ok(ModuleData {
        key: head.key,
        build_id: head.build_id,
        arch: head.arch,
        segments: head.segments,
        unwind,
        symbols,
        dwarf,
        dwarf_note,
        bytes_read: file.bytes_read(),
        symbolized: RefCell::new(HashMap::new()),
    })
}

/// Whether the `.eh_frame_hdr` at `svma` (`bytes`) is one the unwinder may trust: the
/// encodings every linker writes (GNU ld, gold, lld, mold), pointing at `eh_frame`,
/// with a search table that fits, is sorted, and points into `eh_frame` only.
///
/// gimli searches the table as it is: an entry that points before `.eh_frame` makes
/// it subtract past zero (a panic where overflow is checked). A header that fails here
/// is left out, and framehop indexes `.eh_frame` itself.
fn eh_frame_hdr_is_sound(svma: u64, bytes: &[u8], eh_frame: &Range<u64>) -> bool {
    // version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4.
    const HEADER: [u8; 4] = [1, 0x1b, 0x03, 0x3b];
    let word = |at: usize| -> Option<[u8; 4]> { bytes.get(at..at + 4)?.try_into().ok() };
    let signed = |at: usize| word(at).map(i32::from_le_bytes).map(i64::from);
    let (Some(eh_frame_ptr), Some(count)) = (signed(4), word(8).map(u32::from_le_bytes)) else {
        return false;
    };
    if bytes.get(..4) != Some(&HEADER[..])
        || svma.wrapping_add(4).wrapping_add_signed(eh_frame_ptr) != eh_frame.start
    {
        return false;
    }
    let entries = count as usize;
    if entries.checked_mul(8).and_then(|n| n.checked_add(12)) > Some(bytes.len()) {
        return false;
    }
    let mut previous = i64::MIN;
    (0..entries).all(|i| {
        let (Some(location), Some(fde)) = (signed(12 + 8 * i), signed(16 + 8 * i)) else {
            return false;
        };
        let sorted = location >= previous;
        previous = location;
        sorted && eh_frame.contains(&svma.wrapping_add_signed(fde))
    })
}

/// The bytes of section `name` (decompressed when `SHF_COMPRESSED` with zlib, to at
/// most `max_uncompressed` bytes), with its address range; `None` when the file has no
/// such section or it occupies no bytes in the file.
fn section_bytes<'a>(
    elf: &ElfFile64<'a, Endianness, BoundedRead<'a>>,
    name: &str,
    max_uncompressed: u64,
) -> Result<Option<(Range<u64>, Bytes)>, String> {
    let Some(section) = elf.section_by_name(name) else {
        return Ok(None);
    };
    let range = section.address()..section.address().saturating_add(section.size());
    let compressed = section.compressed_data().map_err(|e| e.to_string())?;
    let bytes: Arc<[u8]> = match compressed.format {
        CompressionFormat::None => compressed.data.into(),
        CompressionFormat::Zlib => {
            if compressed.uncompressed_size > max_uncompressed {
                return Err(format!(
                    "claims {} bytes uncompressed, more than the {max_uncompressed} left",
                    compressed.uncompressed_size
                ));
            }
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(compressed.data)
                .take(compressed.uncompressed_size)
                .read_to_end(&mut out)
                .map_err(|e| format!("zlib: {e}"))?;
            out.into()
        }
        _ => return Err("compressed in a format this profiler does not read".into()),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some((range, Bytes(bytes))))
}

/// The DWARF sections, read under what is left of the budget, as an addr2line context.
fn read_dwarf<'a>(
    elf: &ElfFile64<'a, Endianness, BoundedRead<'a>>,
    file: &BudgetedFile,
    max_bytes: u64,
) -> Result<addr2line::Context<DwarfReader>, String> {
    let load = |id: gimli::SectionId| -> Result<DwarfReader, String> {
        let left = max_bytes.saturating_sub(file.bytes_read());
        let bytes = match section_bytes(elf, id.name(), left)? {
            Some((_, Bytes(bytes))) => bytes,
            None => Arc::from(&[][..]),
        };
        Ok(gimli::EndianArcSlice::new(bytes, gimli::LittleEndian))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    addr2line::Context::from_dwarf(dwarf).map_err(|e| format!("malformed DWARF ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::Walker;
    use otel_ctx_reader::ProcessMaps;

    /// This test binary's own module, read as a target's would be.
    fn own_module() -> (MappedFile, Rc<ModuleData>) {
        let pid = std::process::id();
        let maps = ProcessMaps::read(pid).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let file = maps
            .files
            .into_iter()
            .find(|f| std::path::Path::new(&f.path) == exe)
            .unwrap();
        let options = LoadOptions {
            budget: FileBudget::default(),
            debug_info: false,
        };
        let module = ModuleCache::default().module(pid, &file, &options).unwrap();
        (file, module)
    }

    #[test]
    fn reads_its_own_binary_once_per_build_id() {
        let (file, module) = own_module();
        assert!(
            matches!(module.key, ModuleKey::BuildId(_)),
            "{:?}",
            module.key
        );
        // The linker's .eh_frame_hdr passes the check.
        assert!(module.unwind.eh_frame.is_some() && module.unwind.eh_frame_hdr.is_some());
        assert!(module.symbols.len() > 100);
        // A function of this binary by its address: the Rust name, demangled.
        let bias = module.bias(&file.ranges).unwrap();
        let address = own_module as fn() -> (MappedFile, Rc<ModuleData>) as usize as u64;
        let symbols = module.symbolize(address.wrapping_sub(bias), false);
        assert!(
            symbols.first().is_some_and(|s| s
                .name
                .starts_with("otel_ctx_profile::module::tests::own_module")),
            "{symbols:?}"
        );
        let options = LoadOptions {
            budget: FileBudget::default(),
            debug_info: false,
        };
        let cache = ModuleCache::default();
        let first = cache.module(std::process::id(), &file, &options).unwrap();
        let again = cache.module(std::process::id(), &file, &options).unwrap();
        assert!(Rc::ptr_eq(&first, &again));
        assert_eq!((cache.stats().loads, cache.stats().hits), (1, 1));
        // A budget too small for its tables skips it, and says why.
        let tiny = LoadOptions {
            budget: FileBudget::default().with_max_bytes(4096),
            debug_info: false,
        };
        let reason = ModuleCache::default()
            .module(std::process::id(), &file, &tiny)
            .unwrap_err();
        assert!(reason.0.contains("MiB"), "{reason}");
    }

    #[test]
    fn corrupt_unwind_sections_never_panic() {
        let (file, module) = own_module();
        let bias = module.bias(&file.ranges).unwrap();
        let executable: Vec<&FileRange> =
            file.ranges.iter().filter(|r| r.is_executable()).collect();
        let start = executable.iter().map(|r| r.start).min().unwrap();
        let end = executable.iter().map(|r| r.end).max().unwrap();
        let mut state = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let corrupt = |bytes: &Bytes, next: &mut dyn FnMut() -> u64, flips: u64| {
            let mut copy = bytes.to_vec();
            for _ in 0..flips {
                let at = (next() % copy.len() as u64) as usize;
                copy[at] = next() as u8;
            }
            Bytes(copy.into())
        };
        let mut frames = Vec::new();
        // More rounds for a longer search: OTEL_CTX_PROFILE_FUZZ_ROUNDS=5000.
        let rounds = std::env::var("OTEL_CTX_PROFILE_FUZZ_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(64u64);
        for round in 0..rounds {
            let mut sections = module.unwind.clone();
            let flips = 1 << (round % 12);
            if let Some((range, bytes)) = &sections.eh_frame {
                sections.eh_frame = Some((range.clone(), corrupt(bytes, &mut next, flips)));
            }
            if round % 2 == 1 {
                if let Some((range, bytes)) = &sections.eh_frame_hdr {
                    sections.eh_frame_hdr = Some((range.clone(), corrupt(bytes, &mut next, flips)));
                }
            }
            // As a module's sections are checked when it is read.
            let sections = sections.checked();
            let mut walker = Walker::new(Arch::NATIVE);
            walker.add_module("self", start..end, bias, Some(&sections));
            for _ in 0..200 {
                let stack: Vec<u8> = (0..2048).map(|_| next() as u8).collect();
                let registers = otel_ctx_reader::UserRegisters {
                    ip: start + next() % (end - start),
                    sp: 0x7ffd_0000_0000,
                    fp: 0x7ffd_0000_0000 + next() % 4096,
                    lr: next(),
                };
                walker.walk(&registers, &stack, 256, &mut frames);
                assert!(!frames.is_empty() && frames.len() <= 256);
            }
        }
    }

    #[test]
    fn eh_frame_hdr_checked_before_it_is_searched() {
        // .eh_frame_hdr at 0x1000, .eh_frame at 0x2000..0x2100; two entries.
        let eh_frame = 0x2000..0x2100;
        let hdr = |entries: &[(i32, i32)], eh_frame_ptr: i32| -> Vec<u8> {
            let mut b = vec![1, 0x1b, 0x03, 0x3b];
            b.extend_from_slice(&eh_frame_ptr.to_le_bytes());
            b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for (location, fde) in entries {
                b.extend_from_slice(&location.to_le_bytes());
                b.extend_from_slice(&fde.to_le_bytes());
            }
            b
        };
        let good = hdr(&[(0x10, 0x1000), (0x20, 0x1010)], 0x1000 - 4);
        assert!(eh_frame_hdr_is_sound(0x1000, &good, &eh_frame));
        // An FDE before .eh_frame (gimli would subtract past zero), or after it.
        let before = hdr(&[(0x10, 0x0ff0), (0x20, 0x1010)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &before, &eh_frame));
        let after = hdr(&[(0x10, 0x1000), (0x20, 0x1100)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &after, &eh_frame));
        // Unsorted, pointing elsewhere, another version, a table longer than the bytes.
        let unsorted = hdr(&[(0x20, 0x1000), (0x10, 0x1010)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &unsorted, &eh_frame));
        let elsewhere = hdr(&[(0x10, 0x1000)], 0x2000);
        assert!(!eh_frame_hdr_is_sound(0x1000, &elsewhere, &eh_frame));
        let mut version = good.clone();
        version[0] = 2;
        assert!(!eh_frame_hdr_is_sound(0x1000, &version, &eh_frame));
        assert!(!eh_frame_hdr_is_sound(
            0x1000,
            &good[..good.len() - 1],
            &eh_frame
        ));
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(!eh_frame_hdr_is_sound(0x1000, &huge, &eh_frame));
        assert!(!eh_frame_hdr_is_sound(0x1000, &[], &eh_frame));
    }
}
