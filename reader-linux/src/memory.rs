//! Copying bytes out of another process.
//!
//! Two ways, both of which fail cleanly on memory the target has not mapped (no signal,
//! no partial garbage):
//! - [`process_vm_readv(2)`](https://man7.org/linux/man-pages/man2/process_vm_readv.2.html):
//!   one system call per copy, no file descriptor. rustix has no wrapper for it, so this
//!   module calls the `libc` crate's binding; it is the only `unsafe` in the crate.
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html) on
//!   [`/proc/<pid>/mem`](https://man7.org/linux/man-pages/man5/proc_pid_mem.5.html): used
//!   when `process_vm_readv` is refused with `EPERM` or `ENOSYS` (a seccomp filter, a
//!   container runtime's profile) although the process may be read.
//!
//! Both need the same permission: ptrace read access (`PTRACE_MODE_ATTACH_REALCREDS`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// How the reader copies memory out of the target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMethod {
    /// `process_vm_readv`, falling back to `/proc/<pid>/mem` for good when it is refused
    /// with `EPERM` or `ENOSYS`.
    #[default]
    Auto,
    /// Only `process_vm_readv`.
    ProcessVmReadv,
    /// Only `pread` on `/proc/<pid>/mem`.
    ProcMem,
}

/// Why a copy failed.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// Part of the range is not mapped in the target.
    Unmapped,
    /// The target has exited.
    Gone,
    /// A system call failed; `operation` names it.
    Os {
        operation: &'static str,
        source: io::Error,
    },
}

/// A target process's memory.
#[derive(Debug)]
pub(crate) struct Memory {
    pid: u32,
    method: ReadMethod,
    /// Set once `process_vm_readv` was refused in [`ReadMethod::Auto`].
    vm_readv_refused: bool,
    /// `/proc/<pid>/mem`, opened on first use and kept.
    mem: Option<File>,
}

impl Memory {
    pub(crate) const fn new(pid: u32, method: ReadMethod) -> Self {
        Self {
            pid,
            method,
            vm_readv_refused: false,
            mem: None,
        }
    }

    /// Whether the `/proc/<pid>/mem` fallback is in use.
    pub(crate) const fn uses_proc_mem(&self) -> bool {
        matches!(self.method, ReadMethod::ProcMem) || self.vm_readv_refused
    }

    /// Fills `buf` with the target's bytes at `addr`, or fails without a partial result.
    pub(crate) fn read_exact(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
        if buf.is_empty() {
            return Ok(());
        }
        if !self.uses_proc_mem() {
            match process_vm_readv(self.pid, addr, buf) {
                Err(CopyError::Os { source, .. })
                    if self.method == ReadMethod::Auto
                        && matches!(source.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) =>
                {
                    self.vm_readv_refused = true;
                }
                other => return other,
            }
        }
        self.pread(addr, buf)
    }

    fn pread(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
        let file = match &self.mem {
            Some(file) => file,
            None => {
                let path = format!("/proc/{}/mem", self.pid);
                let file = File::open(path).map_err(|source| match source.raw_os_error() {
                    Some(libc::ENOENT | libc::ESRCH) => CopyError::Gone,
                    _ => CopyError::Os {
                        operation: "open /proc/<pid>/mem",
                        source,
                    },
                })?;
                self.mem.insert(file)
            }
        };
        // pread takes a signed offset: addresses above i64::MAX cannot be mapped in user
        // space and are refused here rather than as EINVAL.
        if i64::try_from(addr).is_err() {
            return Err(CopyError::Unmapped);
        }
        let mut done = 0;
        while done < buf.len() {
            let at = addr.checked_add(done as u64).ok_or(CopyError::Unmapped)?;
            match file.read_at(&mut buf[done..], at) {
                // The kernel stops at the first unmapped page, and reads nothing once the
                // target's address space is gone.
                Ok(0) => {
                    return Err(if is_gone(self.pid) {
                        CopyError::Gone
                    } else {
                        CopyError::Unmapped
                    });
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(match e.raw_os_error() {
                        Some(libc::EIO | libc::EFAULT | libc::EINVAL) => {
                            if is_gone(self.pid) {
                                CopyError::Gone
                            } else {
                                CopyError::Unmapped
                            }
                        }
                        Some(libc::ESRCH) => CopyError::Gone,
                        _ => CopyError::Os {
                            operation: "pread /proc/<pid>/mem",
                            source: e,
                        },
                    });
                }
            }
        }
        Ok(())
    }
}

/// One `process_vm_readv` of one local and one remote range.
fn process_vm_readv(pid: u32, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
    let Ok(remote_base) = usize::try_from(addr) else {
        return Err(CopyError::Unmapped);
    };
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(CopyError::Gone);
    };
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: remote_base as *mut libc::c_void,
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: `local` describes `buf`, which is valid for writes of `buf.len()` bytes
        // for the whole call; the kernel writes nothing else of this process. `remote` is
        // only an address in the target, which the kernel checks and never dereferences in
        // this process. One iovec each, no flags, as the man page requires.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n >= 0 {
            // A short count means the range ran into an unmapped page.
            return if n as usize == buf.len() {
                Ok(())
            } else {
                Err(CopyError::Unmapped)
            };
        }
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EFAULT) => CopyError::Unmapped,
            Some(libc::ESRCH) => CopyError::Gone,
            _ => CopyError::Os {
                operation: "process_vm_readv",
                source: e,
            },
        });
    }
}

/// `PF_EXITING` in the flags of `/proc/<pid>/stat`: the process is tearing itself down
/// (its memory may already be gone) and is about to become a zombie.
const PF_EXITING: u64 = 0x4;

/// Whether `pid` has exited: its `/proc` entry is gone, it is a zombie, or it is exiting.
pub(crate) fn is_gone(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`: comm may contain
    // anything, so the fields are counted from the last ')'.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return true;
    };
    let fields = String::from_utf8_lossy(&stat[close + 1..]);
    let mut fields = fields.split_ascii_whitespace();
    let state = fields.next();
    let flags = fields
        .nth(5)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    matches!(state, Some("Z" | "X" | "x") | None) || flags & PF_EXITING != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_pid() -> u32 {
        std::process::id()
    }

    #[test]
    fn both_methods_read_own_memory() {
        let data: Vec<u8> = (0..=255).collect();
        let addr = data.as_ptr() as u64;
        for method in [
            ReadMethod::ProcessVmReadv,
            ReadMethod::ProcMem,
            ReadMethod::Auto,
        ] {
            let mut mem = Memory::new(own_pid(), method);
            let mut out = [0u8; 256];
            mem.read_exact(addr, &mut out).unwrap();
            assert_eq!(&out[..], &data[..], "{method:?}");
        }
    }

    #[test]
    fn unmapped_is_a_clean_error() {
        for method in [ReadMethod::ProcessVmReadv, ReadMethod::ProcMem] {
            let mut mem = Memory::new(own_pid(), method);
            let mut out = [0u8; 16];
            for addr in [0u64, 8, u64::MAX - 4, 1 << 63] {
                assert!(
                    matches!(mem.read_exact(addr, &mut out), Err(CopyError::Unmapped)),
                    "{method:?} at {addr:#x}"
                );
            }
        }
    }

    #[test]
    fn own_process_is_alive() {
        assert!(!is_gone(own_pid()));
        assert!(is_gone(u32::MAX));
    }

    #[test]
    fn unreaped_child_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = std::time::Instant::now();
        while !is_gone(pid) {
            assert!(started.elapsed().as_secs() < 10, "`true` never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Still a zombie: its /proc entry exists until it is reaped.
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
        assert!(is_gone(pid));
    }
}

/// A process's memory for the TLS resolver and the thread reader: the same copies as the
/// process-context reader (`process_vm_readv`, falling back to `/proc/<pid>/mem`).
#[derive(Debug)]
pub struct ProcessMemory {
    inner: std::cell::RefCell<Memory>,
}

impl ProcessMemory {
    /// The memory of process `pid`, read with `method`.
    pub fn new(pid: u32, method: ReadMethod) -> Self {
        Self {
            inner: std::cell::RefCell::new(Memory::new(pid, method)),
        }
    }
}

impl crate::tls::TargetMemory for ProcessMemory {
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner
            .borrow_mut()
            .read_exact(addr, buf)
            .map_err(|e| match e {
                CopyError::Unmapped => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "address not mapped in the target",
                ),
                CopyError::Gone => io::Error::new(io::ErrorKind::NotFound, "the process exited"),
                CopyError::Os { source, .. } => source,
            })
    }
}
