//! Finding `otel_thread_ctx_v1` in another process: ELF analysis of its modules and
//! resolution of each thread's slot address for every TLS access model.

pub mod elf;
pub mod resolve;

pub use elf::{ElfError, ElfTls, Machine, Relocated, SymbolInfo, SymbolTable, TlsReloc, TlsSegment};
pub use resolve::{
    resolve, AccessModel, Libc, LoadedModule, Resolution, SlotLocation, TargetMemory, TlsError,
};
