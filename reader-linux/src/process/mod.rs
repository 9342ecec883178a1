//! The process context (OTEP 4719): one process's context read with the seqlock
//! protocol ([`ProcessContextReader`]), every process on the host that publishes one
//! ([`scan`]), and the codec's owned model a read returns.

pub(crate) mod reader;
mod scan;
pub mod seqlock;

/// The owned model of a decoded process context: the codec's, re-exported.
pub use otel_ctx_codec::owned::{
    OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal, THREADLOCAL_KEYS,
};
pub use reader::{
    boottime_ns, read_process_context, ProcessContextReader, ReaderOptions, Snapshot,
    DEFAULT_MAX_ATTEMPTS,
};
pub use scan::{scan, scan_with, Scan, ScanEntry};

pub use crate::error::Malformed;
