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
//! - [`MapsScanner`]: finds the `OTEL_CTX` mapping in `/proc/<pid>/maps`, streaming the
//!   file.
//! - [`ProcessContextReader`]: the seqlock read ([`read_consistent`]) of the header and
//!   payload, cached between reads, through [`ProcessMemory`] (`process_vm_readv` or
//!   `/proc/<pid>/mem`).
//! - [`OwnedProcessContext`] and [`OwnedValue`]: the decoded payload, owned.
//! - [`scan`]: every process on the host that publishes a context.
//! - [`ThreadReader`]: every thread's context, through the TLS symbol
//!   `otel_thread_ctx_v1`, in every TLS access model ([`resolve`], [`ElfTls`]), read
//!   while the thread is held by a [`StoppedThread`]; [`ThreadReader::sample_into`]
//!   samples without allocating.
//! - `EbpfSampler` (feature `ebpf`): the same contexts sampled by a BPF program on a
//!   CPU-clock perf event, without stopping threads.
//! - [`Error`]: one enum whose messages say what to do.
#![warn(missing_docs)]
// Every system call that needs `unsafe` is in `sys`, which allows it for itself.
#![deny(unsafe_code)]

mod denied;
#[cfg(feature = "ebpf")]
mod ebpf;
mod error;
pub mod files;
mod maps;
mod memory;
mod reader;
mod scan;
mod seqlock;
mod stack;
mod sys;
mod threads;
mod tls;

pub use denied::{diagnose, Refuser};
#[cfg(feature = "ebpf")]
pub use ebpf::{
    EbpfCounters, EbpfError, EbpfOptions, EbpfSample, EbpfSampler, EbpfStack, EBPF_MAX_ATTRS,
    EBPF_MAX_KERNEL_FRAMES, EBPF_MAX_RECORD_SIZE, EBPF_MAX_STACK,
};
pub use error::{Error, Malformed};
pub use maps::{
    ContextMapping, FileRange, MappedFile, MappingKind, MappingName, MapsLine, MapsScanner,
    ProcessMaps, MAX_CANDIDATES, MAX_MAPPED_FILES, MAX_RANGES_PER_FILE, SCAN_BUFFER_SIZE,
};
pub use memory::{is_gone, live_thread, CopyError, ProcessMemory, ReadMethod};
/// The owned model of a decoded process context: the codec's, re-exported.
pub use otel_ctx_codec::owned::{
    OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal, THREADLOCAL_KEYS,
};
pub use reader::{
    boottime_ns, read_process_context, ProcessContextReader, ReaderOptions, Snapshot,
    DEFAULT_MAX_ATTEMPTS,
};
pub use scan::{comm, pids, scan, scan_with, thread_ids, Scan, ScanEntry};
pub use seqlock::{read_consistent, PayloadCopy, SeqlockRead};
pub use stack::{StackBuffer, UserRegisters, DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
pub use threads::{
    OwnedThreadContext, RecordBuffer, ThreadContextRef, ThreadError, ThreadReader,
    ThreadReaderOptions, ThreadReport, CONTEXT_SEARCH_INTERVAL, DEFAULT_MAX_RECORD_SIZE,
    KNOWN_SCHEMAS, MODULE_REFRESH_INTERVAL,
};
pub use tls::{
    defining_module, loaded_modules, read_slot, read_slot_into, read_stopped, resolve, resolve_for,
    AccessModel, DtvLayout, ElfCache, ElfError, ElfTls, Libc, LoadedModule, Machine, Modules,
    PtraceError, Relocated, Resolution, SampleError, SkipReason, SkippedModule, SlotContents,
    SlotLocation, SlotState, StoppedThread, SymbolInfo, SymbolTable, TargetMemory, ThreadRecord,
    ThreadSample, TlsError, TlsReloc, TlsSegment,
};
