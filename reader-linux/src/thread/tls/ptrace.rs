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
//! A ptrace attachment belongs to the thread that made it: [`StoppedThread`] is neither
//! `Send` nor `Sync`, so it is dropped (and detaches) on the thread that stopped the
//! target. The system calls themselves are in the crate's `sys` module.

use std::fmt;
use std::io;
use std::marker::PhantomData;

use crate::sys;

/// The user registers an unwinder starts from, as they were when the thread was
/// interrupted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegisters {
    /// The instruction pointer (`rip`, `pc`).
    pub ip: u64,
    /// The stack pointer (`rsp`, `sp`).
    pub sp: u64,
    /// The frame pointer (`rbp`, `x29`).
    pub fp: u64,
    /// The link register (`x30`) on aarch64; 0 on x86_64.
    pub lr: u64,
}

/// Why a thread could not be stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PtraceError {
    /// The thread has exited.
    Gone,
    /// `PTRACE_SEIZE` was refused.
    Denied {
        /// The kernel's error.
        source: io::Error,
        /// What refused it, as far as `/proc` tells.
        refuser: crate::denied::Refuser,
    },
    /// Another tracer (a debugger, a profiler, another reader) holds the thread: a
    /// thread has one tracer at a time. Retried briefly before this is reported.
    Traced {
        /// The tracer's process id, as the thread's `TracerPid` shows it.
        tracer: u32,
        /// Its command name, if it could be read.
        comm: String,
    },
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
            Self::Denied { source, refuser } => write!(f, "ptrace refused ({source}): {refuser}"),
            Self::Traced { tracer, comm } if comm.is_empty() => write!(
                f,
                "another tracer (process {tracer}) holds the thread, and kept it during the \
                 retries"
            ),
            Self::Traced { tracer, comm } => write!(
                f,
                "another tracer ({comm}, process {tracer}) holds the thread, and kept it \
                 during the retries"
            ),
            Self::Os { request, source } => write!(f, "{request} failed: {source}"),
        }
    }
}

fn os_error(request: &'static str, e: io::Error) -> PtraceError {
    if e.raw_os_error() == Some(libc::ESRCH) {
        PtraceError::Gone
    } else {
        PtraceError::Os { request, source: e }
    }
}

/// Attempts to seize a thread refused with `EPERM` (another tracer may hold it), after
/// the first.
const TRACED_RETRIES: u32 = 20;
/// Pause between those attempts.
const TRACED_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// The process id of the tracer of thread `tid` (`TracerPid` in its status), if one
/// holds it.
fn tracer_of(tid: u32) -> Option<u32> {
    crate::procfs::status(&tid.to_string()).ok()?.tracer_pid()
}

/// A thread held in a ptrace stop; detached (and any held signal re-injected) on drop.
///
/// Not `Send`: the kernel accepts `PTRACE_DETACH` only from the thread that attached, so
/// a value dropped elsewhere would leave the target stopped.
#[derive(Debug)]
pub struct StoppedThread {
    tid: i32,
    /// A signal the thread received while being stopped, delivered again on detach.
    pending_signal: i32,
    /// Ties the attachment to this thread (`*const ()` is neither `Send` nor `Sync`).
    _tracer_thread: PhantomData<*const ()>,
}

impl StoppedThread {
    /// Seizes thread `tid` and waits until it is stopped.
    pub fn stop(tid: u32) -> Result<Self, PtraceError> {
        let tid = i32::try_from(tid).map_err(|_| PtraceError::Gone)?;
        let mut attempt = 0;
        // The tracer last seen holding the thread, between refusals.
        let mut seen_tracer = None;
        while let Err(e) = sys::ptrace_seize(tid) {
            let error = match e.raw_os_error() {
                Some(libc::ESRCH) => PtraceError::Gone,
                // A thread that has just exited (a zombie not yet released, or one in
                // its exit) is refused with EPERM too: that is not a permission problem.
                Some(libc::EPERM) if crate::memory::thread_is_gone(tid as u32) => PtraceError::Gone,
                Some(libc::EPERM) => {
                    // A thread already traced is refused with EPERM too. Another sampler
                    // usually holds it for a few milliseconds at a time: wait a little
                    // and try again, once in any case (it may have let go before its
                    // TracerPid was read), and again while a tracer has been seen.
                    if let Some(tracer) = tracer_of(tid as u32) {
                        seen_tracer = Some(tracer);
                    }
                    if attempt == 0 || (attempt < TRACED_RETRIES && seen_tracer.is_some()) {
                        attempt += 1;
                        std::thread::sleep(TRACED_PAUSE);
                        continue;
                    }
                    match seen_tracer {
                        Some(tracer) => PtraceError::Traced {
                            tracer,
                            comm: crate::procfs::comm(tracer).unwrap_or_default(),
                        },
                        None => PtraceError::Denied {
                            source: e,
                            refuser: crate::procfs::diagnose(tid as u32),
                        },
                    }
                }
                _ => PtraceError::Denied {
                    source: e,
                    refuser: crate::procfs::diagnose(tid as u32),
                },
            };
            return Err(error);
        }
        // From here on the thread is attached: `Drop` detaches it, whatever happens.
        let mut thread = Self {
            tid,
            pending_signal: 0,
            _tracer_thread: PhantomData,
        };
        if let Err(e) = sys::ptrace_interrupt(tid) {
            let e = os_error("PTRACE_INTERRUPT", e);
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
            let status = match sys::waitpid_all(self.tid, 0) {
                Ok(Some(status)) => status,
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
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
            };
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
        sys::thread_pointer(self.tid).map_err(|e| os_error(sys::THREAD_POINTER_REQUEST, e))
    }
}

impl StoppedThread {
    /// The user registers a stack walk starts from: `rip`, `rsp`, `rbp` on x86_64; `pc`,
    /// `sp`, `x29`, `x30` on aarch64. With the thread pointer, from the same request on
    /// x86_64.
    pub fn registers(&self) -> Result<(UserRegisters, u64), PtraceError> {
        let raw = sys::registers(self.tid).map_err(|e| os_error(sys::REGISTERS_REQUEST, e))?;
        let registers = UserRegisters {
            ip: raw.ip,
            sp: raw.sp,
            fp: raw.fp,
            lr: raw.lr,
        };
        Ok((registers, raw.thread_pointer))
    }
}

impl Drop for StoppedThread {
    fn drop(&mut self) {
        if self.tid <= 0 {
            return;
        }
        // ESRCH: the thread is no longer in its ptrace stop, which only SIGKILL ends (its
        // own, or its process's exit): it is dying, and its exit is ours to collect.
        if let Err(e) = sys::ptrace_detach(self.tid, self.pending_signal) {
            if e.raw_os_error() == Some(libc::ESRCH) {
                reap_dead_tracee(self.tid);
            }
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
        match sys::waitpid_all(tid, libc::WNOHANG) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Collected, or nothing of ours to collect (ECHILD).
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if std::time::Instant::now() >= deadline => return,
            Ok(None) => std::thread::sleep(std::time::Duration::from_micros(200)),
        }
    }
}
