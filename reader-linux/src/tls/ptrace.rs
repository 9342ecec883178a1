//! Stopping one thread with ptrace, for exactly as long as its context is read.
//!
//! `PTRACE_SEIZE` attaches without stopping and without the `SIGSTOP` side effects of
//! `PTRACE_ATTACH`; `PTRACE_INTERRUPT` then stops the thread at its next chance. While
//! it is stopped the reader takes its thread pointer and copies the slot, the record
//! header and the attrs-data. [`StoppedThread`] detaches on drop, on every path, handing
//! back any signal that arrived while the thread was held. If the reader itself dies,
//! the kernel detaches its tracees and they run on. If the thread dies while it is held
//! (its process is killed or exits), the drop collects its exit status: a tracee's exit
//! waits for its tracer, and an uncollected one would keep the whole target process
//! from being reaped for as long as the reader lives.
//!
//! rustix has no ptrace wrapper, so this module calls the `libc` crate's.

use std::fmt;
use std::io;

use super::elf::Machine;

/// Why a thread could not be stopped.
#[derive(Debug)]
pub enum PtraceError {
    /// The thread has exited.
    Gone,
    /// `PTRACE_SEIZE` was refused.
    Denied(io::Error),
    /// Another ptrace call failed.
    Os {
        /// The request that failed.
        request: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for PtraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gone => f.write_str("the thread exited"),
            Self::Denied(e) => write!(
                f,
                "ptrace refused ({e}): reading thread contexts needs CAP_SYS_PTRACE, or the \
                 same uid with kernel.yama.ptrace_scope at 0, and no other tracer (a \
                 debugger or profiler) attached to the thread"
            ),
            Self::Os { request, source } => write!(f, "{request} failed: {source}"),
        }
    }
}

impl std::error::Error for PtraceError {}

fn last_error(request: &'static str) -> PtraceError {
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        PtraceError::Gone
    } else {
        PtraceError::Os { request, source: e }
    }
}

/// A thread held in a ptrace stop; detached (and any held signal re-injected) on drop.
#[derive(Debug)]
pub struct StoppedThread {
    tid: i32,
    /// A signal the thread received while being stopped, delivered again on detach.
    pending_signal: i32,
}

impl StoppedThread {
    /// Seizes thread `tid` and waits until it is stopped.
    pub fn stop(tid: u32) -> Result<Self, PtraceError> {
        let tid = i32::try_from(tid).map_err(|_| PtraceError::Gone)?;
        // SAFETY: PTRACE_SEIZE takes a tid and no pointers (addr and data are 0).
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) } == -1 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => PtraceError::Gone,
                // A thread that has just exited (a zombie not yet released, or one in
                // its exit) is refused with EPERM too: that is not a permission problem.
                Some(libc::EPERM) if crate::memory::is_gone(tid as u32) => PtraceError::Gone,
                _ => PtraceError::Denied(e),
            });
        }
        // From here on the thread is attached: `Drop` detaches it, whatever happens.
        let mut thread = Self {
            tid,
            pending_signal: 0,
        };
        // SAFETY: PTRACE_INTERRUPT takes a tid and no pointers.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) } == -1 {
            let e = last_error("PTRACE_INTERRUPT");
            if !matches!(e, PtraceError::Gone) {
                // Not stopped and not dying: detaching would fail, and the kernel
                // detaches a running tracee when this process exits.
                thread.tid = -1;
            }
            // Gone: the drop collects the exit of the dead tracee.
            return Err(e);
        }
        thread.wait_for_stop()?;
        Ok(thread)
    }

    fn wait_for_stop(&mut self) -> Result<(), PtraceError> {
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid place for waitpid to store the status word.
            let r = unsafe { libc::waitpid(self.tid, &mut status, libc::__WALL) };
            if r == -1 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.tid = -1;
                return Err(if e.raw_os_error() == Some(libc::ECHILD) {
                    PtraceError::Gone
                } else {
                    PtraceError::Os {
                        request: "waitpid",
                        source: e,
                    }
                });
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.tid = -1;
                return Err(PtraceError::Gone);
            }
            if libc::WIFSTOPPED(status) {
                let event = (status >> 16) & 0xff;
                if event == 0 {
                    // A signal-delivery stop: the thread is stopped now, and the signal
                    // must reach it again when it is let go.
                    self.pending_signal = libc::WSTOPSIG(status);
                }
                // PTRACE_EVENT_STOP (our interrupt, or a group stop): stopped.
                return Ok(());
            }
        }
    }

    /// The thread id.
    pub const fn tid(&self) -> u32 {
        self.tid as u32
    }

    /// The thread pointer: `fs_base` on x86_64, `tpidr_el0` on aarch64.
    pub fn thread_pointer(&self) -> Result<u64, PtraceError> {
        thread_pointer(self.tid, Machine::host())
    }
}

#[cfg(target_arch = "x86_64")]
fn thread_pointer(tid: i32, _machine: Machine) -> Result<u64, PtraceError> {
    let mut regs = std::mem::MaybeUninit::<libc::user_regs_struct>::zeroed();
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct to `data`, which points at one.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, regs.as_mut_ptr()) };
    if r == -1 {
        return Err(last_error("PTRACE_GETREGS"));
    }
    // SAFETY: the buffer was zeroed and then filled by the kernel.
    Ok(unsafe { regs.assume_init() }.fs_base)
}

#[cfg(target_arch = "aarch64")]
fn thread_pointer(tid: i32, _machine: Machine) -> Result<u64, PtraceError> {
    const NT_ARM_TLS: usize = 0x401;
    let mut tpidr: u64 = 0;
    let mut iov = libc::iovec {
        iov_base: (&mut tpidr as *mut u64).cast(),
        iov_len: std::mem::size_of::<u64>(),
    };
    // SAFETY: PTRACE_GETREGSET with NT_ARM_TLS writes at most `iov_len` bytes to
    // `iov_base`, which points at a u64 that outlives the call.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_ARM_TLS, &mut iov) };
    if r == -1 {
        return Err(last_error("PTRACE_GETREGSET(NT_ARM_TLS)"));
    }
    Ok(tpidr)
}

impl Drop for StoppedThread {
    fn drop(&mut self) {
        if self.tid <= 0 {
            return;
        }
        // SAFETY: PTRACE_DETACH takes the signal to deliver in `data`, no pointers.
        let detached = unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.tid,
                0usize,
                self.pending_signal as usize,
            )
        } != -1;
        // ESRCH: the thread is no longer in its ptrace stop, which only SIGKILL ends (its
        // own, or its process's exit): it is dying, and its exit is ours to collect.
        if !detached && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            reap_dead_tracee(self.tid);
        }
    }
}

/// How long the drop of a [`StoppedThread`] waits for a dying tracee to become a zombie
/// it can collect; a dying thread takes microseconds.
const REAP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Collects the exit of tracee `tid`, which is dying; gives up after [`REAP_WAIT`].
fn reap_dead_tracee(tid: i32) {
    let deadline = std::time::Instant::now() + REAP_WAIT;
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid place for waitpid to store the status word.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // Collected (`tid`), or nothing of ours to collect (-1, ECHILD).
        if r != 0 || std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}
