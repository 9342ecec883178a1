//! Copying bytes out of another process.
//!
//! Two ways, both of which fail cleanly on memory the target has not mapped (no signal,
//! no partial garbage):
//! - [`process_vm_readv(2)`](https://man7.org/linux/man-pages/man2/process_vm_readv.2.html):
//!   one system call per copy (or per up to [`MAX_RANGES_PER_CALL`] small copies, with
//!   [`ProcessMemory::read_exact_each`]), no file descriptor (the calls themselves are in
//!   the crate's `sys` module: rustix has no wrapper for them).
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html) on
//!   [`/proc/<pid>/mem`](https://man7.org/linux/man-pages/man5/proc_pid_mem.5.html): used
//!   when `process_vm_readv` is refused with `EPERM` or `ENOSYS` (a seccomp filter, a
//!   container runtime's profile) although the process may be read.
//!
//! Both need the same permission: ptrace read access (`PTRACE_MODE_ATTACH_REALCREDS`).

use std::cell::{Cell, OnceCell};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::error::Error;
use crate::{procfs, sys};

/// The smallest page size of the architectures covered (4 KiB): copies that must stop at
/// the first unmapped page go at most this far in one step.
const PAGE_GRANULE: u64 = 4096;

/// Most ranges [`ProcessMemory::read_exact_each`] copies in one system call: the kernel's
/// limit on the iovecs of one `process_vm_readv` (`IOV_MAX`).
pub const MAX_RANGES_PER_CALL: usize = 1024;

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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// Part of the range is not mapped in the target.
    Unmapped,
    /// The target has exited.
    Gone,
    /// A system call failed; `operation` names it.
    Os {
        /// The system call, such as `process_vm_readv`.
        operation: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unmapped => f.write_str("address not mapped in the target"),
            Self::Gone => f.write_str("the process exited"),
            Self::Os { operation, source } => write!(f, "{operation} failed: {source}"),
        }
    }
}

impl From<CopyError> for io::Error {
    fn from(e: CopyError) -> Self {
        match e {
            CopyError::Unmapped => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
            CopyError::Gone => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
            CopyError::Os { source, .. } => source,
        }
    }
}

/// A target process's memory: copies through `process_vm_readv`, or `/proc/<pid>/mem`.
/// Used by the process-context reader, the TLS resolver and the thread reader alike.
#[derive(Debug)]
pub struct ProcessMemory {
    pid: u32,
    method: ReadMethod,
    /// Set once `process_vm_readv` was refused in [`ReadMethod::Auto`].
    vm_readv_refused: Cell<bool>,
    /// The thread `process_vm_readv` names: the process itself, or a live thread once the
    /// main thread has exited (the kernel then finds no memory through the process id).
    via: Cell<u32>,
    /// `/proc/<pid>/mem`, opened on first use and kept.
    mem: OnceCell<File>,
}

impl ProcessMemory {
    /// The memory of process `pid`, read with `method`. Opens nothing yet.
    pub const fn new(pid: u32, method: ReadMethod) -> Self {
        Self {
            pid,
            method,
            vm_readv_refused: Cell::new(false),
            via: Cell::new(pid),
            mem: OnceCell::new(),
        }
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the `/proc/<pid>/mem` fallback is in use.
    pub fn uses_proc_mem(&self) -> bool {
        matches!(self.method, ReadMethod::ProcMem) || self.vm_readv_refused.get()
    }

    /// Fills `buf` with the target's bytes at `addr`, or fails without a partial result.
    pub fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
        if buf.is_empty() {
            return Ok(());
        }
        if !self.uses_proc_mem() {
            let mut result = process_vm_readv(self.via.get(), addr, buf);
            if matches!(result, Err(CopyError::Gone)) {
                // The main thread may have exited while others run on.
                if let Some(tid) = live_thread(self.pid).filter(|&tid| tid != self.via.get()) {
                    self.via.set(tid);
                    result = process_vm_readv(tid, addr, buf);
                }
            }
            match result {
                Err(CopyError::Os { source, .. })
                    if self.method == ReadMethod::Auto
                        && matches!(source.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) =>
                {
                    self.vm_readv_refused.set(true);
                }
                other => return other,
            }
        }
        self.pread(addr, buf)
    }

    /// Copies the target's bytes from `addr` into the start of `buf`, as many as are
    /// mapped without a gap, up to `buf.len()`: the number copied, 0 when `addr` itself
    /// is not mapped. For ranges whose end may lie past the mapping, such as the top of
    /// a thread's stack.
    pub fn read_prefix(&self, addr: u64, buf: &mut [u8]) -> Result<usize, CopyError> {
        if buf.is_empty() {
            return Ok(0);
        }
        // The range must not wrap around the address space.
        let len = usize::try_from(u64::MAX - addr).map_or(buf.len(), |room| room.min(buf.len()));
        let buf = &mut buf[..len];
        if !self.uses_proc_mem() {
            match process_vm_readv_prefix(self.via.get(), addr, buf) {
                Err(CopyError::Os { source, .. })
                    if self.method == ReadMethod::Auto
                        && matches!(source.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) =>
                {
                    self.vm_readv_refused.set(true);
                }
                Err(CopyError::Gone) => {
                    // The main thread may have exited while others run on: read_exact
                    // finds a live one.
                    return match self.read_exact(addr, &mut buf[..1]) {
                        Ok(()) => process_vm_readv_prefix(self.via.get(), addr, buf),
                        Err(CopyError::Unmapped) => Ok(0),
                        Err(e) => Err(e),
                    };
                }
                other => return other,
            }
        }
        let mut done = 0;
        while done < buf.len() {
            // Page by page, so that the first unmapped page ends the copy.
            let at = addr + done as u64;
            let page_end = (at | (PAGE_GRANULE - 1)).saturating_add(1);
            let chunk = usize::try_from(page_end - at)
                .map_or(buf.len() - done, |n| n.min(buf.len() - done));
            match self.pread(at, &mut buf[done..done + chunk]) {
                Ok(()) => done += chunk,
                Err(CopyError::Unmapped) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Fills every buffer of `reads` with the target's bytes at its address, and says how
    /// each copy went, in the order of `reads`: each result is the one
    /// [`read_exact`](Self::read_exact) gives for that range alone. Many small copies (the
    /// first bytes of thousands of mappings) cost a few system calls instead of one each:
    /// one `process_vm_readv` takes up to [`MAX_RANGES_PER_CALL`] ranges, and a range it
    /// cannot copy whole is copied again alone, which says why. Once the process is found
    /// gone, the ranges left are [`CopyError::Gone`] without another call.
    pub fn read_exact_each(&self, reads: &mut [(u64, &mut [u8])]) -> Vec<Result<(), CopyError>> {
        let mut results = Vec::with_capacity(reads.len());
        let mut next = 0;
        while next < reads.len() {
            if !self.uses_proc_mem() {
                let end = reads.len().min(next + MAX_RANGES_PER_CALL);
                let whole = process_vm_readv_leading(self.via.get(), &mut reads[next..end]);
                results.extend((0..whole).map(|_| Ok(())));
                next += whole;
            }
            let Some((addr, buf)) = reads.get_mut(next) else {
                break;
            };
            // The first range the call did not copy whole (or, through /proc/<pid>/mem,
            // every range): alone, with every failure told apart.
            let result = self.read_exact(*addr, buf);
            next += 1;
            let gone = matches!(result, Err(CopyError::Gone));
            results.push(result);
            if gone {
                results.extend((next..reads.len()).map(|_| Err(CopyError::Gone)));
                break;
            }
        }
        results
    }

    /// Copies the ranges of `reads` in order, up to the first that cannot be copied
    /// whole, and says how many were: for ranges of which only the leading ones may be
    /// mapped (pages below an address that is), taken in one system call when they can
    /// be (at most [`MAX_RANGES_PER_CALL`] ranges are looked at). 0 says nothing of why:
    /// [`read_exact`](Self::read_exact) of the first range does.
    pub fn read_leading(&self, reads: &mut [(u64, &mut [u8])]) -> usize {
        let len = reads.len().min(MAX_RANGES_PER_CALL);
        let reads = &mut reads[..len];
        if !self.uses_proc_mem() {
            let whole = process_vm_readv_leading(self.via.get(), reads);
            if whole > 0 {
                return whole;
            }
        }
        // Nothing copied by the call (or `/proc/<pid>/mem` in use): range by range, which
        // also finds a live thread, or turns to `/proc/<pid>/mem` when the call is refused.
        let mut whole = 0;
        for (addr, buf) in reads.iter_mut() {
            if self.read_exact(*addr, buf).is_err() {
                break;
            }
            whole += 1;
        }
        whole
    }

    fn pread(&self, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
        if self.mem.get().is_none() {
            let path = match live_thread(self.pid) {
                Some(tid) if tid != self.pid => format!("/proc/{}/task/{tid}/mem", self.pid),
                _ => format!("/proc/{}/mem", self.pid),
            };
            let file = File::open(path).map_err(|source| match source.raw_os_error() {
                Some(libc::ENOENT | libc::ESRCH) => CopyError::Gone,
                _ => CopyError::Os {
                    operation: "open /proc/<pid>/mem",
                    source,
                },
            })?;
            // Empty just above, and this value is not shared with another thread.
            let _ = self.mem.set(file);
        }
        let Some(file) = self.mem.get() else {
            return Err(CopyError::Gone);
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

/// One `process_vm_readv` of one local and one remote range: the whole range, or
/// [`CopyError::Unmapped`] when it runs into an unmapped page.
fn process_vm_readv(pid: u32, addr: u64, buf: &mut [u8]) -> Result<(), CopyError> {
    match process_vm_readv_prefix(pid, addr, buf)? {
        n if n == buf.len() => Ok(()),
        _ => Err(CopyError::Unmapped),
    }
}

/// One `process_vm_readv` of many ranges: how many of the first ranges of `reads` it
/// copied whole; 0 when the call failed (the first range, copied alone, says why).
fn process_vm_readv_leading(pid: u32, reads: &mut [(u64, &mut [u8])]) -> usize {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return 0;
    };
    let copied = loop {
        match sys::process_vm_readv_each(pid, reads) {
            Ok(n) => break n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(_) => return 0,
        }
    };
    let mut end = 0usize;
    reads
        .iter()
        .take_while(|(_, buf)| {
            end = end.saturating_add(buf.len());
            end <= copied
        })
        .count()
}

/// One `process_vm_readv` of one local and one remote range: the bytes copied, short
/// (or 0) when the range runs into an unmapped page.
fn process_vm_readv_prefix(pid: u32, addr: u64, buf: &mut [u8]) -> Result<usize, CopyError> {
    let Ok(remote) = usize::try_from(addr) else {
        return Ok(0);
    };
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(CopyError::Gone);
    };
    loop {
        return match sys::process_vm_readv(pid, remote, buf) {
            Ok(n) => Ok(n),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EFAULT) => Ok(0),
                Some(libc::ESRCH) => Err(CopyError::Gone),
                _ => Err(CopyError::Os {
                    operation: "process_vm_readv",
                    source: e,
                }),
            },
        };
    }
}

/// Whether process `pid` has exited: its `/proc` entry is gone, or it is a zombie or
/// exiting and so is every thread it had. A process whose main thread has exited while
/// other threads run (the kernel then shows its leader as a zombie) is not gone.
pub fn is_gone(pid: u32) -> bool {
    match procfs::stat(pid) {
        None => true,
        Some(stat) if stat.has_exited() => live_thread(pid).is_none(),
        Some(_) => false,
    }
}

/// Whether thread `tid` has exited (or is exiting), whatever its process's other threads do.
pub(crate) fn thread_is_gone(tid: u32) -> bool {
    procfs::any_task_stat(tid).is_none_or(|stat| stat.has_exited())
}

/// A thread of process `pid` that has not exited: the process's own id while its main
/// thread runs, otherwise the first live one of `/proc/<pid>/task`. `None`: every thread
/// has exited.
///
/// Per-process files of a process whose main thread has exited (its `maps`, `smaps`,
/// `mem`) show nothing, while the same files of a live thread,
/// `/proc/<pid>/task/<tid>/...`, show the shared address space.
pub fn live_thread(pid: u32) -> Option<u32> {
    let live = |stat: Option<procfs::Stat>| stat.is_some_and(|s| !s.has_exited());
    if live(procfs::stat(pid)) {
        return Some(pid);
    }
    procfs::thread_ids(pid)
        .ok()?
        .into_iter()
        .find(|&tid| tid != pid && live(procfs::task_stat(pid, tid)))
}

impl crate::thread::tls::TargetMemory for ProcessMemory {
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact(addr, buf).map_err(io::Error::from)
    }
}

/// What a sample's own work hands back of what it copied of a thread's memory, for the
/// reader to read from: each copy with the address it was copied from (`(0, &[])` for
/// none).
pub type Copies<'s> = [(u64, &'s [u8]); 2];

/// A process's memory with copies of some of it already taken while a thread was
/// stopped (its stack, from the stack pointer up, which on x86_64 takes its static TLS
/// too): a read that one copy holds whole comes from it, without a system call, and
/// says what the target held when it was copied; any other read copies from the
/// process.
#[derive(Clone, Copy, Debug)]
pub struct CopiedMemory<'a, const N: usize> {
    /// The copies, each with the address it was copied from.
    pub copies: [(u64, &'a [u8]); N],
    /// Where the rest is read.
    pub memory: &'a ProcessMemory,
}

impl<const N: usize> crate::thread::tls::TargetMemory for CopiedMemory<'_, N> {
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        for (at, bytes) in self.copies {
            let held = addr
                .checked_sub(at)
                .and_then(|from| usize::try_from(from).ok())
                .and_then(|from| bytes.get(from..from.checked_add(buf.len())?));
            if let Some(held) = held {
                buf.copy_from_slice(held);
                return Ok(());
            }
        }
        self.memory.read_exact_at(addr, buf)
    }
}

/// The error of a failed copy, told apart by whether the process is still there.
impl Error {
    /// Turns a failed copy of `what` (such as `the header`) out of process `pid` into an
    /// error: [`Error::ProcessGone`]; [`Error::NoContext`] for memory that is no longer
    /// mapped in a live process (its context was unpublished); or as [`from_io`](Self::from_io).
    pub fn from_copy(pid: u32, e: CopyError, what: &str) -> Self {
        match e {
            CopyError::Gone => Self::ProcessGone { pid },
            CopyError::Unmapped if is_gone(pid) => Self::ProcessGone { pid },
            CopyError::Unmapped => Self::NoContext { pid },
            CopyError::Os { operation, source } => {
                Self::from_io(pid, format!("{operation} (copying {what})"), source)
            }
        }
    }
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
            let mem = ProcessMemory::new(own_pid(), method);
            let mut out = [0u8; 256];
            mem.read_exact(addr, &mut out).unwrap();
            assert_eq!(&out[..], &data[..], "{method:?}");
        }
    }

    #[test]
    fn a_copy_answers_what_it_holds_whole_and_the_process_the_rest() {
        use crate::thread::tls::TargetMemory;
        let data: Vec<u8> = (0..64).collect();
        let addr = data.as_ptr() as u64;
        // A copy that says something else than the memory now: which one answered shows.
        let copy = [0xaau8; 16];
        let memory = ProcessMemory::new(own_pid(), ReadMethod::Auto);
        let copied = CopiedMemory {
            copies: [(addr + 8, &copy[..])],
            memory: &memory,
        };
        let mut out = [0u8; 8];
        copied.read_exact_at(addr + 16, &mut out).unwrap();
        assert_eq!(out, [0xaa; 8]);
        // Straddling the copy's end, or before it: from the process.
        copied.read_exact_at(addr + 20, &mut out).unwrap();
        assert_eq!(out[..], data[20..28]);
        copied.read_exact_at(addr, &mut out).unwrap();
        assert_eq!(out[..], data[..8]);
        // Past the end of the address space: an error, no panic.
        let at_end = CopiedMemory {
            copies: [(u64::MAX - 4, &copy[..4])],
            memory: &memory,
        };
        assert!(at_end.read_exact_at(u64::MAX - 2, &mut out).is_err());
    }

    #[test]
    fn many_ranges_each_as_alone() {
        // More ranges than one call takes, mapped and not, the unmapped ones first, in
        // the middle, across a call's boundary and last.
        let data: Vec<u8> = (0..=255).cycle().take(3000 * 8).collect();
        let unmapped = [
            0usize,
            700,
            MAX_RANGES_PER_CALL - 1,
            MAX_RANGES_PER_CALL,
            2999,
        ];
        let addrs: Vec<u64> = (0..3000)
            .map(|i| {
                if unmapped.contains(&i) {
                    8 * i as u64
                } else {
                    data.as_ptr() as u64 + 8 * i as u64
                }
            })
            .collect();
        for method in [
            ReadMethod::ProcessVmReadv,
            ReadMethod::ProcMem,
            ReadMethod::Auto,
        ] {
            let mem = ProcessMemory::new(own_pid(), method);
            let mut out = vec![[0u8; 8]; addrs.len()];
            let mut reads: Vec<(u64, &mut [u8])> = addrs
                .iter()
                .zip(out.iter_mut())
                .map(|(&addr, buf)| (addr, &mut buf[..]))
                .collect();
            let results = mem.read_exact_each(&mut reads);
            assert_eq!(results.len(), addrs.len(), "{method:?}");
            for (i, result) in results.iter().enumerate() {
                if unmapped.contains(&i) {
                    assert!(matches!(result, Err(CopyError::Unmapped)), "{method:?} {i}");
                } else {
                    assert!(result.is_ok(), "{method:?} {i}: {result:?}");
                    assert_eq!(&out[i][..], &data[8 * i..8 * i + 8], "{method:?} {i}");
                }
            }
        }
        // Addresses past user space fail the whole call (the kernel checks every range
        // first): each range is then copied alone.
        let mem = ProcessMemory::new(own_pid(), ReadMethod::ProcessVmReadv);
        let (mut a, mut b, mut c) = ([0u8; 16], [0u8; 16], [0u8; 16]);
        let mut reads: Vec<(u64, &mut [u8])> = vec![
            (data.as_ptr() as u64, &mut a[..]),
            (u64::MAX - 8, &mut b[..]),
            (1 << 63, &mut c[..]),
        ];
        let results = mem.read_exact_each(&mut reads);
        assert!(
            matches!(
                results[..],
                [Ok(()), Err(CopyError::Unmapped), Err(CopyError::Unmapped)]
            ),
            "{results:?}"
        );
        assert_eq!(&a[..], &data[..16]);
    }

    #[test]
    fn leading_ranges_up_to_the_first_unmapped() {
        let data: Vec<u8> = (0..=255).collect();
        let at = data.as_ptr() as u64;
        for method in [
            ReadMethod::ProcessVmReadv,
            ReadMethod::ProcMem,
            ReadMethod::Auto,
        ] {
            let mem = ProcessMemory::new(own_pid(), method);
            let (mut a, mut b, mut c, mut d) = ([0u8; 16], [0u8; 16], [0u8; 16], [0u8; 16]);
            let mut reads: Vec<(u64, &mut [u8])> = vec![
                (at + 32, &mut a[..]),
                (at, &mut b[..]),
                (8, &mut c[..]),
                (at + 64, &mut d[..]),
            ];
            assert_eq!(mem.read_leading(&mut reads), 2, "{method:?}");
            assert_eq!(&a[..], &data[32..48], "{method:?}");
            assert_eq!(&b[..], &data[..16], "{method:?}");
            let mut reads: Vec<(u64, &mut [u8])> = vec![(8, &mut a[..]), (at, &mut b[..])];
            assert_eq!(mem.read_leading(&mut reads), 0, "{method:?}");
            assert_eq!(mem.read_leading(&mut []), 0, "{method:?}");
        }
    }

    #[test]
    fn many_leading_ranges_in_one_call() {
        // More ranges than the call keeps on its stack (8): the same copies.
        let data: Vec<u8> = (0..=255).collect();
        let at = data.as_ptr() as u64;
        for count in [7usize, 8, 9, 20] {
            let mut bufs = vec![[0u8; 8]; count];
            let mut reads: Vec<(u64, &mut [u8])> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| (at + (i as u64 * 8) % 256, &mut b[..]))
                .collect();
            let mem = ProcessMemory::new(own_pid(), ReadMethod::ProcessVmReadv);
            assert_eq!(mem.read_leading(&mut reads), count);
            for (i, b) in bufs.iter().enumerate() {
                let from = (i * 8) % 256;
                assert_eq!(&b[..], &data[from..from + 8], "{count} ranges, range {i}");
            }
            // An unmapped range in the middle stops the copy there.
            let mut bufs = vec![[0u8; 8]; count];
            let mut reads: Vec<(u64, &mut [u8])> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| (if i == count - 2 { 8 } else { at }, &mut b[..]))
                .collect();
            assert_eq!(mem.read_leading(&mut reads), count - 2);
        }
    }

    #[test]
    fn unmapped_is_a_clean_error() {
        for method in [ReadMethod::ProcessVmReadv, ReadMethod::ProcMem] {
            let mem = ProcessMemory::new(own_pid(), method);
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
