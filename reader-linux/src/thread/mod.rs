//! The thread context (OTEP 4947): `otel_thread_ctx_v1` resolved once per process in
//! every TLS access model ([`tls`]), each thread's record read while it is stopped
//! ([`ThreadReader`]), and the registers and stack copy a profiler unwinds
//! ([`StackBuffer`], [`UserRegisters`]).

pub(crate) mod reader;
pub(crate) mod stack;
pub mod tls;

pub use reader::{
    sample_stack_into, OwnedThreadContext, RecordBuffer, ThreadContextRef, ThreadError,
    ThreadReader, ThreadReaderOptions, ThreadReport, CONTEXT_SEARCH_INTERVAL,
    DEFAULT_MAX_RECORD_SIZE, KNOWN_SCHEMAS, MODULE_REFRESH_INTERVAL,
};
pub use stack::{StackBuffer, UserRegisters, DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
