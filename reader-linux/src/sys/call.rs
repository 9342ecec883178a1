//! What every system call of the module shares: the error of a `-1` return, and the
//! registers a tracee's are read into.

use std::io;

/// A system call's result: `-1` is the error in `errno`.
pub(super) fn check(r: libc::c_long) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The registers of a stopped tracee that unwinding starts from, and its thread pointer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawRegisters {
    pub(crate) ip: u64,
    pub(crate) sp: u64,
    pub(crate) fp: u64,
    pub(crate) lr: u64,
    pub(crate) thread_pointer: u64,
}
