//! The reader's system calls that rustix does not wrap, and so the only `unsafe` code in
//! the crate: each function is one system call behind a safe signature, in the manner of
//! rustix. Everything else in the crate is `deny(unsafe_code)`.
//!
//! - [`process_vm_readv(2)`](https://man7.org/linux/man-pages/man2/process_vm_readv.2.html)
//! - [`ptrace(2)`](https://man7.org/linux/man-pages/man2/ptrace.2.html): `PTRACE_SEIZE`,
//!   `PTRACE_INTERRUPT`, `PTRACE_DETACH`, and the registers (`PTRACE_GETREGS` on x86_64,
//!   `PTRACE_GETREGSET` with `NT_PRSTATUS` and `NT_ARM_TLS` on aarch64)
//! - [`waitpid(2)`](https://man7.org/linux/man-pages/man2/wait.2.html) with `__WALL`,
//!   which rustix's `waitpid` does not accept (it is needed for threads other than a
//!   thread group's leader).
#![allow(unsafe_code)]

use std::io;

mod call;
// Where the architectures differ, each has its own file with the same names.
#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::{registers, thread_pointer, REGISTERS_REQUEST, THREAD_POINTER_REQUEST};
use call::check;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::{registers, thread_pointer, REGISTERS_REQUEST, THREAD_POINTER_REQUEST};

/// Copies `buf.len()` bytes at `remote` in process `pid` into `buf`: one
/// `process_vm_readv` of one local and one remote range. Returns the bytes copied, which
/// is short when the range runs into an unmapped page.
pub(crate) fn process_vm_readv(pid: i32, remote: usize, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is valid for writes of `buf.len()` bytes for
    // the whole call; the kernel writes nothing else of this process. `remote` is only an
    // address in the target, which the kernel checks and never dereferences in this
    // process. One iovec each, no flags, as the man page requires.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Copies many ranges of process `pid` at once: one `process_vm_readv` whose remote
/// iovecs are the addresses of `reads` and whose local iovecs are their buffers, in the
/// same order (at most `IOV_MAX`, 1024, of each). Returns the bytes copied: the kernel
/// copies the ranges in order and stops at the first it cannot copy, so the count ends
/// inside that range or at its start. An address past `usize` fails with `EFAULT`.
pub(crate) fn process_vm_readv_each(pid: i32, reads: &mut [(u64, &mut [u8])]) -> io::Result<usize> {
    // A sample's few ranges take iovecs on the stack: no allocation on the sampling path.
    const ON_STACK: usize = 8;
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let (mut local_stack, mut remote_stack) = ([empty; ON_STACK], [empty; ON_STACK]);
    let (mut local_heap, mut remote_heap) = (Vec::new(), Vec::new());
    let (local, remote) = if reads.len() <= ON_STACK {
        (
            &mut local_stack[..reads.len()],
            &mut remote_stack[..reads.len()],
        )
    } else {
        local_heap.resize(reads.len(), empty);
        remote_heap.resize(reads.len(), empty);
        (&mut local_heap[..], &mut remote_heap[..])
    };
    for (((addr, buf), local), remote) in reads.iter_mut().zip(&mut *local).zip(&mut *remote) {
        let Ok(addr) = usize::try_from(*addr) else {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        };
        *local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        *remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
    }
    let Ok(count) = libc::c_ulong::try_from(local.len()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: each local iovec describes one buffer of `reads`, which the exclusive borrow
    // keeps valid for writes, and apart from every other, for the whole call; the kernel
    // writes nothing else of this process. The remote iovecs are only addresses in the
    // target, which the kernel checks and never dereferences in this process. Both arrays
    // have `count` elements; no flags, as the man page requires.
    let n =
        unsafe { libc::process_vm_readv(pid, local.as_ptr(), count, remote.as_ptr(), count, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `PTRACE_SEIZE`: attaches to thread `tid` without stopping it.
pub(crate) fn ptrace_seize(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_SEIZE takes a tid and no pointers (addr and data are 0).
    check(unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) })
}

/// `PTRACE_INTERRUPT`: stops seized thread `tid` at its next chance.
pub(crate) fn ptrace_interrupt(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_INTERRUPT takes a tid and no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) })
}

/// `PTRACE_DETACH`: lets thread `tid` go, delivering `signal` (0 for none).
pub(crate) fn ptrace_detach(tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal to deliver in `data`, no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, signal as usize) })
}

/// `waitpid(tid, __WALL | extra)`: `Ok(None)` when `WNOHANG` is in `extra` and nothing
/// changed, otherwise the status word.
pub(crate) fn waitpid_all(tid: i32, extra: i32) -> io::Result<Option<i32>> {
    let mut status = 0;
    // SAFETY: `status` is a valid place for waitpid to store the status word.
    let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | extra) };
    match r {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(status)),
    }
}
