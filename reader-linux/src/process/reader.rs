//! Reading one process's context: OTEP 4719, "Read (external reader)", steps 1 to 6.

use std::time::Duration;

use otel_ctx_codec::header::{HeaderError, HEADER_SIZE, MAX_PAYLOAD_SIZE};
use otel_ctx_codec::proto::{Limits, ProcessContextView};
use otel_ctx_codec::threadlocal::ThreadlocalError;

use crate::error::{Error, Malformed};
use crate::maps::{ContextMapping, MapsScanner, ProcessMaps};
use crate::memory::{is_gone, CopyError, ProcessMemory, ReadMethod};
use crate::process::seqlock::{read_consistent, read_header, PayloadCopy, SeqlockRead};
use otel_ctx_codec::owned::{OwnedProcessContext, Threadlocal};

/// Attempts a read makes by default before giving up with [`Error::StillUpdating`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// Longest pause between two attempts; the pauses add up to a few milliseconds.
const MAX_BACKOFF: Duration = Duration::from_millis(2);

/// How a [`ProcessContextReader`] reads. Start from `ReaderOptions::default()` and set
/// fields with the builder methods (new fields may come as the specifications evolve).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderOptions {
    /// Largest `payload_size` accepted; larger ones are [`Malformed`] and are never
    /// copied. Default [`MAX_PAYLOAD_SIZE`] (65536), the eBPF profiler's bound.
    pub max_payload_size: u32,
    /// Attempts per read while `monotonic_published_at_ns` is 0 or changes under the
    /// reader; at least 1. Default [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// How memory is copied. Default [`ReadMethod::Auto`].
    pub read_method: ReadMethod,
    /// Bounds on the payload's protobuf (depth, number of attributes); its
    /// `max_payload_size` is overridden by the field above.
    pub limits: Limits,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            max_payload_size: MAX_PAYLOAD_SIZE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            read_method: ReadMethod::Auto,
            limits: Limits::default(),
        }
    }
}

impl ReaderOptions {
    /// Sets [`max_payload_size`](Self::max_payload_size).
    #[must_use]
    pub const fn with_max_payload_size(mut self, max: u32) -> Self {
        self.max_payload_size = max;
        self
    }

    /// Sets [`max_attempts`](Self::max_attempts).
    #[must_use]
    pub const fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Sets [`read_method`](Self::read_method).
    #[must_use]
    pub const fn with_read_method(mut self, method: ReadMethod) -> Self {
        self.read_method = method;
        self
    }

    /// Sets [`limits`](Self::limits).
    #[must_use]
    pub const fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// One consistent read of a process context.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The process.
    pub pid: u32,
    /// The mapping the header lives in.
    pub mapping: ContextMapping,
    /// The header's `version`.
    pub version: u32,
    /// The header's `monotonic_published_at_ns`: `CLOCK_BOOTTIME` nanoseconds at
    /// publication, and the cache key of this snapshot.
    pub monotonic_published_at_ns: u64,
    /// The header's `payload_size`.
    pub payload_size: u32,
    /// The header's `payload`: the payload's address in the process.
    pub payload: u64,
    /// The payload bytes, as copied; [`ProcessContextView::decode`] accepts them.
    pub payload_bytes: Vec<u8>,
    /// The decoded payload.
    pub context: OwnedProcessContext,
    /// The thread-context reference data (`threadlocal.*` extra attributes), checked as
    /// the codec checks it, when the payload was decoded.
    pub threadlocal: Result<Threadlocal, ThreadlocalError>,
}

impl Snapshot {
    /// The thread-context reference data, or why it does not follow OTEP 4947.
    pub const fn threadlocal(&self) -> Result<&Threadlocal, &ThreadlocalError> {
        self.threadlocal.as_ref()
    }

    /// Nanoseconds between publication and `now_boottime_ns` (see [`boottime_ns`]), 0 if
    /// the publication claims to be in the future.
    pub const fn age_ns(&self, now_boottime_ns: u64) -> u64 {
        now_boottime_ns.saturating_sub(self.monotonic_published_at_ns)
    }
}

/// `CLOCK_BOOTTIME` now, in nanoseconds: the clock of `monotonic_published_at_ns`.
pub fn boottime_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// Reads one process's context, again and again. It caches the mapping's address once
/// the header's signature and version check out, and a buffer for the payload; a read of
/// an unchanged context then costs two `process_vm_readv` calls
/// ([`read_if_changed`](Self::read_if_changed)) and a changed one three.
#[derive(Debug)]
pub struct ProcessContextReader {
    pid: u32,
    options: ReaderOptions,
    memory: ProcessMemory,
    mapping: Option<ContextMapping>,
    /// Candidates from a maps pass the caller already made, taken by the first lookup
    /// instead of a pass of its own.
    candidates: Option<Vec<ContextMapping>>,
    scanner: MapsScanner,
    payload: Vec<u8>,
}

/// What one attempt found.
enum Attempt {
    Done(Snapshot),
    Unchanged,
    Retry,
}

impl ProcessContextReader {
    /// A reader of process `pid` with default options. Nothing is read yet: the mapping
    /// is looked up on the first read, so a process may publish after this call.
    pub fn open(pid: u32) -> Result<Self, Error> {
        Self::with_options(pid, ReaderOptions::default())
    }

    /// A reader of process `pid`. Fails only if the process does not exist.
    pub fn with_options(pid: u32, options: ReaderOptions) -> Result<Self, Error> {
        if is_gone(pid) {
            return Err(Error::gone(pid));
        }
        Ok(Self {
            pid,
            options,
            memory: ProcessMemory::new(pid, options.read_method),
            mapping: None,
            candidates: None,
            scanner: MapsScanner::new(),
            payload: Vec::new(),
        })
    }

    /// A reader of the process of `maps`, whose first read takes the context mappings
    /// that pass over `/proc/<pid>/maps` found instead of reading the file again: a
    /// caller that also lists the modules reads the maps once. Later lookups (after an
    /// unpublish, say) read the maps themselves.
    pub fn from_maps(maps: &ProcessMaps, options: ReaderOptions) -> Result<Self, Error> {
        let mut reader = Self::with_options(maps.pid, options)?;
        reader.candidates = Some(maps.context_mappings.clone());
        Ok(reader)
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// The cached mapping, once a read has found and checked it.
    pub const fn mapping(&self) -> Option<&ContextMapping> {
        self.mapping.as_ref()
    }

    /// Whether reads go through `/proc/<pid>/mem` (because `process_vm_readv` was
    /// refused, or by [`ReadMethod::ProcMem`]).
    pub fn uses_proc_mem(&self) -> bool {
        self.memory.uses_proc_mem()
    }

    /// Reads and decodes the current context.
    pub fn read(&mut self) -> Result<Snapshot, Error> {
        match self.read_since(None)? {
            Some(snapshot) => Ok(snapshot),
            // `read_since(None)` never reports "unchanged".
            None => Err(Error::StillUpdating {
                pid: self.pid,
                attempts: self.options.max_attempts,
            }),
        }
    }

    /// Reads the context only if it was published after `last_published_at_ns` (a
    /// [`Snapshot::monotonic_published_at_ns`] from an earlier read): `Ok(None)` when the
    /// timestamp is unchanged, which costs two small copies and no payload copy.
    pub fn read_if_changed(
        &mut self,
        last_published_at_ns: u64,
    ) -> Result<Option<Snapshot>, Error> {
        self.read_since(Some(last_published_at_ns))
    }

    fn read_since(&mut self, last: Option<u64>) -> Result<Option<Snapshot>, Error> {
        let attempts = self.options.max_attempts.max(1);
        let mut rediscovered = false;
        for attempt in 0..attempts {
            if attempt > 0 {
                backoff(attempt);
            }
            let mapping = match self.mapping {
                Some(mapping) => mapping,
                None => {
                    rediscovered = true;
                    self.discover()?
                }
            };
            match self.attempt(&mapping, last) {
                Ok(Attempt::Done(snapshot)) => return Ok(Some(snapshot)),
                Ok(Attempt::Unchanged) => return Ok(None),
                Ok(Attempt::Retry) => {}
                // The cached mapping no longer holds a context (unpublished, or another
                // one published elsewhere): look it up again, once per read.
                Err(AttemptError::Stale(_)) if !rediscovered => self.mapping = None,
                Err(AttemptError::Stale(e)) | Err(AttemptError::Fatal(e)) => {
                    self.mapping = None;
                    return Err(e);
                }
            }
        }
        Err(Error::StillUpdating {
            pid: self.pid,
            attempts,
        })
    }

    /// One pass of steps 2 to 6 on `mapping`.
    fn attempt(
        &mut self,
        mapping: &ContextMapping,
        last: Option<u64>,
    ) -> Result<Attempt, AttemptError> {
        let pid = self.pid;
        let read = read_consistent(
            &self.memory,
            mapping.start,
            self.options.max_payload_size,
            last,
            &mut self.payload,
        )
        .map_err(|e| AttemptError::Fatal(Error::from_copy(pid, e, "the header")))?;
        let header = match read {
            SeqlockRead::Unmapped => return Err(AttemptError::Stale(self.no_context_or_gone())),
            SeqlockRead::Unchanged(header) | SeqlockRead::Consistent { header, .. } => header,
            // Updating, or changed under the read. Step 2 still holds while the writer
            // works: a header that lost its identity is no longer a context.
            _ => {
                return match read_header(&self.memory, mapping.start) {
                    Ok(header) => match header.check_identity() {
                        Ok(()) => Ok(Attempt::Retry),
                        Err(e) => Err(AttemptError::Stale(Error::Malformed {
                            pid,
                            problem: Malformed::Header(e),
                        })),
                    },
                    Err(CopyError::Unmapped) => Err(AttemptError::Stale(self.no_context_or_gone())),
                    Err(e) => Err(AttemptError::Fatal(Error::from_copy(pid, e, "the header"))),
                };
            }
        };
        // Step 2: the header's identity.
        if let Err(e) = header.check_identity() {
            return Err(AttemptError::Stale(Error::Malformed {
                pid,
                problem: Malformed::Header(e),
            }));
        }
        self.mapping = Some(*mapping);
        let SeqlockRead::Consistent { payload, .. } = read else {
            return Ok(Attempt::Unchanged);
        };
        match payload {
            PayloadCopy::Copied => {}
            PayloadCopy::Unmapped => {
                return Err(AttemptError::Fatal(Error::Malformed {
                    pid,
                    problem: Malformed::PayloadUnmapped {
                        payload: header.payload,
                        payload_size: header.payload_size,
                    },
                }))
            }
            // Out of range: `validate` names what is wrong with the size.
            _ => {
                let problem = match header.validate(self.options.max_payload_size) {
                    Err(e) => Malformed::Header(e),
                    Ok(()) => Malformed::Header(HeaderError::EmptyPayload),
                };
                return Err(AttemptError::Fatal(Error::Malformed { pid, problem }));
            }
        }
        // Step 6.
        let limits = Limits {
            max_payload_size: self.options.max_payload_size as usize,
            ..self.options.limits
        };
        let view = ProcessContextView::decode(&self.payload, &limits).map_err(|e| {
            AttemptError::Fatal(Error::Malformed {
                pid,
                problem: Malformed::Payload(e),
            })
        })?;
        let context = OwnedProcessContext::from_view(&view);
        let threadlocal = Threadlocal::from_view(&view);
        Ok(Attempt::Done(Snapshot {
            pid,
            mapping: *mapping,
            version: header.version,
            monotonic_published_at_ns: header.monotonic_published_at_ns,
            payload_size: header.payload_size,
            payload: header.payload,
            context,
            threadlocal,
            // The buffer moves into the snapshot: the next read allocates its own.
            payload_bytes: std::mem::take(&mut self.payload),
        }))
    }

    /// Step 1: finds the mapping in `/proc/<pid>/maps`. Of several candidates, the first
    /// whose header has the right signature and version wins.
    fn discover(&mut self) -> Result<ContextMapping, Error> {
        let pid = self.pid;
        let mut candidates = match self.candidates.take() {
            Some(candidates) => candidates,
            None => self
                .scanner
                .find_process_context_mappings(pid)
                .map_err(|e| Error::from_io(pid, format!("read /proc/{pid}/maps"), e))?,
        };
        // Exact names first: they are what every reader finds.
        candidates.sort_by_key(|c| !c.name.exact);
        self.choose(candidates)
    }

    /// Picks the first candidate mapping whose header has the right signature and
    /// version, and caches it.
    pub(crate) fn choose(
        &mut self,
        candidates: Vec<ContextMapping>,
    ) -> Result<ContextMapping, Error> {
        let pid = self.pid;
        let mut first_error = None;
        for mapping in candidates {
            if mapping.len() < HEADER_SIZE as u64 {
                first_error.get_or_insert(Error::Malformed {
                    pid,
                    problem: Malformed::MappingTooSmall { len: mapping.len() },
                });
                continue;
            }
            match read_header(&self.memory, mapping.start) {
                Ok(header) => match header.check_identity() {
                    Ok(()) => {
                        self.mapping = Some(mapping);
                        return Ok(mapping);
                    }
                    Err(e) => {
                        first_error.get_or_insert(Error::Malformed {
                            pid,
                            problem: Malformed::Header(e),
                        });
                    }
                },
                // Unmapped since the maps line was printed.
                Err(CopyError::Unmapped) => {}
                Err(e) => return Err(Error::from_copy(pid, e, "the header")),
            }
        }
        Err(first_error.unwrap_or_else(|| self.no_context_or_gone()))
    }

    /// A process without a mapping: gone if it exited (a zombie has no maps), otherwise
    /// it publishes nothing.
    fn no_context_or_gone(&self) -> Error {
        if is_gone(self.pid) {
            Error::ProcessGone { pid: self.pid }
        } else {
            Error::NoContext { pid: self.pid }
        }
    }
}

/// An attempt's failure: `Stale` may go away once the mapping is looked up again.
enum AttemptError {
    Stale(Error),
    Fatal(Error),
}

impl From<AttemptError> for Error {
    fn from(e: AttemptError) -> Self {
        match e {
            AttemptError::Stale(e) | AttemptError::Fatal(e) => e,
        }
    }
}

fn backoff(attempt: u32) {
    let pause = Duration::from_micros(20u64 << attempt.min(16)).min(MAX_BACKOFF);
    std::thread::sleep(pause);
}

/// Reads process `pid`'s context once, with default options.
pub fn read_process_context(pid: u32) -> Result<Snapshot, Error> {
    ProcessContextReader::open(pid)?.read()
}
