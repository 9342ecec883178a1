//! The names of the system calls a thread waits in, for an off-CPU sample's
//! [`Sample::syscall`](crate::Sample::syscall): this architecture's numbers, from libc.

/// The name of system call `nr` of this architecture, for the calls a thread blocks or
/// sleeps in (reading and writing files, pipes and sockets, waiting on futexes, timers,
/// events, children and signals, syncing to disk); `None` for the others.
pub fn syscall_name(nr: u16) -> Option<&'static str> {
    let nr = libc::c_long::from(nr);
    let common: &[(libc::c_long, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_write, "write"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_writev, "writev"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_pwrite64, "pwrite64"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_close, "close"),
        (libc::SYS_ioctl, "ioctl"),
        (libc::SYS_futex, "futex"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_sched_yield, "sched_yield"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_accept, "accept"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_sendmsg, "sendmsg"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_recvmmsg, "recvmmsg"),
        (libc::SYS_sendmmsg, "sendmmsg"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_waitid, "waitid"),
        (libc::SYS_fsync, "fsync"),
        (libc::SYS_fdatasync, "fdatasync"),
        (libc::SYS_sync, "sync"),
        (libc::SYS_flock, "flock"),
        (libc::SYS_sendfile, "sendfile"),
        (libc::SYS_splice, "splice"),
        (libc::SYS_io_getevents, "io_getevents"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait"),
        (libc::SYS_rt_sigsuspend, "rt_sigsuspend"),
        (libc::SYS_msgrcv, "msgrcv"),
        (libc::SYS_msgsnd, "msgsnd"),
        (libc::SYS_semop, "semop"),
        (libc::SYS_semtimedop, "semtimedop"),
        (libc::SYS_mmap, "mmap"),
        (libc::SYS_munmap, "munmap"),
        (libc::SYS_madvise, "madvise"),
    ];
    // The older calls only some architectures have (aarch64 has their newer forms).
    #[cfg(target_arch = "x86_64")]
    let older: &[(libc::c_long, &str)] = &[
        (libc::SYS_poll, "poll"),
        (libc::SYS_select, "select"),
        (libc::SYS_epoll_wait, "epoll_wait"),
        (libc::SYS_pause, "pause"),
        (libc::SYS_open, "open"),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let older: &[(libc::c_long, &str)] = &[];
    common
        .iter()
        .chain(older)
        .find(|(number, _)| *number == nr)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_threads_wait_in_are_named() {
        let name = |nr: libc::c_long| syscall_name(u16::try_from(nr).unwrap());
        assert_eq!(name(libc::SYS_futex), Some("futex"));
        assert_eq!(name(libc::SYS_read), Some("read"));
        assert_eq!(name(libc::SYS_clock_nanosleep), Some("clock_nanosleep"));
        assert_eq!(name(libc::SYS_getpid), None);
        assert_eq!(syscall_name(u16::MAX), None);
    }
}
