//! Reading side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947): finds and reads another process's contexts on Linux.
//!
//! ```no_run
//! use otel_ctx_reader::{ProcessContextReader, RecordBuffer, ThreadReader};
//!
//! let mut process = ProcessContextReader::open(1234)?;
//! let snapshot = process.read()?; // later: process.read_if_changed(published_at)
//! println!("{:?}", snapshot.context.service_name());
//! let mut threads = ThreadReader::open(1234)?; // finds otel_thread_ctx_v1, reads the key map
//! let mut record = RecordBuffer::new();
//! for tid in threads.tids()? {
//!     if let Some(context) = threads.sample_into(tid, &mut record)? {
//!         println!("{tid} {:?} {:?}", context.trace_id(), context.attribute("http.route"));
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! At the root, what a reader of contexts needs:
//! - [`ProcessContextReader`]: one process's context (the seqlock read of OTEP 4719, the
//!   mapping cached between reads), as a [`Snapshot`] of the codec's owned model; [`scan`]
//!   finds every process on the host that publishes one.
//! - [`ThreadReader`]: one process's thread contexts through `otel_thread_ctx_v1` in
//!   every TLS access model, read while the thread is stopped with ptrace
//!   ([`StoppedThread`], which also gives its [`UserRegisters`]), without allocating
//!   ([`ThreadReader::sample_into`], [`RecordBuffer`]);
//!   [`ThreadReader::sample_stopped_into`] lets a sampler do its own work while the
//!   thread is held.
//! - [`ProcessMaps`]: one pass over `/proc/<pid>/maps` (the context's mapping and the
//!   mapped files), shared by the readers.
//! - The errors, each with a message that says what to do: [`Error`], [`ThreadError`],
//!   [`SampleError`].
//!
//! The parts below them, in named modules, for tools that look further (a sampler, the
//! conformance checker, a profiler): [`process`] (the seqlock, the scan, the owned
//! model), [`thread`] (the thread reader's options and reports, [`thread::tls`]: ELF
//! analysis, the slot resolution, ptrace stops), [`maps`] (the streaming maps scanner),
//! [`memory`] (copies out of another process), [`files`] (the safe open and budgeted
//! read of a target's mapped files), [`procfs`] (the one parser of `/proc`'s
//! per-process files). Sampling many threads at a rate, by ptrace or eBPF, with their
//! stacks and interpreter frames, is the `otel-ctx-sampler` crate's, above this one.
#![warn(missing_docs)]
// Every system call that needs `unsafe` is in `sys`, which allows it for itself.
#![deny(unsafe_code)]

mod denied;
mod error;
pub mod files;
pub mod maps;
pub mod memory;
pub mod process;
pub mod procfs;
mod sys;
pub mod thread;

pub use error::Error;
pub use maps::ProcessMaps;
pub use process::{scan, ProcessContextReader, Snapshot};
pub use thread::tls::SampleError;
pub use thread::tls::{StoppedThread, UserRegisters};
pub use thread::{RecordBuffer, ThreadContextRef, ThreadError, ThreadReader};
