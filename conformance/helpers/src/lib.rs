//! What the helper processes and the cross-process tests share.
#![cfg(target_os = "linux")]

use std::time::Duration;

use otel_ctx_reader::thread::ThreadReaderOptions;
use otel_ctx_reader::{ThreadError, ThreadReader};

/// Opens a thread reader on `pid`, reading its process context again while it reads as
/// `StillUpdating` for up to `patience` (the reader's own retry, with a patience fit for
/// a loaded machine).
///
/// The stress target's main thread updates its process context in a loop: on a loaded
/// machine every attempt of one read can meet an update.
pub fn open_thread_reader(pid: u32, patience: Duration) -> Result<ThreadReader, ThreadError> {
    ThreadReader::with_options(
        pid,
        ThreadReaderOptions::default().with_open_patience(patience),
    )
}
