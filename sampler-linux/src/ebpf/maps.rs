//! A loaded program's maps read from user space: a ring buffer waited on, per-CPU
//! counters summed.

use std::time::Duration;

use aya::maps::{MapData, PerCpuArray};

use super::error::{explain, EbpfError};

/// Counter `index` of a program's per-CPU counters, summed over CPUs.
pub(super) fn counter(counters: &PerCpuArray<MapData, u64>, index: u32) -> Result<u64, EbpfError> {
    let values = counters
        .get(&index, 0)
        .map_err(|e| EbpfError::Setup(explain(&e).0))?;
    Ok(values.iter().copied().fold(0u64, u64::wrapping_add))
}

/// Waits up to `timeout` for `fd` (a ring buffer) to be readable; whether it is. A
/// signal ends the wait early, as no data.
pub(super) fn poll_readable(
    fd: &impl std::os::fd::AsFd,
    timeout: Duration,
) -> Result<bool, EbpfError> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    match poll(&mut fds, Some(&timeout)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(EbpfError::Poll(e.into())),
    }
}
