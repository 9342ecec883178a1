//! Reading side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947): finds and reads another process's contexts on Linux.
//!
//! ```no_run
//! use std::time::Duration;
//! use otel_ctx_reader::{ProcessContextReader, Sampler, SamplerOptions};
//!
//! let mut process = ProcessContextReader::open(1234)?;
//! let snapshot = process.read()?; // later: process.read_if_changed(published_at)
//! println!("{:?}", snapshot.context.service_name());
//! let mut sampler = Sampler::new(SamplerOptions::default())?; // eBPF, else ptrace
//! sampler.add_process(1234)?; // finds otel_thread_ctx_v1, reads the key map
//! sampler.step(Duration::from_millis(100), |sample| {
//!     let trace = sample.context().map(|c| c.trace_id());
//!     println!("{} {:?} {trace:?}", sample.tid, sample.registers.map(|r| r.ip));
//!     false
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! At the root, what a profiler that embeds the reader needs:
//! - [`ProcessContextReader`]: one process's context (the seqlock read of OTEP 4719, the
//!   mapping cached between reads), as a [`Snapshot`] of the codec's owned model; [`scan`]
//!   finds every process on the host that publishes one.
//! - [`Sampler`]: the samples of one process's threads or of many, by ptrace rounds or
//!   by the eBPF program (feature `ebpf`), in one shape ([`Sample`]: the thread, its user
//!   registers and a copy of the top of its stack, its context named through the key
//!   map), with the refresh policy that keeps each process's reader current
//!   ([`Step`]).
//! - [`ThreadReader`]: one process's thread contexts through `otel_thread_ctx_v1` in
//!   every TLS access model, read while the thread is stopped with ptrace, without
//!   allocating ([`ThreadReader::sample_into`], [`RecordBuffer`], [`StackBuffer`]).
//! - [`ProcessMaps`]: one pass over `/proc/<pid>/maps` (the context's mapping and the
//!   mapped files), shared by the readers.
//! - [`python`]: CPython 3.11, 3.13 and 3.14's own frames in the target
//!   ([`python::PythonProcess`]: the interpreter, each thread's frame chain, the code
//!   objects' names), walked by the sampler while a thread is stopped or by the eBPF
//!   program.
//! - The errors, each with a message that says what to do: [`Error`], [`ThreadError`],
//!   [`SampleError`], [`SamplerError`].
//!
//! The parts below them, in named modules, for tools that look further (the
//! conformance checker, the profile layer): [`process`] (the seqlock, the scan, the
//! owned model), [`thread`] (the thread reader's options and reports, [`thread::tls`]:
//! ELF analysis, the slot resolution, ptrace stops), [`sampler`] (its options and
//! counts), [`maps`] (the streaming maps scanner), [`memory`] (copies out of another
//! process), [`files`] (the safe open and budgeted read of a target's mapped files),
//! [`procfs`] (the one parser of `/proc`'s per-process files), and with `ebpf` the BPF
//! program itself and the publication hook (`ebpf`).
#![warn(missing_docs)]
// Every system call that needs `unsafe` is in `sys`, which allows it for itself.
#![deny(unsafe_code)]

mod denied;
#[cfg(feature = "ebpf")]
pub mod ebpf;
mod error;
pub mod files;
pub mod maps;
pub mod memory;
pub mod process;
pub mod procfs;
pub mod python;
pub mod sampler;
mod sys;
pub mod thread;

pub use error::Error;
pub use maps::ProcessMaps;
pub use process::{scan, ProcessContextReader, Snapshot};
pub use sampler::{
    Following, Method, Sample, Sampler, SamplerError, SamplerOptions, SamplerStats, Step, Threads,
};
pub use thread::tls::SampleError;
pub use thread::{
    RecordBuffer, StackBuffer, ThreadContextRef, ThreadError, ThreadReader, UserRegisters,
};
