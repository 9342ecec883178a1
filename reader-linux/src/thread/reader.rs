//! Every thread's context (OTEP 4947): resolve `otel_thread_ctx_v1` once per process,
//! then stop each thread, read its record, and name its attributes through the process
//! context's `threadlocal.attribute_key_map`.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use otel_ctx_codec::attrs::ResolvedAttrs;
use otel_ctx_codec::record::{RecordHeader, RECORD_HEADER_SIZE};
use otel_ctx_codec::threadlocal::{MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV, SCHEMA_TLS_V1};

use crate::error::Error;
use crate::maps::ProcessMaps;
use crate::memory::{CopiedMemory, ProcessMemory, ReadMethod};
use crate::process::reader::{ProcessContextReader, ReaderOptions};
use crate::thread::tls::{
    loaded_modules, read_slot_into, read_stopped, resolve, ElfCache, Libc, LoadedModule,
    PtraceError, Resolution, SampleError, SkippedModule, SlotContents, StoppedThread, ThreadSample,
    TlsError,
};

/// Largest record the reader copies by default: any size `attrs_data_size` can declare.
pub const DEFAULT_MAX_RECORD_SIZE: usize = RECORD_HEADER_SIZE + u16::MAX as usize;

/// The values of `threadlocal.schema_version` whose records this reader knows: the TLS
/// record of OTEP 4947, under its development name and its announced final name.
pub const KNOWN_SCHEMAS: [&str; 2] = [SCHEMA_TLSDESC_V1_DEV, SCHEMA_TLS_V1];

/// How often, at most, [`ThreadReader::read_all`] lists the modules again because a
/// thread's slot could not be computed.
pub const MODULE_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// How often, at most, a sample whose key index lies past the key map makes a reader
/// that has found no process context look for one again.
pub const CONTEXT_SEARCH_INTERVAL: Duration = Duration::from_millis(100);

/// How a [`ThreadReader`] reads. Start from `ThreadReaderOptions::default()` and set
/// fields with the builder methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadReaderOptions {
    /// Read thread contexts only when the process context's `threadlocal.schema_version`
    /// is one of [`KNOWN_SCHEMAS`] (OTEP 4947 reading step 1: the process announces its
    /// thread contexts there). Default `true`; `false` reads the slot of any process that
    /// exports it, such as a test writer with no process context.
    pub require_known_schema: bool,
    /// Largest record copied; larger ones are reported as errors. Default
    /// [`DEFAULT_MAX_RECORD_SIZE`].
    pub max_record_size: usize,
    /// How long opening the reader keeps reading a process context that is being
    /// updated (every read met an update in progress, `Error::StillUpdating`) before it
    /// concludes; default [`OPEN_PATIENCE`]. A process that republishes in a tight loop
    /// is caught between two updates within it.
    pub open_patience: Duration,
}

/// [`ThreadReaderOptions::open_patience`] by default.
pub const OPEN_PATIENCE: Duration = Duration::from_secs(1);

/// The pause between two reads of a process context that was being updated, while a
/// reader opens.
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(5);

impl Default for ThreadReaderOptions {
    fn default() -> Self {
        Self {
            require_known_schema: true,
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
            open_patience: OPEN_PATIENCE,
        }
    }
}

impl ThreadReaderOptions {
    /// Sets [`require_known_schema`](Self::require_known_schema).
    #[must_use]
    pub const fn with_require_known_schema(mut self, require: bool) -> Self {
        self.require_known_schema = require;
        self
    }

    /// Sets [`max_record_size`](Self::max_record_size).
    #[must_use]
    pub const fn with_max_record_size(mut self, max: usize) -> Self {
        self.max_record_size = max;
        self
    }

    /// Sets [`open_patience`](Self::open_patience).
    #[must_use]
    pub const fn with_open_patience(mut self, patience: Duration) -> Self {
        self.open_patience = patience;
        self
    }
}

/// Why a process's thread contexts cannot be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// The process cannot be inspected (gone, permission denied, ...).
    Process(#[source] Error),
    /// No module the reader could analyse defines `otel_thread_ctx_v1`.
    NotExported {
        /// The executable mappings left out of the analysis: one of them may be the
        /// module that defines it.
        skipped: Vec<SkippedModule>,
    },
    /// `otel_thread_ctx_v1` cannot be located.
    Tls(#[source] TlsError),
    /// The process context announces no thread-context schema this reader knows.
    Schema {
        /// The process.
        pid: u32,
        /// `threadlocal.schema_version`, if the process context has one.
        seen: Option<String>,
    },
}

impl fmt::Display for ThreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Process(e) => e.fmt(f),
            Self::NotExported { skipped } if skipped.is_empty() => f.write_str(
                "no module exports otel_thread_ctx_v1: the process publishes no thread contexts",
            ),
            Self::NotExported { skipped } => write!(
                f,
                "no module the reader could analyse exports otel_thread_ctx_v1, and {} \
                 could not be analysed: {}",
                if skipped.len() == 1 {
                    "one module".to_owned()
                } else {
                    format!("{} modules", skipped.len())
                },
                skipped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Self::Tls(e) => e.fmt(f),
            Self::Schema { pid, seen: None } => write!(
                f,
                "process {pid} announces no thread contexts: its process context has no \
                 threadlocal.schema_version (or cannot be read); it may publish it later, \
                 so read again"
            ),
            Self::Schema {
                pid,
                seen: Some(schema),
            } => write!(
                f,
                "process {pid} announces thread-context schema {schema:?}, which this reader \
                 does not know (it reads {})",
                KNOWN_SCHEMAS.join(", ")
            ),
        }
    }
}

/// A valid thread context, copied out of the target and decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnedThreadContext {
    /// The record's fixed part.
    pub header: RecordHeader,
    /// The attrs-data, exactly `attrs_data_size` bytes.
    pub attrs_data: Vec<u8>,
    /// Where the record lives in the target.
    pub record_address: u64,
    /// Attributes by name, in key-index order: the last occurrence of each key, keys
    /// outside the key map dropped (all of them when the process has no key map).
    /// Values that are not UTF-8 are shown with replacement characters.
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
#[non_exhaustive]
pub struct ThreadReport {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`/proc/<pid>/task/<tid>/comm`).
    pub name: String,
    /// The context (`None`: no context attached), or why it could not be read.
    pub context: Result<Option<OwnedThreadContext>, SampleError>,
}

impl ThreadReport {
    /// The report of thread `tid`, named `name`, whose context was read some other way
    /// (a sampler's last sample of it).
    pub fn new(
        tid: u32,
        name: String,
        context: Result<Option<OwnedThreadContext>, SampleError>,
    ) -> Self {
        Self { tid, name, context }
    }
}

/// Reads the thread contexts of one process.
#[derive(Debug)]
pub struct ThreadReader {
    pid: u32,
    memory: ProcessMemory,
    cache: ElfCache,
    modules: Vec<(String, u64)>,
    skipped: Vec<SkippedModule>,
    /// When the modules were last listed.
    modules_read_at: Instant,
    resolution: Resolution,
    context: Option<ProcessContextReader>,
    context_published_at: u64,
    /// Why the last read of the process context failed, if it did.
    context_error: Option<Error>,
    /// Set when a sample's unknown key index found no process context to read: the
    /// mappings are not scanned again for one before this instant.
    context_search_after: Option<Instant>,
    key_map: Option<Vec<String>>,
    schema_version: Option<String>,
    max_record_size: usize,
    /// The buffer [`read_thread`](Self::read_thread) samples into, kept between calls.
    scratch: RecordBuffer,
    /// Each thread's record at its last sample: where a sample's own work may copy the
    /// record ahead (writers keep a thread's record where it is, request after request).
    records_at: HashMap<u32, u64>,
}

fn module_list(modules: &[LoadedModule]) -> Vec<(String, u64)> {
    modules.iter().map(|m| (m.path.clone(), m.bias)).collect()
}

mod held;

impl ThreadReader {
    /// Locates `otel_thread_ctx_v1` in process `pid` and reads its key map, with default
    /// options: the process context must announce a schema of [`KNOWN_SCHEMAS`].
    pub fn open(pid: u32) -> Result<Self, ThreadError> {
        Self::with_options(pid, ThreadReaderOptions::default())
    }

    /// Locates `otel_thread_ctx_v1` in process `pid` and reads its key map.
    pub fn with_options(pid: u32, options: ThreadReaderOptions) -> Result<Self, ThreadError> {
        let maps = Self::read_maps(pid)?;
        Self::from_maps(&maps, options)
    }

    /// Like [`with_options`](Self::with_options), from a pass over `/proc/<pid>/maps`
    /// the caller already made (and may use for the process context too): the modules
    /// and the process context's mapping come from `maps`.
    pub fn from_maps(
        maps: &ProcessMaps,
        options: ThreadReaderOptions,
    ) -> Result<Self, ThreadError> {
        let pid = maps.pid;
        let mut cache = ElfCache::new();
        let memory = ProcessMemory::new(pid, ReadMethod::Auto);
        let modules = loaded_modules(maps, &mut cache);
        let resolution = match Self::resolve(&modules.loaded, &memory) {
            Err(ThreadError::Tls(TlsError::SymbolNotFound)) => {
                return Err(ThreadError::NotExported {
                    skipped: modules.skipped,
                })
            }
            other => other?,
        };
        let mut reader = Self {
            pid,
            memory,
            cache,
            modules: module_list(&modules.loaded),
            skipped: modules.skipped,
            modules_read_at: Instant::now(),
            resolution,
            context: ProcessContextReader::from_maps(maps, ReaderOptions::default()).ok(),
            context_published_at: 0,
            context_search_after: None,
            context_error: None,
            key_map: None,
            schema_version: None,
            max_record_size: options.max_record_size.max(RECORD_HEADER_SIZE),
            scratch: RecordBuffer::new(),
            records_at: HashMap::new(),
        };
        // A process that updates its context all the time can be caught mid-update by
        // every attempt of one read (each read retries a few times itself): read again,
        // a little apart, within the patience, before concluding.
        let deadline = Instant::now() + options.open_patience;
        loop {
            reader.refresh_key_map();
            let updating = matches!(reader.context_error, Some(Error::StillUpdating { .. }));
            if !updating || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(OPEN_RETRY_PAUSE);
        }
        if options.require_known_schema {
            let known = reader
                .schema_version
                .as_deref()
                .is_some_and(|s| KNOWN_SCHEMAS.contains(&s));
            if !known {
                // Without a schema, say why: a process context that cannot be read at all
                // (permission denied, malformed) is not one that announces nothing.
                if reader.schema_version.is_none() {
                    if let Some(e) = reader.context_error.take() {
                        if !matches!(e, Error::NoContext { .. }) {
                            return Err(ThreadError::Process(e));
                        }
                    }
                }
                return Err(ThreadError::Schema {
                    pid,
                    seen: reader.schema_version,
                });
            }
        }
        Ok(reader)
    }

    fn read_maps(pid: u32) -> Result<ProcessMaps, ThreadError> {
        ProcessMaps::read(pid).map_err(|e| {
            ThreadError::Process(match e.kind() {
                std::io::ErrorKind::NotFound => Error::gone(pid),
                _ => Error::from_io(pid, format!("read /proc/{pid}/maps"), e),
            })
        })
    }

    fn resolve(
        modules: &[LoadedModule],
        memory: &ProcessMemory,
    ) -> Result<Resolution, ThreadError> {
        let libc = Libc::of_modules(modules);
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

    /// The executable mappings the analysis left out, and why (a file that could not be
    /// opened safely, or cost more than the reader's budget).
    pub fn skipped_modules(&self) -> &[SkippedModule] {
        &self.skipped
    }

    /// Re-reads the modules and resolves again if they changed (a library was loaded or
    /// unloaded). Returns whether they changed. Reads `/proc/<pid>/maps`: call it on
    /// evidence (a slot that cannot be computed, a new module announced), not per sample.
    pub fn refresh_modules(&mut self) -> Result<bool, ThreadError> {
        let maps = Self::read_maps(self.pid)?;
        self.refresh_modules_from(&maps)
    }

    /// Like [`refresh_modules`](Self::refresh_modules), from a pass over the process's
    /// maps the caller made (and uses for something else too).
    pub fn refresh_modules_from(&mut self, maps: &ProcessMaps) -> Result<bool, ThreadError> {
        self.modules_read_at = Instant::now();
        let modules = loaded_modules(maps, &mut self.cache);
        let list = module_list(&modules.loaded);
        if list == self.modules {
            return Ok(false);
        }
        self.resolution = Self::resolve(&modules.loaded, &self.memory)?;
        self.modules = list;
        self.skipped = modules.skipped;
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
            // Caught mid-update: the same mapping, read again next time.
            Err(e @ Error::StillUpdating { .. }) => {
                self.context_error = Some(e);
                return false;
            }
            Err(e) => {
                // Unpublished or republished at a new address: look again next time.
                self.context = None;
                self.context_error = Some(e);
                return false;
            }
        };
        self.context_error = None;
        self.context_published_at = snapshot.monotonic_published_at_ns;
        if let Ok(threadlocal) = snapshot.threadlocal {
            self.schema_version = threadlocal.schema_version;
            self.key_map = threadlocal.attribute_key_map;
        }
        true
    }

    /// The process's thread ids, in increasing order.
    pub fn tids(&self) -> Result<Vec<u32>, Error> {
        crate::procfs::thread_ids(self.pid)
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
        let resolved = self.resolve_attrs(attrs_data);
        let map = self.key_map.as_deref().unwrap_or(&[]);
        resolved
            .iter()
            .map(|(key, value)| {
                (
                    map[usize::from(key)].clone(),
                    String::from_utf8_lossy(value).into_owned(),
                )
            })
            .collect()
    }

    /// Stops thread `tid`, reads its context, lets it go. `Ok(None)`: no context.
    /// Allocates the result; [`sample_into`](Self::sample_into) does not.
    pub fn read_thread(&mut self, tid: u32) -> Result<Option<OwnedThreadContext>, SampleError> {
        // The reader's own buffer, taken out for the call and put back after.
        let mut buffer = std::mem::take(&mut self.scratch);
        let owned = self
            .sample_into(tid, &mut buffer)
            .map(|context| context.map(|context| context.to_owned_context()));
        self.scratch = buffer;
        owned
    }

    /// Stops thread `tid`, copies its record into `buffer`, lets it go, and names its
    /// attributes with the cached key map. `Ok(None)`: no context.
    ///
    /// Allocation-free once `buffer` has held a record this large: the record goes into
    /// the caller's buffer, the attributes are resolved on the stack, and names are
    /// borrowed from the key map. Only a key index past the cached map costs more: the
    /// process context is read again (OTEP 4947: an unknown index triggers a refresh).
    pub fn sample_into<'a>(
        &'a mut self,
        tid: u32,
        buffer: &'a mut RecordBuffer,
    ) -> Result<Option<ThreadContextRef<'a>>, SampleError> {
        let ((), context) = self.sample_stopped_into(tid, buffer, |stopped, _| {
            Ok(((), stopped.thread_pointer()?))
        })?;
        Ok(context)
    }

    /// The named context of what a read found: `None` unless a valid record.
    fn named<'a>(
        &'a mut self,
        contents: SlotContents,
        attrs_data: &'a [u8],
    ) -> Option<ThreadContextRef<'a>> {
        match contents {
            SlotContents::Record { address, header } => {
                Some(self.name_record(header, address, attrs_data))
            }
            _ => None,
        }
    }

    /// Names the attributes of a valid record that was copied out of the target some
    /// other way (the eBPF sampler's ring buffer), exactly as
    /// [`sample_into`](Self::sample_into) names its own: the cached key map, refreshed
    /// once when an index lies past it.
    pub fn name_record<'a>(
        &'a mut self,
        header: RecordHeader,
        record_address: u64,
        attrs_data: &'a [u8],
    ) -> ThreadContextRef<'a> {
        let resolved = self.resolve_attrs(attrs_data);
        ThreadContextRef {
            header,
            record_address,
            attrs_data,
            resolved,
            key_map: self.key_map.as_deref().unwrap_or(&[]),
        }
    }

    fn key_map_len(&self) -> usize {
        self.key_map
            .as_ref()
            .map_or(0, |m| m.len().min(MAX_KEY_MAP_LEN))
    }

    /// Resolves `attrs_data` against the key map, refreshing the map once when an
    /// index lies past it: the map may have grown since it was read.
    ///
    /// With a process context, the refresh reads its header, and the payload only when
    /// the header says it changed. Without one, looking for it means scanning the
    /// process's mappings, tens of microseconds: that is done at most once every
    /// [`CONTEXT_SEARCH_INTERVAL`], so that sampling a process that publishes no context
    /// at a high rate does not scan its mappings at every sample. An explicit
    /// [`refresh_key_map`](Self::refresh_key_map) always looks.
    fn resolve_attrs<'d>(&mut self, attrs_data: &'d [u8]) -> ResolvedAttrs<'d> {
        let resolved = ResolvedAttrs::resolve(attrs_data, self.key_map_len());
        if resolved.max_unknown_index().is_some() && self.refresh_key_map_for_sample() {
            return ResolvedAttrs::resolve(attrs_data, self.key_map_len());
        }
        resolved
    }

    /// [`refresh_key_map`](Self::refresh_key_map), with the search for a missing
    /// process context limited to one per [`CONTEXT_SEARCH_INTERVAL`].
    fn refresh_key_map_for_sample(&mut self) -> bool {
        if self.context.is_none() {
            let now = Instant::now();
            if self.context_search_after.is_some_and(|after| now < after) {
                return false;
            }
            self.context_search_after = Some(now + CONTEXT_SEARCH_INTERVAL);
        }
        self.refresh_key_map()
    }

    /// Reads every thread. Threads that exit meanwhile are left out. When a thread's
    /// slot cannot be computed, the modules are re-read (a library may have been
    /// unloaded) before its error is reported: at most once per
    /// [`MODULE_REFRESH_INTERVAL`], since reading the maps takes the target's mmap lock.
    pub fn read_all(&mut self) -> Result<Vec<ThreadReport>, Error> {
        let mut reports = Vec::new();
        for tid in self.tids()? {
            let mut context = self.read_thread(tid);
            if matches!(context, Err(SampleError::Tls(_)))
                && self.modules_read_at.elapsed() >= MODULE_REFRESH_INTERVAL
                && self.refresh_modules().is_ok()
            {
                context = self.read_thread(tid);
            }
            if matches!(context, Err(SampleError::Ptrace(PtraceError::Gone))) {
                continue;
            }
            let name = crate::procfs::thread_name(self.pid, tid);
            reports.push(ThreadReport { tid, name, context });
        }
        Ok(reports)
    }
}

/// The caller's buffer for [`ThreadReader::sample_into`]: reused from sample to sample.
#[derive(Debug, Default)]
pub struct RecordBuffer {
    attrs_data: Vec<u8>,
}

impl RecordBuffer {
    /// An empty buffer; it grows to the largest record sampled into it.
    pub const fn new() -> Self {
        Self {
            attrs_data: Vec::new(),
        }
    }

    /// A buffer that holds records of up to `record_size` bytes without growing.
    pub fn with_capacity(record_size: usize) -> Self {
        Self {
            attrs_data: Vec::with_capacity(record_size.saturating_sub(RECORD_HEADER_SIZE)),
        }
    }
}

/// A valid thread context as [`ThreadReader::sample_into`] read it: borrowed from the
/// caller's [`RecordBuffer`] and the reader's key map.
#[derive(Clone, Debug)]
pub struct ThreadContextRef<'a> {
    /// The record's fixed part.
    pub header: RecordHeader,
    /// Where the record lives in the target.
    pub record_address: u64,
    /// The attrs-data, exactly `attrs_data_size` bytes.
    pub attrs_data: &'a [u8],
    resolved: ResolvedAttrs<'a>,
    key_map: &'a [String],
}

impl<'a> ThreadContextRef<'a> {
    /// A record copied out some other way (kept from an earlier read, or made by a
    /// test), its attributes named through `key_map` as a reader names them.
    pub fn new(
        header: RecordHeader,
        record_address: u64,
        attrs_data: &'a [u8],
        key_map: &'a [String],
    ) -> Self {
        Self {
            header,
            record_address,
            attrs_data,
            resolved: ResolvedAttrs::resolve(attrs_data, key_map.len().min(MAX_KEY_MAP_LEN)),
            key_map,
        }
    }

    /// The W3C trace id.
    pub const fn trace_id(&self) -> [u8; 16] {
        self.header.trace_id
    }

    /// The W3C span id.
    pub const fn span_id(&self) -> [u8; 8] {
        self.header.span_id
    }

    /// The W3C trace flags.
    pub const fn trace_flags(&self) -> u8 {
        self.header.trace_flags
    }

    /// Attributes by name, in key-index order: the last occurrence of each key, keys
    /// outside the key map left out (OTEP 4947), the values as the record holds them.
    pub fn attributes(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        let map = self.key_map;
        self.resolved
            .iter()
            .map(move |(key, value)| (map[usize::from(key)].as_str(), value))
    }

    /// The value of the attribute named `name`, if the record has it.
    pub fn attribute(&self, name: &str) -> Option<&'a [u8]> {
        self.attributes()
            .find(|(key, _)| *key == name)
            .map(|(_, v)| v)
    }

    /// The context copied out, as [`ThreadReader::read_thread`] returns it.
    pub fn to_owned_context(&self) -> OwnedThreadContext {
        OwnedThreadContext {
            header: self.header,
            attrs_data: self.attrs_data.to_vec(),
            record_address: self.record_address,
            attributes: self
                .attributes()
                .map(|(key, value)| (key.to_owned(), String::from_utf8_lossy(value).into_owned()))
                .collect(),
        }
    }

    /// Entries dropped because their key index is outside the key map.
    pub fn dropped(&self) -> usize {
        self.resolved.dropped()
    }
}
