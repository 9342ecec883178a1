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
//! - [`Error`]: one enum whose messages say what to do.
#![warn(missing_docs)]

mod error;
pub mod maps;
mod memory;
mod reader;
mod scan;
mod value;

pub use error::{Error, Malformed};
pub use maps::{ContextMapping, MappingKind, MappingName};
pub use memory::ReadMethod;
pub use reader::{
    boottime_ns, read_process_context, ProcessContextReader, ReaderOptions, Snapshot,
    DEFAULT_MAX_ATTEMPTS,
};
pub use scan::{comm, pids, scan, scan_with, Scan, ScanEntry};
pub use value::{OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal, THREADLOCAL_KEYS};
