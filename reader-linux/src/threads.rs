//! Every thread's context (OTEP 4947): resolve `otel_thread_ctx_v1` once per process,
//! then stop each thread, read its record, and name its attributes through the process
//! context's `threadlocal.attribute_key_map`.

use std::fmt;
use std::io;

use otel_ctx_codec::attrs::ResolvedAttrs;
use otel_ctx_codec::record::{RecordHeader, RECORD_HEADER_SIZE};
use otel_ctx_codec::threadlocal::MAX_KEY_MAP_LEN;

use crate::error::Error;
use crate::memory::{ProcessMemory, ReadMethod};
use crate::reader::ProcessContextReader;
use crate::tls::{
    loaded_modules, read_stopped, resolve, ElfCache, Libc, LoadedModule, PtraceError, Resolution,
    SampleError, SlotState, StoppedThread, ThreadSample, TlsError,
};

/// Largest record the reader copies by default: any size `attrs_data_size` can declare.
pub const DEFAULT_MAX_RECORD_SIZE: usize = RECORD_HEADER_SIZE + u16::MAX as usize;

/// Why a process's thread contexts cannot be read at all.
#[derive(Debug)]
pub enum ThreadError {
    /// The process cannot be inspected (gone, permission denied, ...).
    Process(Error),
    /// `otel_thread_ctx_v1` cannot be located.
    Tls(TlsError),
}

impl fmt::Display for ThreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Process(e) => e.fmt(f),
            Self::Tls(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ThreadError {}

/// A valid thread context, copied out of the target and decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedThreadContext {
    /// The record's fixed part.
    pub header: RecordHeader,
    /// The attrs-data, exactly `attrs_data_size` bytes.
    pub attrs_data: Vec<u8>,
    /// Where the record lives in the target.
    pub record_address: u64,
    /// Attributes by name, in key-index order: the last occurrence of each key, keys
    /// outside the key map dropped; `#<index>` names when the process has no key map.
    pub attributes: Vec<(String, String)>,
}

impl OwnedThreadContext {
    /// The W3C trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.header.trace_id
    }

    /// The W3C span id.
    pub fn span_id(&self) -> [u8; 8] {
        self.header.span_id
    }

    /// The W3C trace flags.
    pub fn trace_flags(&self) -> u8 {
        self.header.trace_flags
    }
}

/// One thread and what was read of it.
#[derive(Debug)]
pub struct ThreadReport {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`/proc/<pid>/task/<tid>/comm`).
    pub name: String,
    /// The context (`None`: no context attached), or why it could not be read.
    pub context: Result<Option<OwnedThreadContext>, SampleError>,
}

/// Reads the thread contexts of one process.
#[derive(Debug)]
pub struct ThreadReader {
    pid: u32,
    memory: ProcessMemory,
    cache: ElfCache,
    modules: Vec<(String, u64)>,
    resolution: Resolution,
    context: Option<ProcessContextReader>,
    context_published_at: u64,
    key_map: Option<Vec<String>>,
    schema_version: Option<String>,
    max_record_size: usize,
}

fn process_error(pid: u32, operation: &str, source: io::Error) -> Error {
    match source.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => Error::ProcessGone { pid },
        Some(libc::EACCES | libc::EPERM) => Error::PermissionDenied {
            pid,
            operation: operation.to_owned(),
            source,
        },
        _ => Error::Io {
            pid,
            operation: operation.to_owned(),
            source,
        },
    }
}

fn module_list(modules: &[LoadedModule]) -> Vec<(String, u64)> {
    modules.iter().map(|m| (m.path.clone(), m.bias)).collect()
}

impl ThreadReader {
    /// Locates `otel_thread_ctx_v1` in process `pid` and reads its key map.
    pub fn open(pid: u32) -> Result<Self, ThreadError> {
        let mut cache = ElfCache::new();
        let memory = ProcessMemory::new(pid, ReadMethod::Auto);
        let modules = Self::load(pid, &mut cache)?;
        let resolution = Self::resolve(&modules, &memory)?;
        let mut reader = Self {
            pid,
            memory,
            cache,
            modules: module_list(&modules),
            resolution,
            context: None,
            context_published_at: 0,
            key_map: None,
            schema_version: None,
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
        };
        reader.refresh_key_map();
        Ok(reader)
    }

    fn load(pid: u32, cache: &mut ElfCache) -> Result<Vec<LoadedModule>, ThreadError> {
        loaded_modules(pid, cache)
            .map_err(|e| ThreadError::Process(process_error(pid, "read /proc/<pid>/maps", e)))
    }

    fn resolve(
        modules: &[LoadedModule],
        memory: &ProcessMemory,
    ) -> Result<Resolution, ThreadError> {
        let libc = Libc::detect(modules.iter().map(|m| m.path.as_str()));
        resolve(modules, libc, memory).map_err(ThreadError::Tls)
    }

    /// The process id.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// How the slot is found: module, access model, location.
    pub const fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// `threadlocal.attribute_key_map`, if the process context has one.
    pub fn key_map(&self) -> Option<&[String]> {
        self.key_map.as_deref()
    }

    /// `threadlocal.schema_version`, if the process context has one.
    pub fn schema_version(&self) -> Option<&str> {
        self.schema_version.as_deref()
    }

    /// Sets the largest record copied; larger ones are reported as errors.
    pub fn set_max_record_size(&mut self, max: usize) {
        self.max_record_size = max.max(RECORD_HEADER_SIZE);
    }

    /// Re-reads the modules and resolves again if they changed (a library was loaded or
    /// unloaded). Returns whether they changed.
    pub fn refresh_modules(&mut self) -> Result<bool, ThreadError> {
        let modules = Self::load(self.pid, &mut self.cache)?;
        let list = module_list(&modules);
        if list == self.modules {
            return Ok(false);
        }
        self.resolution = Self::resolve(&modules, &self.memory)?;
        self.modules = list;
        Ok(true)
    }

    /// Reads the process context again if it changed since the last read, and takes its
    /// key map. Returns whether it changed. A process without a readable context keeps
    /// the key map it had.
    pub fn refresh_key_map(&mut self) -> bool {
        if self.context.is_none() {
            self.context = ProcessContextReader::open(self.pid).ok();
        }
        let Some(reader) = self.context.as_mut() else {
            return false;
        };
        let snapshot = match reader.read_if_changed(self.context_published_at) {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return false,
            Err(_) => {
                // Unpublished or republished at a new address: look again next time.
                self.context = None;
                return false;
            }
        };
        self.context_published_at = snapshot.monotonic_published_at_ns;
        if let Ok(threadlocal) = snapshot.threadlocal() {
            self.schema_version = threadlocal.schema_version;
            self.key_map = threadlocal.attribute_key_map;
        }
        true
    }

    /// The process's thread ids.
    pub fn tids(&self) -> Result<Vec<u32>, Error> {
        let dir = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map_err(|e| process_error(self.pid, "list /proc/<pid>/task", e))?;
        let mut tids: Vec<u32> = dir
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        Ok(tids)
    }

    /// Stops thread `tid`, reads its slot and record as they are (a checker wants to see
    /// a `valid` byte other than 0 or 1), lets it go.
    pub fn sample_thread(&self, tid: u32) -> Result<ThreadSample, SampleError> {
        let stopped = StoppedThread::stop(tid)?;
        read_stopped(
            &stopped,
            &self.resolution,
            &self.memory,
            self.max_record_size,
        )
        // `stopped` is dropped on return: the thread runs on.
    }

    /// Names the attributes of attrs-data as [`read_thread`](Self::read_thread) does.
    pub fn attribute_names(&mut self, attrs_data: &[u8]) -> Vec<(String, String)> {
        self.name_attributes(attrs_data)
    }

    /// Stops thread `tid`, reads its context, lets it go. `Ok(None)`: no context.
    pub fn read_thread(&mut self, tid: u32) -> Result<Option<OwnedThreadContext>, SampleError> {
        let sample = self.sample_thread(tid)?;
        let SlotState::Record(record) = sample.state else {
            return Ok(None);
        };
        let attributes = self.name_attributes(&record.attrs_data);
        Ok(Some(OwnedThreadContext {
            header: record.header,
            attrs_data: record.attrs_data,
            record_address: record.address,
            attributes,
        }))
    }

    fn name_attributes(&mut self, attrs_data: &[u8]) -> Vec<(String, String)> {
        let key_map_len = |map: &Option<Vec<String>>| {
            map.as_ref()
                .map_or(MAX_KEY_MAP_LEN, |m| m.len().min(MAX_KEY_MAP_LEN))
        };
        let mut resolved = ResolvedAttrs::resolve(attrs_data, key_map_len(&self.key_map));
        // An index past the cached key map: the map may have grown since it was read.
        if resolved.max_unknown_index().is_some() && self.refresh_key_map() {
            resolved = ResolvedAttrs::resolve(attrs_data, key_map_len(&self.key_map));
        }
        resolved
            .iter()
            .map(|(key, value)| {
                let name = match &self.key_map {
                    Some(map) => map[usize::from(key)].clone(),
                    None => format!("#{key}"),
                };
                (name, String::from_utf8_lossy(value).into_owned())
            })
            .collect()
    }

    /// Reads every thread. Threads that exit meanwhile are left out. When a thread's
    /// slot cannot be computed, the modules are re-read once (a library may have been
    /// unloaded) before its error is reported.
    pub fn read_all(&mut self) -> Result<Vec<ThreadReport>, Error> {
        let mut reports = Vec::new();
        let mut refreshed = false;
        for tid in self.tids()? {
            let mut context = self.read_thread(tid);
            if matches!(context, Err(SampleError::Tls(_))) && !refreshed {
                refreshed = true;
                if self.refresh_modules().is_ok() {
                    context = self.read_thread(tid);
                }
            }
            if matches!(context, Err(SampleError::Ptrace(PtraceError::Gone))) {
                continue;
            }
            let name = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_default();
            reports.push(ThreadReport { tid, name, context });
        }
        Ok(reports)
    }
}
