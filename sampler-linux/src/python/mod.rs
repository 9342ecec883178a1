//! CPython's own frames in another process: which interpreter it runs, each thread's
//! `PyThreadState`, the chain of `_PyInterpreterFrame`s a thread is running, and the
//! names of their code objects.
//!
//! [`PythonProcess::find`] looks for an interpreter among the process's modules (the
//! executable, or a module whose name says Python, such as `libpython3.13.so`) by its
//! `_PyRuntime` symbol, reads the version from the target's own `Py_Version` (and,
//! from 3.13, from `_Py_DebugOffsets` at the start of `_PyRuntime`, whose offsets it
//! then uses), and refuses a version it cannot read with the reason
//! ([`PythonError::Unsupported`]). Each sample then finds the thread's `PyThreadState`
//! (CPython's thread-local `_Py_tss_tstate` when a module exports it, resolved by the same
//! TLS code as `otel_thread_ctx_v1`; else the interpreter's list of thread states, matched
//! by `native_thread_id`), walks its frames newest first into a [`PythonStack`] of
//! (frame, code object, instruction) triples, and [`PythonProcess::name_frames`] names
//! their code objects into a bounded cache, handing back the sample's [`PythonNames`]
//! (qualified name, file, first line, line of each frame). Every read is
//! bounded, and anything the target's memory says is checked before it is followed.
//!
//! The eBPF sampler walks the same chain in its BPF program with the same offsets; this
//! module is also where its parameters come from.

mod error;
mod frame;
mod names;
mod offsets;
mod thread_names;
mod threads;
pub(crate) mod walk;

use std::ops::Range;
use std::sync::Arc;

use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSymbol};

use otel_ctx_reader::files::{open_mapped, BudgetedFile, FileBudget};
use otel_ctx_reader::maps::ProcessMaps;
use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::thread::tls::{
    loaded_modules, resolve, ElfCache, Libc, Resolution, TargetMemory,
};

pub use error::PythonError;
pub use frame::{PythonFrame, PythonStack, MAX_PYTHON_FRAMES, MAX_PYTHON_THREADS};
#[cfg(all(test, feature = "ebpf"))]
pub(crate) use frame::{FLAG_ENTRY, FLAG_GENERATOR, FLAG_SHIM, OWNED_BY_GENERATOR};
pub use names::{
    CodeCache, CodeInfo, MAX_CACHED_CODES, MAX_CACHE_BYTES, MAX_LINE_TABLE, MAX_NAME_CHARS,
};
pub use offsets::{Offsets, PythonVersion};
pub use thread_names::{
    PythonThreadNames, MAX_NAMED_THREADS, MAX_REGISTRY_BYTES, MAX_THREAD_NAME_BYTES,
    THREAD_NAMES_INTERVAL,
};

/// CPython's thread-local current thread state (3.12 on).
pub const TSTATE_SYMBOL: &str = "_Py_tss_tstate";

/// One frame's names: its code object and the line it was at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameInfo {
    /// The code object's names.
    pub code: Arc<CodeInfo>,
    /// The line of the frame's instruction.
    pub line: u32,
}

/// The addresses of an interpreter's symbols, in the target.
#[derive(Debug, Clone, Copy)]
struct Symbols {
    runtime: u64,
    version: u64,
    code_type: u64,
    eval: Option<(u64, u64)>,
}

/// A process's CPython interpreter, found once ([`find`](Self::find)) and kept for the
/// process's life: the one per followed process a sampler owns. On evidence that it
/// changed (its modules changed, as [`ThreadReader::refresh_modules`](otel_ctx_reader::ThreadReader::refresh_modules)
/// says, or its walks keep failing with [`PythonError::Memory`]), find it again and
/// replace it (the eBPF sampler's entry with it, `EbpfSampler::set_process_python`
/// in a build with `ebpf`); the thread states it remembers are checked at every use.
#[derive(Debug)]
pub struct PythonProcess {
    pid: u32,
    version: PythonVersion,
    offsets: Offsets,
    module: String,
    runtime: u64,
    code_type: u64,
    eval: Option<Range<u64>>,
    tstate_tls: Option<Resolution>,
    memory: ProcessMemory,
    codes: CodeCache,
    /// The code objects of the last sample named that could not be read, and why.
    failed: Vec<(u64, u64, PythonError)>,
    threads: std::cell::RefCell<foldhash::HashMap<u32, u64>>,
    /// The code objects of the last walks, newest first, whose stamps the next walk
    /// copies with its first frames where they are not fresh (at most
    /// [`walk::MAX_EXPECTED_CODES`]).
    expected_codes: std::cell::RefCell<Vec<u64>>,
    /// Each thread's frames at its last walk: the page of its newest, and how many pages
    /// below it held older ones, where the window its next walk copies ahead lies (at
    /// most [`MAX_PYTHON_THREADS`] threads).
    last_frames: std::cell::RefCell<foldhash::HashMap<u32, (u64, u64)>>,
    /// The code objects' stamps read lately: read again only once they are older than
    /// [`names::STAMP_TRUST`].
    stamps_read: std::cell::RefCell<names::StampsRead>,
}

/// The names looked up in an interpreter's `.dynsym`.
const SYMBOLS: [&str; 4] = [
    "_PyRuntime",
    "Py_Version",
    "PyCode_Type",
    "_PyEval_EvalFrameDefault",
];

impl PythonProcess {
    /// Looks for a CPython interpreter in the process `maps` describes: `Ok(None)` when
    /// no module is one (no `_PyRuntime`), an error when one claims to be and is not, or
    /// is a version this reader refuses.
    pub fn find(maps: &ProcessMaps) -> Result<Option<Self>, PythonError> {
        let pid = maps.pid;
        let memory = ProcessMemory::new(pid, ReadMethod::Auto);
        let mut cache = ElfCache::for_symbol(TSTATE_SYMBOL);
        let modules = loaded_modules(maps, &mut cache);
        let mut found = None;
        for module in &modules.loaded {
            let name = module.path.rsplit('/').next().unwrap_or(&module.path);
            if !module.is_main && !name.contains("python") {
                continue;
            }
            let Some(file) = maps.files.iter().find(|f| f.path == module.path) else {
                continue;
            };
            let Some(symbols) = dynamic_symbols(pid, file) else {
                continue;
            };
            let [Some(runtime), version, code_type, eval] = symbols else {
                continue;
            };
            let at = |s: (u64, u64)| module.bias.wrapping_add(s.0);
            let (Some(version), Some(code_type)) = (version, code_type) else {
                return Err(PythonError::Fake(format!(
                    "{} defines _PyRuntime without Py_Version and PyCode_Type",
                    module.path
                )));
            };
            found = Some((
                module.path.clone(),
                Symbols {
                    runtime: at(runtime),
                    version: at(version),
                    code_type: at(code_type),
                    eval: eval.map(|e| (at(e), e.1)),
                },
            ));
            break;
        }
        let Some((module, symbols)) = found else {
            return Ok(None);
        };
        let hex = memory
            .read_u64(symbols.version)
            .map_err(|_| PythonError::Memory {
                what: "Py_Version",
                address: symbols.version,
            })?;
        let version = PythonVersion::from_hex(hex);
        // PY_VERSION_HEX: major, minor, micro bytes, then the release level (0xA alpha,
        // 0xB beta, 0xC candidate, 0xF final) and serial nibbles; nothing above.
        let level = (hex >> 4) & 0xf;
        if hex >> 32 != 0 || version.major != 3 || !matches!(level, 0xa..=0xc | 0xf) {
            return Err(PythonError::Fake(format!(
                "Py_Version in {module} reads {hex:#x}, no CPython version"
            )));
        }
        if let Some(reason) = offsets::refusal(version) {
            return Err(PythonError::Unsupported {
                version,
                reason: reason.to_owned(),
            });
        }
        let offsets = if version.minor >= 13 {
            let mut table = vec![0u8; offsets::DEBUG_OFFSETS_READ];
            memory
                .read_exact_at(symbols.runtime, &mut table)
                .map_err(|_| PythonError::Memory {
                    what: "_Py_DebugOffsets",
                    address: symbols.runtime,
                })?;
            offsets::from_debug_offsets(&table, version).map_err(|e| PythonError::Fake(e.0))?
        } else {
            offsets::PY311
        };
        // 3.12 on: the thread-local current thread state, where a module exports it.
        let tstate_tls = (version.minor >= 12)
            .then(|| resolve(&modules.loaded, Libc::of_modules(&modules.loaded), &memory).ok())
            .flatten();
        let process = Self {
            pid,
            version,
            offsets,
            module,
            runtime: symbols.runtime,
            code_type: symbols.code_type,
            eval: symbols
                .eval
                .filter(|&(_, size)| size > 0)
                .map(|(start, size)| start..start.saturating_add(size)),
            tstate_tls,
            memory,
            codes: CodeCache::default(),
            failed: Vec::new(),
            threads: Default::default(),
            expected_codes: Default::default(),
            last_frames: Default::default(),
            stamps_read: Default::default(),
        };
        // An interpreter has a main interpreter with a thread list: anything else is not
        // one (or has not started, or has finished).
        process.interpreter_head()?;
        Ok(Some(process))
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// The interpreter's version, as its own bytes say it.
    pub const fn version(&self) -> PythonVersion {
        self.version
    }

    /// The module that holds the interpreter (the executable, or `libpython3.X.so`).
    pub fn module(&self) -> &str {
        &self.module
    }

    /// The offsets the walk uses.
    pub const fn offsets(&self) -> &Offsets {
        &self.offsets
    }

    /// The address of `_PyRuntime`.
    pub const fn runtime(&self) -> u64 {
        self.runtime
    }

    /// The address of `PyCode_Type`.
    pub const fn code_type(&self) -> u64 {
        self.code_type
    }

    /// Where `_PyEval_EvalFrameDefault` is in the process: a native frame there runs
    /// Python frames (`None` when the symbol has no size).
    pub fn eval_range(&self) -> Option<Range<u64>> {
        self.eval.clone()
    }

    /// The resolution of `_Py_tss_tstate`, when a module exports it (3.12 on).
    pub const fn thread_state_tls(&self) -> Option<&Resolution> {
        self.tstate_tls.as_ref()
    }

    /// The code-object cache (its size, for a summary).
    pub const fn code_cache(&self) -> &CodeCache {
        &self.codes
    }

    /// Names the code objects of `frames` that the cache lacks (each read now and
    /// checked: its type, and the stamp it had when sampled), and hands back the names of
    /// every frame of the sample: the table a profiler names them through, without
    /// reading the target again. A failure to read one is kept for that frame.
    pub fn name_frames(&mut self, frames: &[PythonFrame]) -> PythonNames<'_> {
        self.failed.clear();
        let resets = self.codes.resets;
        for frame in frames.iter().filter(|f| !f.is_shim()) {
            self.name(frame);
        }
        if self.codes.resets != resets {
            // The cache started again while the frames were named: name them again, so
            // that all of them are in it (its bounds hold far more than one sample).
            self.failed.clear();
            for frame in frames.iter().filter(|f| !f.is_shim()) {
                self.name(frame);
            }
        }
        PythonNames {
            codes: &self.codes,
            failed: &self.failed,
            eval: self.eval.clone(),
            module: &self.module,
        }
    }

    fn name(&mut self, frame: &PythonFrame) {
        if let Err(e) = self.codes.get(
            &self.memory,
            &self.offsets,
            self.code_type,
            frame.code,
            frame.stamp,
        ) {
            self.failed.push((frame.code, frame.stamp, e));
        }
    }
}

/// The names of one sample's Python frames, as [`PythonProcess::name_frames`] read them:
/// a table to look them up in, which reads nothing.
#[derive(Debug, Clone)]
pub struct PythonNames<'a> {
    codes: &'a CodeCache,
    failed: &'a [(u64, u64, PythonError)],
    eval: Option<Range<u64>>,
    module: &'a str,
}

impl PythonNames<'_> {
    /// The module that holds the interpreter (the executable, or `libpython3.X.so`):
    /// its native frames are the interpreter's own work.
    pub const fn module(&self) -> &str {
        self.module
    }

    /// The names of `frame` (one of the frames named): its code object's, and its line.
    /// [`PythonError::Incomplete`] for a frame that had not started.
    pub fn frame_info(&self, frame: &PythonFrame) -> Result<FrameInfo, PythonError> {
        if frame.is_shim() {
            return Err(PythonError::Incomplete);
        }
        let Some(code) = self.codes.lookup(frame.code, frame.stamp) else {
            return Err(self
                .failed
                .iter()
                .find(|(code, stamp, _)| *code == frame.code && *stamp == frame.stamp)
                .map_or(
                    PythonError::Memory {
                        what: "a code object not named with its sample",
                        address: frame.code,
                    },
                    |(_, _, e)| e.clone(),
                ));
        };
        if !frame.is_generator() && frame.instruction < code.first_traceable {
            return Err(PythonError::Incomplete);
        }
        let line = code.line(frame.instruction);
        Ok(FrameInfo {
            code: code.clone(),
            line,
        })
    }

    /// Where `_PyEval_EvalFrameDefault` is in the process: a native frame there runs
    /// Python frames (`None` when the symbol has no size).
    pub fn eval_range(&self) -> Option<Range<u64>> {
        self.eval.clone()
    }
}

/// The `.dynsym` entries of [`SYMBOLS`] in `file` (value, size), read under the default
/// budget; `None` when the file cannot be read.
fn dynamic_symbols(
    pid: u32,
    file: &otel_ctx_reader::maps::MappedFile,
) -> Option<[Option<(u64, u64)>; 4]> {
    let opened = open_mapped(pid, file).ok()?;
    let budgeted = BudgetedFile::new(opened.file, opened.size, FileBudget::default());
    let elf = ElfFile64::<Endianness, _>::parse(budgeted.read()).ok()?;
    let mut found = [None; 4];
    for symbol in elf.dynamic_symbols() {
        let Ok(name) = symbol.name() else { continue };
        if let Some(at) = SYMBOLS.iter().position(|s| *s == name) {
            if symbol.is_definition() {
                found[at] = Some((symbol.address(), symbol.size()));
            }
        }
    }
    Some(found)
}
