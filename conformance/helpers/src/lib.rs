//! What the helper processes and the cross-process tests share.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use otel_ctx_reader::{Error, ThreadError, ThreadReader};

/// Opens a thread reader on `pid`, opening again while the process context reads as
/// `StillUpdating` (which says to read again), for up to `patience`.
///
/// The stress target's main thread updates its process context in a loop: on a loaded
/// machine every attempt of one open can meet an update. A reader of such a process
/// does what the error says; any other error is returned at once.
pub fn open_thread_reader(pid: u32, patience: Duration) -> Result<ThreadReader, ThreadError> {
    let deadline = Instant::now() + patience;
    loop {
        match ThreadReader::open(pid) {
            Err(ThreadError::Process(Error::StillUpdating { .. })) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}
