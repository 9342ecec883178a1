//! The process's clocks: when it started, in `CLOCK_BOOTTIME`, and whether it is in another
//! time namespace (whose clocks may be offset from this one's).

use std::os::unix::fs::MetadataExt;

/// When process `pid` started, in `CLOCK_BOOTTIME` nanoseconds (`/proc/<pid>/stat` field
/// 22, in clock ticks).
pub(super) fn process_start_ns(pid: u32) -> Option<u64> {
    otel_ctx_reader::procfs::stat(pid).map(|stat| stat.start_time_ns())
}

/// `sysconf(_SC_CLK_TCK)`: the unit of times in `/proc/<pid>/stat` (100 on Linux).
pub(super) fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// Whether process `pid` is in another time namespace than this one (whose clocks may be
/// offset). `false` when the kernel has no time namespaces.
pub(super) fn other_time_namespace(pid: u32) -> bool {
    let inode = |path: String| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    match (
        inode("/proc/self/ns/time".to_owned()),
        inode(format!("/proc/{pid}/ns/time")),
    ) {
        (Some(ours), Some(theirs)) => ours != theirs,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::process::boottime_ns;

    #[test]
    fn process_start_is_before_now() {
        let started = process_start_ns(std::process::id()).expect("own stat");
        assert!(started > 0 && started <= boottime_ns(), "{started}");
        assert!(!other_time_namespace(std::process::id()));
    }
}
