//! Reading side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947): finds and reads another process's contexts on Linux.
//!
//! ```no_run
//! use otel_ctx_reader::{ProcessContextReader, RecordBuffer, StackBuffer, ThreadReader};
//!
//! let mut process = ProcessContextReader::open(1234)?;
//! let snapshot = process.read()?; // later: process.read_if_changed(published_at)
//! println!("{:?}", snapshot.context.service_name());
//! let mut threads = ThreadReader::open(1234)?; // finds otel_thread_ctx_v1
//! let (mut record, mut stack) = (RecordBuffer::new(), StackBuffer::default());
//! for tid in threads.tids()? {
//!     let (registers, context) = threads.sample_with_stack_into(tid, &mut record, &mut stack)?;
//!     println!("{tid} at {:#x}: {:?}", registers.ip, context.map(|c| c.trace_id()));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! At the root, what a profiler that embeds the reader needs:
//! - [`ProcessContextReader`]: one process's context (the seqlock read of OTEP 4719, the
//!   mapping cached between reads), as a [`Snapshot`] of the codec's owned model
//!   ([`OwnedProcessContext`], [`OwnedValue`]).
//! - [`scan`]: every process on the host that publishes a context.
//! - [`ThreadReader`]: every thread's context (OTEP 4947) through `otel_thread_ctx_v1` in
//!   every TLS access model, read while the thread is stopped with ptrace;
//!   [`ThreadReader::sample_into`] and [`ThreadReader::sample_with_stack_into`] (the user
//!   registers and the top of the stack too, for a profiler to unwind) allocate nothing.
//! - `EbpfSampler` (feature `ebpf`): the same samples taken by a BPF program at CPU-clock
//!   ticks, without stopping threads, of one process or of many with one program.
//! - [`python`]: CPython 3.11, 3.13 and 3.14's own frames in the target
//!   ([`PythonProcess`]: the interpreter, each thread's frame chain, the code objects'
//!   names), walked while a thread is stopped
//!   ([`ThreadReader::sample_with_python_into`]) or by the eBPF sampler's program.
//! - [`ProcessMaps`]: one pass over `/proc/<pid>/maps` (the context's mapping and the mapped
//!   files), shared by the readers; [`files`] opens the mapped files as hostile input.
//! - The errors, each with a message that says what to do: [`Error`], [`ThreadError`],
//!   [`SampleError`].
//!
//! The parts below them, for tools that look further (the conformance checker): [`maps`]
//! (the streaming maps scanner), [`memory`] (copies out of another process), [`seqlock`]
//! (the consistent read of a header), [`tls`] (ELF analysis, the slot resolution, ptrace).
#![warn(missing_docs)]
// Every system call that needs `unsafe` is in `sys`, which allows it for itself.
#![deny(unsafe_code)]

mod denied;
#[cfg(feature = "ebpf")]
mod ebpf;
mod error;
pub mod files;
pub mod maps;
pub mod memory;
pub mod process;
pub mod procfs;
pub mod python;
mod sys;
pub mod thread;

pub use denied::{diagnose, Refuser};
#[cfg(feature = "ebpf")]
pub use ebpf::{
    EbpfCounters, EbpfError, EbpfOptions, EbpfPython, EbpfReaders, EbpfSample, EbpfSampler,
    EbpfStack, PublicationCounters, PublicationHook, EBPF_MAX_ATTRS, EBPF_MAX_KERNEL_FRAMES,
    EBPF_MAX_PROCESSES, EBPF_MAX_RECORD_SIZE, EBPF_MAX_STACK,
};
pub use error::{Error, Malformed};
pub use maps::{FileRange, MappedFile, ProcessMaps};
/// The owned model of a decoded process context: the codec's, re-exported.
pub use otel_ctx_codec::owned::{
    OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal, THREADLOCAL_KEYS,
};
pub use process::{
    boottime_ns, read_process_context, scan, scan_with, seqlock, ProcessContextReader,
    ReaderOptions, Scan, ScanEntry, Snapshot, DEFAULT_MAX_ATTEMPTS,
};
pub use procfs::{comm, pids, thread_ids};
pub use python::{PythonError, PythonFrame, PythonProcess, PythonStack, PythonVersion};
pub use thread::tls::{
    AccessModel, Libc, Machine, PtraceError, Resolution, SampleError, SkipReason, SkippedModule,
    SymbolTable, TlsError,
};
pub use thread::{
    sample_stack_into, OwnedThreadContext, RecordBuffer, ThreadContextRef, ThreadError,
    ThreadReader, ThreadReaderOptions, ThreadReport, CONTEXT_SEARCH_INTERVAL,
    DEFAULT_MAX_RECORD_SIZE, KNOWN_SCHEMAS, MODULE_REFRESH_INTERVAL,
};
pub use thread::{tls, StackBuffer, UserRegisters, DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
