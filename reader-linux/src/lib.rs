//! Reading side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947): finds and reads another process's contexts on Linux.
//!
//! ```no_run
//! use otel_ctx_reader::ProcessContextReader;
//!
//! let mut reader = ProcessContextReader::open(1234)?;
//! let snapshot = reader.read()?;
//! println!("{:?}", snapshot.context.service_name());
//! // Later: costs two small copies while nothing changed.
//! if let Some(newer) = reader.read_if_changed(snapshot.monotonic_published_at_ns)? {
//!     println!("updated: {:?}", newer.context.resource);
//! }
//! # Ok::<(), otel_ctx_reader::Error>(())
//! ```
//!
//! - [`maps`]: finds the `OTEL_CTX` mapping in `/proc/<pid>/maps`, streaming the file.
//! - [`ProcessContextReader`]: the seqlock read of the header and payload, cached
//!   between reads, through `process_vm_readv` or `/proc/<pid>/mem`.
//! - [`OwnedProcessContext`] and [`OwnedValue`]: the decoded payload, owned.
//! - [`scan`]: every process on the host that publishes a context.
//! - [`ThreadReader`] and [`tls`]: every thread's context, through the TLS symbol
//!   `otel_thread_ctx_v1`, in every TLS access model, read while the thread is stopped.
//! - [`Error`]: one enum whose messages say what to do.
#![warn(missing_docs)]

pub mod check;
mod error;
pub mod maps;
mod memory;
mod reader;
mod scan;
mod threads;
pub mod tls;
mod value;

pub use error::{Error, Malformed};
pub use maps::{ContextMapping, MappingKind, MappingName};
pub use memory::{ProcessMemory, ReadMethod};
pub use reader::{
    boottime_ns, read_process_context, ProcessContextReader, ReaderOptions, Snapshot,
    DEFAULT_MAX_ATTEMPTS,
};
pub use scan::{comm, pids, scan, scan_with, Scan, ScanEntry};
pub use threads::{
    OwnedThreadContext, ThreadError, ThreadReader, ThreadReport, DEFAULT_MAX_RECORD_SIZE,
};
pub use value::{OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal, THREADLOCAL_KEYS};
