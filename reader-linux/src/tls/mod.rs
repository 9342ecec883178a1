//! Finding `otel_thread_ctx_v1` in another process: ELF analysis of its modules and
//! resolution of each thread's slot address for every TLS access model.

pub mod elf;
pub mod modules;
pub mod ptrace;
pub mod resolve;
pub mod sample;

pub use elf::{
    ElfError, ElfTls, Machine, Relocated, SymbolInfo, SymbolTable, TlsReloc, TlsSegment,
};
pub use modules::{loaded_modules, ElfCache};
pub use ptrace::{PtraceError, StoppedThread};
pub use resolve::{
    resolve, resolve_for, AccessModel, Libc, LoadedModule, Resolution, SlotLocation, TargetMemory,
    TlsError,
};
pub use sample::{read_slot, read_stopped, SampleError, SlotState, ThreadRecord, ThreadSample};
