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

pub(crate) mod data;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use otel_ctx_reader::files::{open_mapped, BoundedRead, BudgetedFile, FileBudget};
use otel_ctx_reader::maps::MappedFile;

use crate::elf::{self, Elf, Head};
use crate::source::{self, Lookup, SymbolSource};
use crate::symbolize::SymbolTable;

pub use data::ModuleKey;
pub(crate) use data::{ModuleData, Names, SkipReason};

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
        source::lookup::complete(&mut names, &lookup);
    }
    Ok(ModuleData::new(key, head, unwind, names, bytes_read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Arch;
    use crate::bytes::Bytes;
    use crate::unwind::Walker;
    use otel_ctx_reader::maps::FileRange;
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
            Bytes::new(copy.into())
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
