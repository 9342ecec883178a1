//! A process's pid in its own pid namespace: the last pid of the `NSpid:` line of
//! `/proc/<pid>/status` (proc(5)). A process in a container names its perf map with
//! that pid, not with the one the host sees.

use std::io::Read;

/// The most of `/proc/<pid>/status` read: the file is a few KiB.
const MAX_STATUS: u64 = 64 * 1024;

/// The last pid of the `NSpid:` line of a `status` file's bytes: the pid in the
/// process's innermost pid namespace. `None` when there is no such line (kernels before
/// 4.1) or it does not parse.
pub(crate) fn nspid(status: &[u8]) -> Option<u32> {
    let line = status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"NSpid:"))?;
    let last = line
        .split(|&b| b == b' ' || b == b'\t')
        .rfind(|field| !field.is_empty())?;
    std::str::from_utf8(last).ok()?.parse().ok()
}

/// Process `pid`'s pid in its own namespace: from its `status`, else `pid` itself.
pub(crate) fn read_nspid(pid: u32) -> u32 {
    let mut status = Vec::new();
    let read = std::fs::File::open(format!("/proc/{pid}/status"))
        .and_then(|f| f.take(MAX_STATUS).read_to_end(&mut status));
    match read {
        Ok(_) => nspid(&status).unwrap_or(pid),
        Err(_) => pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn innermost_pid_of_the_nspid_line() {
        let host = b"Name:\tnode\nTgid:\t4242\nPid:\t4242\nNSpid:\t4242\nNSsid:\t1\n";
        assert_eq!(nspid(host), Some(4242));
        // In a container two namespaces deep: the host's pid, then the container's.
        let nested = b"Pid:\t4242\nNSpid:\t4242\t17\t1\nNSpgid:\t4242\t17\t1\n";
        assert_eq!(nspid(nested), Some(1));
        assert_eq!(nspid(b"Pid:\t4242\n"), None);
        assert_eq!(nspid(b"NSpid:\t\n"), None);
        assert_eq!(nspid(b"NSpid:\t12x\n"), None);
        assert_eq!(nspid(b"NSpid:\t99999999999\n"), None);
        // Not at the start of a line: not the field.
        assert_eq!(nspid(b"XNSpid:\t5\n"), None);
        assert_eq!(read_nspid(std::process::id()), std::process::id());
    }
}
