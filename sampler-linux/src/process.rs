//! One followed process: what a sampler keeps of it between samples, and the one
//! refresh policy that keeps its thread reader current.

use foldhash::HashMap;
use std::time::{Duration, Instant};

use crate::python::{PythonError, PythonProcess, PythonThreadNames};
use crate::stack::StackReader;
use otel_ctx_reader::maps::ProcessMaps;
use otel_ctx_reader::procfs;
use otel_ctx_reader::thread::{ThreadError, ThreadReader};
use otel_ctx_reader::Error;

use crate::error::SamplerError;
use crate::options::SamplerOptions;

/// How often, at most, one process's maps are read again on evidence, and its key map
/// looked at again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// How often a process's maps are read again without evidence that they changed:
/// reading them takes the target's mmap lock.
pub const MODULES_FALLBACK: Duration = Duration::from_secs(30);

/// How a process is followed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Following {
    /// With its thread contexts.
    Contexts,
    /// For its stacks only, and why: it exports no `otel_thread_ctx_v1` (yet), or the
    /// slot cannot be located. Its samples have no context; it is looked at again at
    /// every refresh, and read for contexts once it can be.
    StacksOnly(ThreadError),
}

impl Following {
    /// Whether the process is followed with its thread contexts.
    pub const fn has_contexts(&self) -> bool {
        matches!(self, Self::Contexts)
    }
}

/// A process read for following: its maps, its start time and its thread reader (or why
/// it has none). [`open`](Self::open) does what following a process costs most (a read
/// of its maps, the analysis of its modules), on any thread;
/// [`Sampler::adopt`](super::Sampler::adopt) then follows it.
#[derive(Debug)]
pub struct PreparedProcess {
    /// The process.
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat`, clock ticks since boot): a process with the
    /// same id and another start time is another process.
    pub start_time: u64,
    /// The pass over its maps the reader was opened with.
    pub maps: ProcessMaps,
    reader: Result<ThreadReader, ThreadError>,
    /// Its CPython interpreter (`Ok(None)`: it runs none, or the sampler walks no Python
    /// frames), or why one that claims to be Python is refused.
    python: Result<Option<PythonProcess>, PythonError>,
    /// Its threads' Python names, read once its interpreter is found.
    python_names: PythonThreadNames,
}

impl PreparedProcess {
    /// Reads process `pid`'s maps and opens its thread reader as `options` say. A
    /// process that exports no `otel_thread_ctx_v1` (or whose slot cannot be located)
    /// is prepared for its stacks only; one that cannot be read at all is an error.
    pub fn open(pid: u32, options: &SamplerOptions) -> Result<Self, SamplerError> {
        let maps = ProcessMaps::read(pid).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::gone(pid),
            _ => Error::from_io(pid, format!("read /proc/{pid}/maps"), e),
        })?;
        Self::from_maps(maps, options)
    }

    /// Like [`open`](Self::open), from a pass over the process's maps the caller made
    /// (and may have used for its process context): the maps are not read again.
    pub fn from_maps(maps: ProcessMaps, options: &SamplerOptions) -> Result<Self, SamplerError> {
        let pid = maps.pid;
        let start_time = procfs::start_time(pid).ok_or_else(|| Error::gone(pid))?;
        let reader = open_reader(&maps, options);
        let python = if options.python && options.stack_size > 0 {
            PythonProcess::find(&maps)
        } else {
            Ok(None)
        };
        let python_names = match &python {
            Ok(Some(python)) => python.thread_names(),
            _ => PythonThreadNames::default(),
        };
        match reader {
            // Not being able to read the process is not a process without contexts.
            Err(ThreadError::Process(e)) => Err(e.into()),
            Err(e @ ThreadError::Schema { .. }) => Err(e.into()),
            reader => Ok(Self {
                pid,
                start_time,
                maps,
                reader,
                python,
                python_names,
            }),
        }
    }

    /// Whether it will be followed with its thread contexts.
    pub fn has_contexts(&self) -> bool {
        self.reader.is_ok()
    }

    /// Its thread reader, if it has one.
    pub fn reader(&self) -> Option<&ThreadReader> {
        self.reader.as_ref().ok()
    }
}

/// The thread reader of the process whose maps are `maps`: with
/// [`SamplerOptions::require_known_schema`] off, a process that announces no known
/// schema is read anyway, its attributes named by index until its key map comes.
fn open_reader(maps: &ProcessMaps, options: &SamplerOptions) -> Result<ThreadReader, ThreadError> {
    let strict = options.thread_reader.with_require_known_schema(true);
    match ThreadReader::from_maps(maps, strict) {
        Err(ThreadError::Schema { .. }) if !options.require_known_schema => {
            ThreadReader::from_maps(maps, strict.with_require_known_schema(false))
        }
        other => other,
    }
}

/// What a sampler keeps of one followed process.
#[derive(Debug)]
pub(super) struct Process {
    start_time: u64,
    /// The stack copies of a process followed for its stacks only (a thread reader
    /// takes its own).
    pub stacks: StackReader,
    /// Thread names, read once per thread.
    pub names: Names,
    /// Its CPython interpreter, whose frames each sample walks.
    pub python: Option<PythonProcess>,
    /// Its threads' Python names (`threading.Thread(name=...)`).
    pub python_names: PythonThreadNames,
    /// Why a process that claims to run CPython gets no Python frames.
    pub python_refusal: Option<String>,
    /// Set on evidence that its mappings or context changed.
    pub suspect: bool,
    /// When its maps were last read, and its key map last looked at.
    maps_read: Instant,
    key_map_read: Instant,
    /// Set when a refresh gave a process followed for its stacks only a thread reader.
    pub gained_contexts: bool,
}

impl Process {
    /// The process `prepared` describes, its reader (or why none) and its maps.
    pub fn from_prepared(
        prepared: PreparedProcess,
    ) -> (Self, Result<ThreadReader, ThreadError>, ProcessMaps) {
        let now = Instant::now();
        let (python, python_refusal) = match prepared.python {
            Ok(python) => (python, None),
            Err(e) => (None, Some(format!("{} ({e})", e.kind()))),
        };
        let process = Self {
            start_time: prepared.start_time,
            stacks: StackReader::new(prepared.pid),
            names: Names::default(),
            python,
            python_names: prepared.python_names,
            python_refusal,
            suspect: false,
            maps_read: now,
            key_map_read: now,
            gained_contexts: false,
        };
        (process, prepared.reader, prepared.maps)
    }

    /// Whether the process exited, or another took its id.
    pub fn has_exited(&self, pid: u32) -> bool {
        procfs::start_time(pid) != Some(self.start_time) || otel_ctx_reader::memory::is_gone(pid)
    }

    /// The refresh policy of one process: its key map every [`REFRESH_INTERVAL`], its
    /// maps (and so its modules and slot location) on evidence at most as often, or
    /// every [`MODULES_FALLBACK`]. Returns the maps when they were read.
    pub fn refresh(
        &mut self,
        pid: u32,
        readers: &mut HashMap<u32, ThreadReader>,
        options: &SamplerOptions,
    ) -> Option<ProcessMaps> {
        let now = Instant::now();
        let mut context_changed = false;
        if now.duration_since(self.key_map_read) >= REFRESH_INTERVAL {
            self.key_map_read = now;
            if let Some(reader) = readers.get_mut(&pid) {
                context_changed = reader.refresh_key_map();
            }
        }
        let since = now.duration_since(self.maps_read);
        let due = ((self.suspect || context_changed) && since >= REFRESH_INTERVAL)
            || since >= MODULES_FALLBACK;
        if !due {
            return None;
        }
        self.suspect = false;
        self.maps_read = now;
        // A failure (the process exiting) shows in the exit check.
        let maps = ProcessMaps::read(pid).ok()?;
        match readers.get_mut(&pid) {
            Some(reader) => {
                // A failure leaves the old location: its samples show as unreadable.
                let _ = reader.refresh_modules_from(&maps);
                reader.refresh_key_map();
            }
            None => {
                if let Ok(reader) = open_reader(&maps, options) {
                    readers.insert(pid, reader);
                    self.gained_contexts = true;
                }
            }
        }
        Some(maps)
    }
}

/// The most thread names kept per process before they are read again.
const MAX_NAMES: usize = 4096;

/// A process's thread names, each read once.
#[derive(Debug, Default)]
pub(super) struct Names(HashMap<u32, String>);

impl Names {
    /// The name of thread `tid` of process `pid`.
    pub fn get(&mut self, pid: u32, tid: u32) -> &str {
        // A process with many short-lived threads would grow the map without end.
        if self.0.len() >= MAX_NAMES && !self.0.contains_key(&tid) {
            self.0.clear();
        }
        self.0
            .entry(tid)
            .or_insert_with(|| procfs::thread_name(pid, tid))
    }
}
