//! The process-context rules (OTEP 4719) and the thread-context reference data it carries
//! (OTEP 4947): finding the mapping, its permissions and flags, the header, the payload,
//! and how updates behave over the observation window.
//!
//! [`ProcessSide`] holds what the check learns of the process context; each part of the
//! work has its own module:
//!
//! - `discover`: the mappings that may hold a context (the names readers match, near
//!   misses, other mappings that start with the signature), the one a reader would use,
//!   and its `VmFlags`.
//! - `observe`: the first consistent read, the polls over the window, and what each
//!   update changes.
//! - `judge`: the verdicts of every rule of this side.
//! - `clock`: when the process started, and whether it shares this process's clocks.

mod clock;
mod discover;
mod judge;
mod observe;

use std::time::Instant;

use otel_ctx_codec::header::{ProcessContextHeader, SIGNATURE};
use otel_ctx_codec::threadlocal::{SCHEMA_TLSDESC_V1_DEV, SCHEMA_TLS_V1};
use otel_ctx_reader::maps::{MappingName, MapsScanner};
use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::Error;

use super::verdict::Verdicts;

/// The schemas whose thread contexts are the TLS records of OTEP 4947, found through
/// `otel_thread_ctx_v1`; other schemas (`go_pprof_labels_v1`) tell readers to look
/// elsewhere.
pub(super) const TLS_SCHEMAS: [&str; 2] = [SCHEMA_TLSDESC_V1_DEV, SCHEMA_TLS_V1];

/// Whether a value was there, and usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Presence<T> {
    /// Not in the payload.
    Absent,
    /// There, but of the wrong shape (a rule says why).
    Invalid,
    /// There and usable.
    Valid(T),
}

/// What the latest decoded payload says about thread contexts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Content {
    /// `threadlocal.schema_version`.
    pub schema: Presence<String>,
    /// `threadlocal.attribute_key_map`.
    pub key_map: Presence<Vec<String>>,
}

/// What the thread side needs to know of the process context.
#[derive(Clone, Copy, Debug)]
pub(super) struct Summary<'a> {
    /// A mapping that may hold a process context was found.
    pub found: bool,
    /// The latest payload that decoded, if any did.
    pub content: Option<&'a Content>,
}

/// The key map's length, as thread records are judged against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyMapLen {
    /// The process context has a key map of this many names.
    Known(usize),
    /// The process context has no key map.
    Absent,
    /// The process context cannot be read or its key map is malformed.
    Unknown,
}

/// How a candidate mapping is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Naming {
    /// One of the names readers match.
    Exact(MappingName),
    /// A name that mentions `OTEL_CTX` in some other spelling or form.
    NearMiss,
    /// Any other name, or none, but the mapping starts with the `OTEL_CTX` signature.
    Other,
}

/// A mapping that may hold a process context.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) perms: [u8; 4],
    pub(super) name: String,
    pub(super) naming: Naming,
    /// Its first 32 bytes, as they were when discovered; `None` if unreadable.
    pub(super) header: Option<ProcessContextHeader>,
}

impl Candidate {
    pub(super) fn signature_ok(&self) -> bool {
        self.header.is_some_and(|h| h.signature == SIGNATURE)
    }

    pub(super) fn is_exact(&self) -> bool {
        matches!(self.naming, Naming::Exact(_))
    }

    pub(super) fn perms(&self) -> String {
        String::from_utf8_lossy(&self.perms).into_owned()
    }

    pub(super) fn describe(&self) -> String {
        let name = if self.name.is_empty() {
            "an unnamed mapping".to_owned()
        } else {
            self.name.clone()
        };
        format!(
            "{name} at {:#x} ({}, {} bytes)",
            self.start,
            self.perms(),
            self.end.saturating_sub(self.start)
        )
    }
}

/// The payload as one consistent read found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PayloadRead {
    /// `payload_size` is 0 or over the bound: readers do not copy it.
    OutOfRange,
    /// The pointer and size name memory the process has not mapped.
    Unmapped,
    /// The bytes.
    Bytes(Vec<u8>),
}

/// The last consistent read, to compare the next one with.
#[derive(Debug)]
pub(super) struct Seen {
    pub(super) published_at: u64,
    pub(super) payload: u64,
    pub(super) payload_size: u32,
    pub(super) payload_read: PayloadRead,
}

/// The process-context half of a check.
pub(super) struct ProcessSide {
    pid: u32,
    memory: ProcessMemory,
    scanner: MapsScanner,
    candidates: Vec<Candidate>,
    primary: Option<Candidate>,
    /// `VmFlags` of the primary mapping: `Ok(None)` when the kernel prints none.
    vm_flags: Result<Option<Vec<String>>, String>,
    /// When the process started, in `CLOCK_BOOTTIME` nanoseconds.
    started_at_ns: Option<u64>,
    /// The process is in another time namespace: its `CLOCK_BOOTTIME` differs from ours.
    other_time_namespace: bool,
    first_look: Option<Instant>,
    zero_seen: bool,
    unstable_seen: bool,
    last: Option<Seen>,
    updates: usize,
    timestamp_violation: Option<String>,
    content: Option<Content>,
    key_map_before: Option<Vec<String>>,
    key_map_first_len: Option<usize>,
    key_map_growths: usize,
    key_map_violation: Option<String>,
    unpublished: bool,
    /// Verdicts of the rules judged on every consistent read.
    per_read: Verdicts,
    /// Unnamed anonymous mappings past [`MAX_PROBED`](discover::MAX_PROBED), not probed.
    unprobed: usize,
    /// Lines of the last pass over the maps.
    mappings: usize,
}

impl ProcessSide {
    /// Prepares to check process `pid`; fails if it does not exist.
    pub(super) fn open(pid: u32) -> Result<Self, Error> {
        if otel_ctx_reader::memory::is_gone(pid) {
            return Err(Error::gone(pid));
        }
        Ok(Self {
            pid,
            memory: ProcessMemory::new(pid, ReadMethod::Auto),
            scanner: MapsScanner::new(),
            candidates: Vec::new(),
            primary: None,
            vm_flags: Ok(None),
            started_at_ns: None,
            other_time_namespace: false,
            first_look: None,
            zero_seen: false,
            unstable_seen: false,
            last: None,
            updates: 0,
            timestamp_violation: None,
            content: None,
            key_map_before: None,
            key_map_first_len: None,
            key_map_growths: 0,
            key_map_violation: None,
            unpublished: false,
            per_read: Verdicts::new(),
            unprobed: 0,
            mappings: 0,
        })
    }

    /// What the thread side needs to know.
    pub(super) fn summary(&self) -> Summary<'_> {
        Summary {
            found: self.primary.is_some(),
            content: self.content.as_ref(),
        }
    }
}
