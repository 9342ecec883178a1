//! The ELF modules mapped in a process, with their load bias and TLS analysis.
//!
//! The modules come from one pass over `/proc/<pid>/maps` ([`ProcessMaps`]); their files
//! are opened by the rules of [`files`](crate::files) (inside the target's root, never
//! blocking, only the regular file mapped, else `/proc/<pid>/map_files`) and parsed under
//! a [`FileBudget`]. A module that cannot be reached or costs too much is skipped, with
//! its reason ([`SkippedModule`]). Analyses are cached by device and inode.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::elf::{ElfError, ElfTls};
use super::resolve::LoadedModule;
use crate::files::{open_mapped, BudgetedFile, Exceeded, FileBudget, OpenError};
use crate::maps::{MappedFile, ProcessMaps};

/// Why a module was left out of the analysis.
#[derive(Debug)]
#[non_exhaustive]
pub enum SkipReason {
    /// Its file could not be opened safely.
    Open(OpenError),
    /// Reading it would cost more than the [`FileBudget`].
    Budget(Exceeded),
    /// It is not a 64-bit ELF file of a supported machine.
    NotElf(ElfError),
    /// Reading it failed (the kernel refused a read of the open file).
    Read(std::io::Error),
    /// Its mappings do not match its program headers (no mapping of its first
    /// `PT_LOAD`).
    NotLoaded,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(e) => e.fmt(f),
            Self::Budget(e) => e.fmt(f),
            Self::NotElf(e) => e.fmt(f),
            Self::Read(e) => write!(f, "reading it failed ({e})"),
            Self::NotLoaded => f.write_str("no mapping holds its first loadable segment"),
        }
    }
}

/// A mapped executable file the analysis left out.
#[derive(Debug)]
pub struct SkippedModule {
    /// Its path as maps shows it.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

impl fmt::Display for SkippedModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// The modules of a process: those analysed, and those skipped with their reasons.
#[derive(Debug, Default)]
pub struct Modules {
    /// The ELF modules with an executable mapping, analysed.
    pub loaded: Vec<LoadedModule>,
    /// The executable mappings left out, and why.
    pub skipped: Vec<SkippedModule>,
}

/// A file's analysis, or why there is none; both are kept, so a file that was refused
/// for its cost is not read again.
type Analysis = Result<Arc<ElfTls>, Arc<SkipReason>>;

/// Bytes all the files of one cache may cost together: a process that maps thousands of
/// files built to cost each file's budget cannot make the reader read without end.
pub const TOTAL_FILE_BYTES: u64 = 1 << 30;

/// Analyses of ELF files for one TLS symbol (`otel_thread_ctx_v1` unless made
/// [`for_symbol`](Self::for_symbol)), by `(device, inode)`, under one [`FileBudget`] per
/// file and [`TOTAL_FILE_BYTES`] for all of them.
#[derive(Debug)]
pub struct ElfCache {
    entries: HashMap<(u64, u64), Analysis>,
    budget: FileBudget,
    /// Bytes read for every analysis so far.
    spent: u64,
    /// The TLS symbol the analyses look for.
    symbol: &'static str,
}

impl Default for ElfCache {
    fn default() -> Self {
        Self::with_budget(FileBudget::default())
    }
}

impl ElfCache {
    /// An empty cache with the default [`FileBudget`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache whose files are each read under `budget`.
    pub fn with_budget(budget: FileBudget) -> Self {
        Self {
            entries: HashMap::new(),
            budget,
            spent: 0,
            symbol: otel_ctx_codec::threadlocal::TLS_SYMBOL,
        }
    }

    /// An empty cache whose analyses look for the TLS symbol `symbol` (CPython's
    /// `_Py_tss_tstate`, say) instead of `otel_thread_ctx_v1`: [`loaded_modules`] and
    /// [`resolve`](super::resolve) then find that symbol's slot.
    pub fn for_symbol(symbol: &'static str) -> Self {
        Self {
            symbol,
            ..Self::default()
        }
    }

    /// Number of files analysed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was analysed yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The analysis of `file`, a mapping of process `pid`: from the cache, or opened and
    /// parsed now. A file that cannot be opened is not remembered (it may be reachable
    /// later).
    fn analyse(&mut self, pid: u32, file: &MappedFile) -> Result<Arc<ElfTls>, SkipReason> {
        let key = (file.dev, file.inode);
        if let Some(hit) = self.entries.get(&key) {
            return hit.clone().map_err(|reason| shared_reason(&reason));
        }
        let left = TOTAL_FILE_BYTES.saturating_sub(self.spent);
        if left == 0 {
            return Err(SkipReason::Budget(Exceeded::Total(TOTAL_FILE_BYTES)));
        }
        let opened = open_mapped(pid, file).map_err(SkipReason::Open)?;
        let budget = self.budget.with_max_bytes(self.budget.max_bytes.min(left));
        let budgeted = BudgetedFile::new(opened.file, opened.size, budget);
        let parsed = ElfTls::parse_for(budgeted.read(), self.symbol);
        self.spent = self.spent.saturating_add(budgeted.bytes_read());
        let analysis = match parsed {
            Ok(elf) => Ok(Arc::new(elf)),
            Err(e) => {
                if let Some(failed) = budgeted.read_error() {
                    // Says nothing about the file: not remembered.
                    return Err(SkipReason::Read(failed));
                }
                Err(Arc::new(match budgeted.exceeded() {
                    Some(exceeded) => SkipReason::Budget(exceeded),
                    None => SkipReason::NotElf(e),
                }))
            }
        };
        self.entries.insert(key, analysis.clone());
        analysis.map_err(|reason| shared_reason(&reason))
    }
}

/// A cached reason, handed out again (the open errors, which hold `io::Error`s, are never
/// cached).
fn shared_reason(reason: &SkipReason) -> SkipReason {
    match reason {
        SkipReason::Budget(e) => SkipReason::Budget(*e),
        SkipReason::NotElf(e) => SkipReason::NotElf(e.clone()),
        SkipReason::NotLoaded | SkipReason::Open(_) | SkipReason::Read(_) => SkipReason::NotLoaded,
    }
}

/// Lists the ELF modules of `maps`' process (the files with an executable mapping),
/// analysed, and those skipped.
pub fn loaded_modules(maps: &ProcessMaps, cache: &mut ElfCache) -> Modules {
    let pid = maps.pid;
    let dir = crate::files::proc_dir(pid);
    let exe = std::fs::read_link(format!("{dir}/exe")).ok().and_then(|p| {
        p.to_str()
            .map(|s| s.trim_end_matches(" (deleted)").to_owned())
    });
    let page = rustix::param::page_size() as u64;
    let mut modules = Modules::default();
    for file in maps.files.iter().filter(|f| f.is_executable()) {
        let elf = match cache.analyse(pid, file) {
            Ok(elf) => elf,
            Err(reason) => {
                modules.skipped.push(SkippedModule {
                    path: file.path.clone(),
                    reason,
                });
                continue;
            }
        };
        let (load_vaddr, load_offset) = elf.first_load;
        let first_offset = load_offset & !(page - 1);
        let Some(start) = file
            .ranges
            .iter()
            .filter(|r| r.offset == first_offset)
            .map(|r| r.start)
            .min()
        else {
            modules.skipped.push(SkippedModule {
                path: file.path.clone(),
                reason: SkipReason::NotLoaded,
            });
            continue;
        };
        modules.loaded.push(LoadedModule {
            is_main: exe.as_deref() == Some(file.path.as_str()),
            bias: start.wrapping_sub(load_vaddr & !(page - 1)),
            path: file.path.clone(),
            elf,
        });
    }
    modules
}
