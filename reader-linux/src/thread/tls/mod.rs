//! Finding `otel_thread_ctx_v1` in another process: ELF analysis of its modules and
//! resolution of each thread's slot address for every TLS access model.

mod elf;
mod modules;
mod ptrace;
mod resolve;
mod sample;

pub use elf::{
    ElfError, ElfTls, Machine, Relocated, SymbolInfo, SymbolTable, TlsReloc, TlsSegment,
};
pub use modules::{loaded_modules, ElfCache, Modules, SkipReason, SkippedModule, TOTAL_FILE_BYTES};
pub use ptrace::{PtraceError, StoppedThread, UserRegisters};
pub use resolve::{
    defining_module, resolve, resolve_for, AccessModel, DtvLayout, Libc, LoadedModule, Resolution,
    SlotLocation, TargetMemory, TlsError,
};
pub use sample::{
    read_slot, read_slot_into, read_stopped, SampleError, SlotContents, SlotState, ThreadRecord,
    ThreadSample, RECORD_FIRST_COPY,
};
