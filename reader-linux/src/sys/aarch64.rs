//! aarch64: a stopped tracee's registers (`PTRACE_GETREGSET` with `NT_PRSTATUS`) and
//! thread pointer (`NT_ARM_TLS`) (the same names as the other architectures' file).

use std::io;

use super::call::{check, RawRegisters};

/// The request [`registers`] makes, for messages.
pub(crate) const REGISTERS_REQUEST: &str = "PTRACE_GETREGSET(NT_PRSTATUS)";
/// The request [`thread_pointer`] makes, for messages.
pub(crate) const THREAD_POINTER_REQUEST: &str = "PTRACE_GETREGSET(NT_ARM_TLS)";

/// The user registers of stopped tracee `tid` (`PTRACE_GETREGSET` with `NT_PRSTATUS`:
/// `pc`, `sp`, `x29` and `x30`) and its thread pointer (`NT_ARM_TLS`: `tpidr_el0`).
pub(crate) fn registers(tid: i32) -> io::Result<RawRegisters> {
    const NT_PRSTATUS: usize = 1;
    let mut regs = std::mem::MaybeUninit::<libc::user_regs_struct>::zeroed();
    let mut iov = libc::iovec {
        iov_base: regs.as_mut_ptr().cast(),
        iov_len: std::mem::size_of::<libc::user_regs_struct>(),
    };
    // SAFETY: PTRACE_GETREGSET with NT_PRSTATUS writes at most `iov_len` bytes to
    // `iov_base`, which points at a user_regs_struct that outlives the call.
    check(unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_PRSTATUS, &mut iov) })?;
    // SAFETY: the buffer was zeroed, and then (partly) filled by the kernel; every bit
    // pattern is a valid user_regs_struct.
    let regs = unsafe { regs.assume_init() };
    Ok(RawRegisters {
        ip: regs.pc,
        sp: regs.sp,
        fp: regs.regs[29],
        lr: regs.regs[30],
        thread_pointer: thread_pointer(tid)?,
    })
}

/// The thread pointer of stopped tracee `tid`: `tpidr_el0`.
pub(crate) fn thread_pointer(tid: i32) -> io::Result<u64> {
    const NT_ARM_TLS: usize = 0x401;
    let mut tpidr: u64 = 0;
    let mut iov = libc::iovec {
        iov_base: (&mut tpidr as *mut u64).cast(),
        iov_len: std::mem::size_of::<u64>(),
    };
    // SAFETY: PTRACE_GETREGSET with NT_ARM_TLS writes at most `iov_len` bytes to
    // `iov_base`, which points at a u64 that outlives the call.
    check(unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_ARM_TLS, &mut iov) })?;
    Ok(tpidr)
}
