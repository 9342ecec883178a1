//! The process context (OTEP 4719): one process's context read with the seqlock
//! protocol ([`ProcessContextReader`]), and every process on the host that publishes one
//! ([`scan`]).

pub(crate) mod reader;
mod scan;
pub mod seqlock;

pub use reader::{
    boottime_ns, read_process_context, ProcessContextReader, ReaderOptions, Snapshot,
    DEFAULT_MAX_ATTEMPTS,
};
pub use scan::{scan, scan_with, Scan, ScanEntry};
