//! The thread context (OTEP 4947): `otel_thread_ctx_v1` resolved once per process in
//! every TLS access model ([`tls`]), and each thread's record read while it is stopped
//! ([`ThreadReader`]).

pub(crate) mod reader;
pub mod tls;

pub use crate::memory::Copies;
pub use reader::{
    OwnedThreadContext, RecordBuffer, ThreadContextRef, ThreadError, ThreadReader,
    ThreadReaderOptions, ThreadReport, CONTEXT_SEARCH_INTERVAL, DEFAULT_MAX_RECORD_SIZE,
    KNOWN_SCHEMAS, MODULE_REFRESH_INTERVAL, OPEN_PATIENCE,
};
