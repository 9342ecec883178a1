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
use std::ops::{Deref, Range};
use std::rc::Rc;
use std::sync::Arc;

use otel_ctx_reader::files::{open_mapped, BoundedRead, BudgetedFile, FileBudget};
use otel_ctx_reader::maps::{FileRange, MappedFile};

use crate::elf::{self, Elf, Head};
use crate::source::{self, DebugNames, Lookup, Missing, SymbolSource, UnknownCause};
use crate::symbolize::{Symbol, SymbolTable};
use crate::{hex, Arch};

/// The gimli reader of a module's DWARF: section bytes owned by the module.
pub(crate) type DwarfReader = gimli::EndianArcSlice<gimli::LittleEndian>;

/// A module's DWARF, ready to look addresses up in.
pub(crate) type DwarfContext = addr2line::Context<DwarfReader>;

/// Section bytes owned by a module and shared, without copying, with the unwinder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bytes(Arc<[u8]>);

impl Bytes {
    pub fn new(bytes: Arc<[u8]>) -> Self {
        Self(bytes)
    }

    pub fn into_arc(self) -> Arc<[u8]> {
        self.0
    }
}

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
    /// ([`elf::eh_frame_hdr_is_sound`]).
    pub fn checked(mut self) -> Self {
        let sound = match (&self.eh_frame_hdr, &self.eh_frame) {
            (Some((hdr, bytes)), Some((eh_frame, _))) => {
                elf::eh_frame_hdr_is_sound(hdr.start, bytes, eh_frame)
            }
            _ => false,
        };
        if !sound {
            self.eh_frame_hdr = None;
        }
        self
    }
}

/// A module's names: its symbols and DWARF, its own file's and those of the sources
/// that completed them (a debug file, MiniDebugInfo, debuginfod).
pub(crate) struct Names {
    pub symbols: SymbolTable,
    pub dwarf: Option<DwarfContext>,
    /// Why the DWARF was left out, when a file has some.
    pub dwarf_note: Option<String>,
    /// Where the names come from, the module's own file first.
    pub sources: Vec<SymbolSource>,
    /// Whether `symbols` is a full table (a `.symtab`): the module is not stripped, or
    /// a debug file gave its table.
    pub full: bool,
    /// Why no source gave a full table, when none did.
    pub missing: Option<Missing>,
}

impl Names {
    /// Whether a debug file would add something: a full table, or the DWARF asked for.
    pub fn wants_debug_file(&self, debug_info: bool) -> bool {
        !self.full || (debug_info && self.dwarf.is_none())
    }

    /// Adds what another source found.
    pub fn absorb(&mut self, found: DebugNames) {
        self.symbols.extend(found.symbols);
        if self.dwarf.is_none() && found.dwarf.is_some() {
            self.dwarf = found.dwarf;
            self.dwarf_note = None;
        } else if self.dwarf.is_none() && found.dwarf_note.is_some() {
            self.dwarf_note = found.dwarf_note;
        }
        self.full |= found.full;
        if self.full {
            self.missing = None;
        }
        self.sources.push(found.source);
    }

    /// The cause a frame of this module that nothing names is counted under.
    pub fn unknown_cause(&self) -> UnknownCause {
        self.missing
            .as_ref()
            .map_or(UnknownCause::NoSymbols, |m| m.cause)
    }
}

/// One module's contents, as read once.
pub(crate) struct ModuleData {
    pub key: ModuleKey,
    pub build_id: Option<Box<[u8]>>,
    pub arch: Arch,
    pub segments: Vec<Segment>,
    pub unwind: UnwindSections,
    /// Its names; a source found later (debuginfod) completes them in place.
    pub names: RefCell<Names>,
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
        let names = self.names.borrow();
        f.debug_struct("ModuleData")
            .field("key", &self.key)
            .field("arch", &self.arch)
            .field("symbols", &names.symbols.len())
            .field("dwarf", &names.dwarf.is_some())
            .field("sources", &names.sources)
            .field("bytes_read", &self.bytes_read)
            .finish_non_exhaustive()
    }
}

impl ModuleData {
    /// A module of `head`, unwound with `unwind` and named by `names`.
    pub fn new(
        key: ModuleKey,
        head: Head,
        unwind: UnwindSections,
        names: Names,
        bytes_read: u64,
    ) -> Self {
        Self {
            key,
            build_id: head.build_id,
            arch: head.arch,
            segments: head.segments,
            unwind,
            names: RefCell::new(names),
            bytes_read,
            symbolized: RefCell::new(HashMap::new()),
        }
    }

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
pub(crate) struct SkipReason {
    pub text: String,
    /// Whether it was the budget: a file larger or slower to read than it allows.
    pub budget: bool,
}

impl SkipReason {
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            budget: false,
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
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

    pub(crate) fn get(&self, key: &ModuleKey) -> Option<Rc<ModuleData>> {
        let mut inner = self.0.borrow_mut();
        let found = inner.modules.get(key).cloned();
        if found.is_some() {
            inner.hits += 1;
        }
        found
    }

    pub(crate) fn insert(&self, module: Rc<ModuleData>) {
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

    /// The module `file` of process `pid` maps: from the cache, or read now (with its
    /// separate debug file, when it is stripped).
    pub(crate) fn module(
        &self,
        pid: u32,
        file: &MappedFile,
        options: &LoadOptions,
    ) -> Result<Rc<ModuleData>, SkipReason> {
        let opened =
            open_mapped(pid, file).map_err(|e| SkipReason::new(format!("not opened: {e}")))?;
        let budgeted = BudgetedFile::new(opened.file, opened.size, options.budget);
        let head = elf::read_head(budgeted.read()).map_err(|e| budget_reason(&budgeted, e))?;
        let key = match &head.build_id {
            Some(id) => ModuleKey::BuildId(Box::clone(id)),
            None => ModuleKey::File {
                dev: file.dev,
                inode: file.inode,
            },
        };
        if let Some(module) = self.get(&key) {
            return Ok(module);
        }
        let module = Rc::new(load(&budgeted, key, head, pid, &file.path, options)?);
        self.insert(module.clone());
        Ok(module)
    }
}

impl ModuleCache {
    /// The vDSO process `pid` maps (`file`, its one range): read from its memory, then
    /// found in the cache by its build id (one per kernel).
    pub(crate) fn vdso(&self, pid: u32, file: &MappedFile) -> Result<Rc<ModuleData>, SkipReason> {
        let range = file
            .ranges
            .first()
            .map(|r| r.start..r.end)
            .ok_or_else(|| SkipReason::new("no [vdso] mapping"))?;
        let module = source::vdso::read(pid, &range)?;
        if let Some(cached) = self.get(&module.key) {
            return Ok(cached);
        }
        let module = Rc::new(module);
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
        Some(exceeded) => SkipReason {
            text: format!("skipped: {exceeded}"),
            budget: true,
        },
        None => SkipReason::new(what),
    }
}

/// Reads what unwinding and symbolizing need: the sections and symbol tables first,
/// then (when asked, and while the budget lasts) the DWARF; then, for a stripped
/// module, its separate debug file.
fn load(
    file: &BudgetedFile,
    key: ModuleKey,
    head: Head,
    pid: u32,
    path: &str,
    options: &LoadOptions,
) -> Result<ModuleData, SkipReason> {
    let data = file.read();
    let elf = Elf::<BoundedRead<'_>>::parse(data)
        .map_err(|e| budget_reason(file, format!("malformed ELF file ({e})")))?;
    let left = || options.budget.max_bytes.saturating_sub(file.bytes_read());
    let unwind = elf::unwind_sections(&elf, &left).map_err(|e| budget_reason(file, e))?;
    let symbols = SymbolTable::read(&elf);
    if let Some(exceeded) = file.exceeded() {
        return Err(SkipReason {
            text: format!("skipped: {exceeded}"),
            budget: true,
        });
    }
    let mut names = Names {
        symbols,
        dwarf: None,
        dwarf_note: None,
        sources: vec![SymbolSource::Module],
        full: elf::has_symtab(&elf),
        missing: None,
    };
    if options.debug_info && elf::has_dwarf(&elf) {
        match elf::read_dwarf(&elf, &left) {
            Ok(context) => names.dwarf = Some(context),
            Err(e) => {
                names.dwarf_note = Some(match file.exceeded() {
                    Some(exceeded) => format!("debug info left out: {exceeded}"),
                    None => format!("debug info left out: {e}"),
                })
            }
        }
    }
    let bytes_read = file.bytes_read();
    if names.wants_debug_file(options.debug_info) {
        // What the module says of its debug file; an unreadable section says nothing.
        let debugdata = match names.full {
            true => None,
            false => elf::section_bytes(&elf, ".gnu_debugdata", left())
                .ok()
                .flatten()
                .map(|(_, bytes)| bytes),
        };
        let lookup = Lookup {
            pid,
            module_path: path,
            build_id: head.build_id.as_deref(),
            debuglink: elf::debuglink(&elf),
            debugdata,
            budget: options.budget,
            debug_info: options.debug_info,
        };
        source::complete(&mut names, &lookup);
    }
    Ok(ModuleData::new(key, head, unwind, names, bytes_read))
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
        assert!(module.names.borrow().symbols.len() > 100);
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
        assert!(reason.text.contains("MiB") && reason.budget, "{reason}");
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
}
