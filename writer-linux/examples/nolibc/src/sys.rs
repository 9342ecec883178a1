//! Raw system calls: the few this program makes itself (the writer makes its own through
//! rustix's raw backend).

use core::arch::asm;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: usize = 0;
    pub const WRITE: usize = 1;
    pub const CLOSE: usize = 3;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const GETPID: usize = 39;
    pub const CLONE: usize = 56;
    pub const EXIT: usize = 60;
    pub const RT_SIGTIMEDWAIT: usize = 128;
    pub const ARCH_PRCTL: usize = 158;
    pub const GETTID: usize = 186;
    pub const CLOCK_GETTIME: usize = 228;
    pub const CLOCK_NANOSLEEP: usize = 230;
    pub const EXIT_GROUP: usize = 231;
    pub const OPENAT: usize = 257;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const OPENAT: usize = 56;
    pub const CLOSE: usize = 57;
    pub const READ: usize = 63;
    pub const WRITE: usize = 64;
    pub const EXIT: usize = 93;
    pub const EXIT_GROUP: usize = 94;
    pub const CLOCK_GETTIME: usize = 113;
    pub const CLOCK_NANOSLEEP: usize = 115;
    pub const RT_SIGPROCMASK: usize = 135;
    pub const RT_SIGTIMEDWAIT: usize = 137;
    pub const GETPID: usize = 172;
    pub const GETTID: usize = 178;
    pub const CLONE: usize = 220;
}

/// One system call with up to six arguments; returns the kernel's raw result (a negative
/// errno on failure).
///
/// # Safety
/// The arguments must be valid for system call `n` (pointers to memory it may read or
/// write, for the lengths it is given).
#[inline(always)]
pub unsafe fn syscall(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's guarantees; `syscall` clobbers rcx and r11 only.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller's guarantees; `svc #0` changes x0 only.
    unsafe {
        asm!(
            "svc #0",
            in("x8") n,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    ret
}

/// Writes all of `bytes` to `fd` (errors ignored: there is nowhere to report them).
pub fn write_all(fd: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe {
            syscall(
                nr::WRITE,
                [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0],
            )
        };
        match n {
            n if n > 0 => bytes = &bytes[n as usize..],
            -4 => {} // EINTR
            _ => return,
        }
    }
}

/// Ends the whole process.
pub fn exit_group(code: i32) -> ! {
    loop {
        // SAFETY: no pointer argument.
        unsafe { syscall(nr::EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]) };
    }
}

pub fn getpid() -> i32 {
    // SAFETY: no argument.
    unsafe { syscall(nr::GETPID, [0; 6]) as i32 }
}

pub fn gettid() -> i32 {
    // SAFETY: no argument.
    unsafe { syscall(nr::GETTID, [0; 6]) as i32 }
}

#[repr(C)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: i64,
}

const CLOCK_MONOTONIC: usize = 1;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is writable.
    unsafe {
        syscall(
            nr::CLOCK_GETTIME,
            [
                CLOCK_MONOTONIC,
                &mut ts as *mut Timespec as usize,
                0,
                0,
                0,
                0,
            ],
        )
    };
    (ts.sec as u64) * 1_000_000_000 + ts.nsec as u64
}

/// Sleeps `ns` nanoseconds (less if a signal interrupts).
pub fn sleep_ns(ns: u64) {
    let ts = Timespec {
        sec: (ns / 1_000_000_000) as i64,
        nsec: (ns % 1_000_000_000) as i64,
    };
    // SAFETY: `ts` is readable; no remaining time is asked for.
    unsafe {
        syscall(
            nr::CLOCK_NANOSLEEP,
            [CLOCK_MONOTONIC, 0, &ts as *const Timespec as usize, 0, 0, 0],
        )
    };
}

pub const SIGTERM: usize = 15;
const SIG_BLOCK: usize = 0;

/// The kernel's signal set with `signal` in it.
fn sigset(signal: usize) -> u64 {
    1 << (signal - 1)
}

/// Blocks `signal` in the calling thread (and the threads it starts afterwards).
pub fn block_signal(signal: usize) -> Result<(), isize> {
    let set = sigset(signal);
    // SAFETY: `set` is readable, 8 bytes; no old set is asked for.
    match unsafe {
        syscall(
            nr::RT_SIGPROCMASK,
            [SIG_BLOCK, &set as *const u64 as usize, 0, 8, 0, 0],
        )
    } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Waits up to `ns` nanoseconds for the blocked `signal`; whether it came.
pub fn wait_signal(signal: usize, ns: u64) -> bool {
    let set = sigset(signal);
    let ts = Timespec {
        sec: (ns / 1_000_000_000) as i64,
        nsec: (ns % 1_000_000_000) as i64,
    };
    // SAFETY: `set` and `ts` are readable; no siginfo is asked for.
    let ret = unsafe {
        syscall(
            nr::RT_SIGTIMEDWAIT,
            [
                &set as *const u64 as usize,
                0,
                &ts as *const Timespec as usize,
                8,
                0,
                0,
            ],
        )
    };
    ret == signal as isize
}

/// Reads the whole file at `path` (NUL-terminated) into `buf`; the bytes read.
pub fn read_file<'a>(path: &[u8], buf: &'a mut [u8]) -> Result<&'a [u8], isize> {
    const AT_FDCWD: isize = -100;
    debug_assert_eq!(path.last(), Some(&0));
    // SAFETY: `path` is NUL-terminated; O_RDONLY | O_CLOEXEC.
    let fd = unsafe {
        syscall(
            nr::OPENAT,
            [
                AT_FDCWD as usize,
                path.as_ptr() as usize,
                0o2000000,
                0,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        return Err(fd);
    }
    let mut len = 0;
    let result = loop {
        if len == buf.len() {
            break Err(-27); // EFBIG: larger than the buffer
        }
        // SAFETY: `buf[len..]` is writable.
        let n = unsafe {
            syscall(
                nr::READ,
                [
                    fd as usize,
                    buf[len..].as_mut_ptr() as usize,
                    buf.len() - len,
                    0,
                    0,
                    0,
                ],
            )
        };
        match n {
            0 => break Ok(()),
            n if n > 0 => len += n as usize,
            -4 => {}
            e => break Err(e),
        }
    };
    // SAFETY: the descriptor opened above.
    unsafe { syscall(nr::CLOSE, [fd as usize, 0, 0, 0, 0, 0]) };
    result.map(|()| &buf[..len])
}

/// Sets this thread's thread pointer (x86_64: the `%fs` base).
#[cfg(target_arch = "x86_64")]
pub fn set_thread_pointer(tp: usize) -> Result<(), isize> {
    const ARCH_SET_FS: usize = 0x1002;
    // SAFETY: changes only this thread's %fs base, to memory the caller set up.
    match unsafe { syscall(nr::ARCH_PRCTL, [ARCH_SET_FS, tp, 0, 0, 0, 0]) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Sets this thread's thread pointer (aarch64: `TPIDR_EL0`).
#[cfg(target_arch = "aarch64")]
pub fn set_thread_pointer(tp: usize) -> Result<(), isize> {
    // SAFETY: changes only this thread's TPIDR_EL0, to memory the caller set up.
    unsafe { asm!("msr tpidr_el0, {}", in(reg) tp, options(nostack, preserves_flags)) };
    Ok(())
}

/// This thread's thread pointer, as a reader that stopped the thread reads it.
pub fn thread_pointer() -> usize {
    let tp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the TCB's first word is its own address (the variant II self-pointer),
    // set up before any code used thread-local storage.
    unsafe {
        asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, preserves_flags, readonly))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads a register.
    unsafe {
        asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, preserves_flags, nomem))
    };
    tp
}

/// Starts a thread (`clone` with `CLONE_VM | CLONE_THREAD | CLONE_SETTLS` and the rest of
/// what a thread shares) that runs `entry(arg)` on `stack_top` with thread pointer `tp`,
/// and exits when `entry` returns. Returns its thread id.
///
/// # Safety
/// `stack_top` must be the 16-aligned end of memory that nothing else uses, and `tp` a
/// thread pointer set up as [`set_thread_pointer`] expects, both for the thread's whole
/// life.
pub unsafe fn spawn(entry: extern "C" fn(usize), arg: usize, stack_top: usize, tp: usize) -> isize {
    const CLONE_VM: usize = 0x100;
    const CLONE_FS: usize = 0x200;
    const CLONE_FILES: usize = 0x400;
    const CLONE_SIGHAND: usize = 0x800;
    const CLONE_THREAD: usize = 0x10000;
    const CLONE_SYSVSEM: usize = 0x40000;
    const CLONE_SETTLS: usize = 0x80000;
    let flags = CLONE_VM
        | CLONE_FS
        | CLONE_FILES
        | CLONE_SIGHAND
        | CLONE_THREAD
        | CLONE_SYSVSEM
        | CLONE_SETTLS;
    let ret: isize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's guarantees. The child starts on `stack_top` with every register
    // of the parent but rax (0): it calls `entry` (r12) with `arg` (r13) and exits the
    // thread. The parent only gets the child's id in rax; the kernel clobbers rcx, r11.
    unsafe {
        asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov eax, {exit}",
            "xor edi, edi",
            "syscall",
            "ud2",
            "2:",
            exit = const nr::EXIT,
            inlateout("rax") nr::CLONE as isize => ret,
            in("rdi") flags,
            in("rsi") stack_top,
            in("rdx") 0usize,
            in("r10") 0usize,
            in("r8") tp,
            in("r12") entry as usize,
            in("r13") arg,
            lateout("rcx") _, lateout("r11") _,
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as for x86_64: the child (x0 = 0) calls `entry` (x9) with `arg` (x10) on
    // its own stack and exits the thread; the parent gets the child's id in x0.
    unsafe {
        asm!(
            "svc #0",
            "cbnz x0, 2f",
            "mov x29, xzr",
            "mov x0, x10",
            "blr x9",
            "mov x8, {exit}",
            "mov x0, xzr",
            "svc #0",
            "brk #0",
            "2:",
            exit = const nr::EXIT,
            in("x8") nr::CLONE,
            inlateout("x0") flags as isize => ret,
            in("x1") stack_top,
            in("x2") 0usize,
            in("x3") tp,
            in("x4") 0usize,
            in("x9") entry as usize,
            in("x10") arg,
            lateout("x30") _,
        );
    }
    ret
}
