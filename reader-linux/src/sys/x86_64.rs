//! x86_64: a stopped tracee's registers and thread pointer, both from `PTRACE_GETREGS`
//! (the same names as the other architectures' file).

use std::io;

use super::call::{check, RawRegisters};

/// The request [`registers`] makes, for messages.
pub(crate) const REGISTERS_REQUEST: &str = "PTRACE_GETREGS";
/// The request [`thread_pointer`] makes, for messages.
pub(crate) const THREAD_POINTER_REQUEST: &str = "PTRACE_GETREGS";

/// The user registers of stopped tracee `tid` (`PTRACE_GETREGS`): `rip`, `rsp`, `rbp`
/// and `fs_base`.
pub(crate) fn registers(tid: i32) -> io::Result<RawRegisters> {
    let mut regs = std::mem::MaybeUninit::<libc::user_regs_struct>::zeroed();
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct to `data`, which points at one.
    check(unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, regs.as_mut_ptr()) })?;
    // SAFETY: the buffer was zeroed, and then filled by the kernel.
    let regs = unsafe { regs.assume_init() };
    Ok(RawRegisters {
        ip: regs.rip,
        sp: regs.rsp,
        fp: regs.rbp,
        lr: 0,
        thread_pointer: regs.fs_base,
    })
}

/// The thread pointer of stopped tracee `tid`: `fs_base`.
pub(crate) fn thread_pointer(tid: i32) -> io::Result<u64> {
    registers(tid).map(|r| r.thread_pointer)
}
