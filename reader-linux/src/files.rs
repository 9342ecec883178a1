//! Opening and reading the files a target maps, which are hostile input: the target
//! controls the paths `/proc/<pid>/maps` shows, and may have replaced a mapped file
//! with a FIFO (an open would block), a device (an open can have side effects), a
//! symlink that points out of its root (which a plain open resolves against the
//! reader's root, not the target's), or a sparse file whose headers claim gigabytes.
//!
//! [`open_mapped`] opens a [`MappedFile`] so that none of that reaches the reader:
//!
//! 1. By path, relative to the target's root (`/proc/<pid>/root`) with
//!    [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html),
//!    `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: absolute symlinks resolve inside the
//!    target's root, and no `/proc` magic link is followed. The open is `O_PATH`, which
//!    never blocks and opens no device.
//! 2. `fstat` of that descriptor: the file is used only when it is a regular file whose
//!    device and inode are the mapping's. It is then opened for reading through the
//!    descriptor itself (`/proc/self/fd/<n>`), so the file read is the file checked.
//! 3. Otherwise, the mapping itself: `/proc/<pid>/map_files/<start>-<end>` (it needs
//!    `CAP_SYS_ADMIN` or `CAP_CHECKPOINT_RESTORE`), with the same `O_PATH` open and the
//!    same checks.
//! 4. Otherwise the file is refused, with both reasons ([`OpenError`]).
//!
//! Kernels older than 5.6 have no `openat2`: there the path is walked one component at
//! a time with `O_PATH | O_NOFOLLOW`, and a symlink anywhere on it refuses the path
//! (map_files may still give the file). That is the safest equivalent without the
//! kernel resolving inside the root: a symlink cannot be followed safely in user space
//! while the target can change it.
//!
//! The files a target names without mapping them (a separate debug file, a perf map in
//! its `/tmp`) are opened by [`open_in`], in the target's root or the host's: the same
//! `O_PATH` open resolved inside the root, the same `fstat`, without a mapping's device
//! and inode to compare.
//!
//! Reading is bounded too: [`BudgetedFile`] gives a parser at most
//! [`FileBudget::max_bytes`] bytes and [`FileBudget::max_time`] of reading per file, and
//! reads with `pread`, never `mmap` (a file truncated under a mapping would kill the
//! reader with `SIGBUS`); [`BudgetedReader`] streams one under the same bounds.

use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::maps::MappedFile;

/// What stands at a path, or at a mapping, when it is not the mapped file.
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// Something other than a regular file, such as `"a FIFO"` or `"a character
    /// device"`.
    NotRegular(&'static str),
    /// A regular file, but not the one mapped (other device or inode): the path was
    /// replaced since the mapping was made.
    OtherFile,
    /// Nothing (the file was removed, or the path leads nowhere inside the target's
    /// root).
    Missing,
    /// A symlink on the path, on a kernel without `openat2` to resolve it inside the
    /// target's root.
    Symlink,
    /// The kernel refused the open.
    Denied(io::Error),
    /// Another failure.
    Os(io::Error),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRegular(kind) => write!(f, "is {kind}, not the mapped file"),
            Self::OtherFile => f.write_str("is another file than the one mapped (replaced)"),
            Self::Missing => f.write_str("no longer exists"),
            Self::Symlink => f.write_str(
                "goes through a symlink, which this kernel (no openat2) cannot resolve inside \
                 the target's root",
            ),
            Self::Denied(e) => write!(f, "was refused ({e})"),
            Self::Os(e) => write!(f, "could not be opened ({e})"),
        }
    }
}

/// Why a mapped file was not opened: what its path led to, and what its mapping in
/// `/proc/<pid>/map_files` did.
#[derive(Debug)]
pub struct OpenError {
    /// The path under the target's root.
    pub by_path: Refusal,
    /// The mapping's `map_files` entry.
    pub by_map_files: Refusal,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.by_path, &self.by_map_files) {
            // The mapping itself is of a device (or another special file): whatever its
            // path says, there is no ELF file to read.
            (_, Refusal::NotRegular(kind)) => {
                write!(f, "the mapped file itself is {kind}, not a regular file")
            }
            (path, Refusal::Denied(_)) => write!(
                f,
                "its path {path}, and /proc/<pid>/map_files, which holds the mapped file \
                 itself, needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE"
            ),
            (path, other) => write!(
                f,
                "its path {path}, and its /proc/<pid>/map_files entry {other}"
            ),
        }
    }
}

impl std::error::Error for OpenError {}

/// How a mapped file was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenedVia {
    /// Its path, inside the target's root.
    Path,
    /// `/proc/<pid>/map_files`: the path no longer led to it.
    MapFiles,
}

/// A mapped file, opened for reading and checked to be the file mapped.
#[derive(Debug)]
pub struct TargetFile {
    /// Open for reading.
    pub file: File,
    /// Its size in bytes (`st_size`); sparse files may claim any.
    pub size: u64,
    /// How it was reached.
    pub via: OpenedVia,
}

/// The `/proc` directory that speaks for process `pid`: its own, or a live thread's
/// once the main thread has exited (its `root` and `map_files` are gone with it).
pub(crate) fn proc_dir(pid: u32) -> String {
    match crate::memory::live_thread(pid) {
        Some(tid) if tid != pid => format!("/proc/{pid}/task/{tid}"),
        _ => format!("/proc/{pid}"),
    }
}

/// Opens the file behind `file`, one of process `pid`'s mappings, by the rules of this
/// module: never blocking, never opening anything but the regular file mapped.
pub fn open_mapped(pid: u32, file: &MappedFile) -> Result<TargetFile, OpenError> {
    let dir = proc_dir(pid);
    let by_path = match open_in_process_root(&dir, &file.path) {
        Ok(fd) => match checked(fd, file) {
            Ok(opened) => {
                return Ok(TargetFile {
                    via: OpenedVia::Path,
                    ..opened
                })
            }
            Err(refusal) => refusal,
        },
        Err(refusal) => refusal,
    };
    let by_map_files = match file.ranges.first() {
        None => Refusal::Missing,
        Some(range) => {
            let entry = format!("{dir}/map_files/{:x}-{:x}", range.start, range.end);
            match rustix::fs::open(
                entry.as_str(),
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => match checked(fd, file) {
                    Ok(opened) => {
                        return Ok(TargetFile {
                            via: OpenedVia::MapFiles,
                            ..opened
                        })
                    }
                    Err(refusal) => refusal,
                },
                Err(e) => refusal_of(e),
            }
        }
    };
    Err(OpenError {
        by_path,
        by_map_files,
    })
}

/// The file system a path is resolved in, for the files a target names without mapping
/// them ([`open_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// The root of process `pid` (`/proc/<pid>/root`): what a process in a container
    /// sees as `/`.
    Target(u32),
    /// This process's own root.
    Host,
}

impl fmt::Display for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Target(_) => f.write_str("the target's root"),
            Self::Host => f.write_str("the host's root"),
        }
    }
}

/// Opens the regular file at `path` inside `root` for reading, by the rules of this
/// module: an `O_PATH` open (which never blocks and opens no device) resolved inside the
/// root (`openat2`, `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`), `fstat` to check that
/// it is a regular file (a FIFO, a device or a directory is refused), then a reopen for
/// reading through the checked descriptor. For the files a target names without mapping
/// them: separate debug files, perf maps. Read them under a [`FileBudget`] as any other.
pub fn open_in(root: Root, path: &str) -> Result<TargetFile, Refusal> {
    let dir = match root {
        Root::Target(pid) => format!("{}/root", proc_dir(pid)),
        Root::Host => "/".to_owned(),
    };
    let fd = open_in_root(&dir, path)?;
    regular(fd, |_| true)
}

fn refusal_of(e: rustix::io::Errno) -> Refusal {
    match e {
        rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::SRCH => {
            Refusal::Missing
        }
        rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => Refusal::Denied(e.into()),
        rustix::io::Errno::LOOP => Refusal::Symlink,
        e => Refusal::Os(e.into()),
    }
}

/// `O_PATH` descriptor of `path` resolved inside the root of the process whose `/proc`
/// directory is `dir`.
fn open_in_process_root(dir: &str, path: &str) -> Result<OwnedFd, Refusal> {
    open_in_root(&format!("{dir}/root"), path)
}

/// `O_PATH` descriptor of `path` resolved inside the directory `root`.
fn open_in_root(root: &str, path: &str) -> Result<OwnedFd, Refusal> {
    let root = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(refusal_of)?;
    let relative = path.trim_start_matches('/');
    match rustix::fs::openat2(
        &root,
        relative,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => walk_without_symlinks(root, relative),
        other => other.map_err(refusal_of),
    }
}

/// Without `openat2`: one `O_PATH | O_NOFOLLOW` open per component, from the target's
/// root; a symlink (or `..`) anywhere refuses the path.
fn walk_without_symlinks(root: OwnedFd, relative: &str) -> Result<OwnedFd, Refusal> {
    let mut current = root;
    for component in relative.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if component == ".." {
            return Err(Refusal::Symlink);
        }
        let next = rustix::fs::openat(
            &current,
            component,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(refusal_of)?;
        let stat = rustix::fs::fstat(&next).map_err(|e| Refusal::Os(e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
            return Err(Refusal::Symlink);
        }
        current = next;
    }
    Ok(current)
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        _ => "not a regular file",
    }
}

/// Checks that the `O_PATH` descriptor `fd` is the regular file `file` maps, then opens
/// it for reading through the descriptor itself.
fn checked(fd: OwnedFd, file: &MappedFile) -> Result<TargetFile, Refusal> {
    regular(fd, |stat| {
        stat.st_dev == file.dev && stat.st_ino == file.inode
    })
}

/// Checks that the `O_PATH` descriptor `fd` is a regular file that `identity` accepts,
/// then opens it for reading through the descriptor itself.
fn regular(
    fd: OwnedFd,
    identity: impl Fn(&rustix::fs::Stat) -> bool,
) -> Result<TargetFile, Refusal> {
    let stat = rustix::fs::fstat(&fd).map_err(|e| Refusal::Os(e.into()))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(Refusal::NotRegular(kind_name(kind)));
    }
    if !identity(&stat) {
        return Err(Refusal::OtherFile);
    }
    // The descriptor names the checked inode: reopening it through /proc/self/fd opens
    // that inode, whatever its path names now. A regular file: O_NONBLOCK only guards
    // against a mandatory lock.
    let reopened = rustix::fs::open(
        format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()).as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(refusal_of)?;
    Ok(TargetFile {
        file: File::from(reopened),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        via: OpenedVia::Path,
    })
}

/// What reading one target file may cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileBudget {
    /// Bytes read from the file, at most. Default 64 MiB: the symbol tables and
    /// relocations of the largest shared libraries fit many times over.
    pub max_bytes: u64,
    /// Time spent reading, at most. Default 1 s.
    pub max_time: Duration,
}

impl Default for FileBudget {
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            max_time: Duration::from_secs(1),
        }
    }
}

impl FileBudget {
    /// Sets [`max_bytes`](Self::max_bytes).
    #[must_use]
    pub const fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }

    /// Sets [`max_time`](Self::max_time).
    #[must_use]
    pub const fn with_max_time(mut self, max: Duration) -> Self {
        self.max_time = max;
        self
    }
}

/// Which bound of a [`FileBudget`] a read ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// More bytes than `max_bytes`.
    Bytes(u64),
    /// Longer than `max_time`.
    Time(Duration),
    /// More than what all the files of one process may cost together.
    Total(u64),
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bytes(max) => write!(
                f,
                "its tables claim more than the {} MiB a file may cost",
                max >> 20
            ),
            Self::Time(max) => write!(
                f,
                "reading it took longer than the {} ms a file may take",
                max.as_millis()
            ),
            Self::Total(max) => write!(
                f,
                "the {} MiB that all the process's files may cost together are spent",
                max >> 20
            ),
        }
    }
}

/// What is left of a [`FileBudget`] while a file is read.
#[derive(Debug)]
struct Spending {
    budget: FileBudget,
    remaining: Cell<u64>,
    deadline: Instant,
    exceeded: Cell<Option<Exceeded>>,
    /// The OS error of the first read that failed (not the end of the file).
    read_error: Cell<Option<i32>>,
}

impl Spending {
    fn new(budget: FileBudget) -> Self {
        Self {
            budget,
            remaining: Cell::new(budget.max_bytes),
            deadline: Instant::now() + budget.max_time,
            exceeded: Cell::new(None),
            read_error: Cell::new(None),
        }
    }

    fn failed(&self, e: &io::Error) {
        if self.read_error.get().is_none() {
            self.read_error
                .set(Some(e.raw_os_error().unwrap_or(libc::EIO)));
        }
    }

    /// Takes `bytes` from the budget, or records that it ran out.
    fn charge(&self, bytes: u64) -> Result<(), ()> {
        if self.exceeded.get().is_some() {
            return Err(());
        }
        match self.remaining.get().checked_sub(bytes) {
            Some(left) => self.remaining.set(left),
            None => {
                self.exceeded
                    .set(Some(Exceeded::Bytes(self.budget.max_bytes)));
                return Err(());
            }
        }
        self.check_time()
    }

    fn check_time(&self) -> Result<(), ()> {
        if Instant::now() > self.deadline {
            self.exceeded
                .set(Some(Exceeded::Time(self.budget.max_time)));
            return Err(());
        }
        Ok(())
    }
}

/// The file under an `object::ReadCache`: `pread` at a position, never `mmap` (a file
/// truncated under a mapping would kill the reader with `SIGBUS`; here it only makes
/// a read fail), and every read checks the deadline.
#[derive(Debug)]
struct Pread {
    file: File,
    size: u64,
    position: u64,
    spending: Rc<Spending>,
}

impl object::ReadCacheOps for Pread {
    fn len(&mut self) -> Result<u64, ()> {
        Ok(self.size)
    }

    fn seek(&mut self, pos: u64) -> Result<u64, ()> {
        self.position = pos;
        Ok(pos)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        self.spending.check_time()?;
        loop {
            match self.file.read_at(buf, self.position) {
                Ok(n) => {
                    self.position += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.spending.failed(&e);
                    return Err(());
                }
            }
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ()> {
        self.spending.check_time()?;
        self.file.read_exact_at(buf, self.position).map_err(|e| {
            // A file shorter than its headers say ends early: that is malformed, not a
            // failed read.
            if e.kind() != io::ErrorKind::UnexpectedEof {
                self.spending.failed(&e);
            }
        })?;
        self.position += buf.len() as u64;
        Ok(())
    }
}

/// A target file to parse under a [`FileBudget`]: hand [`read`](Self::read) to an
/// `object` parser, then ask [`exceeded`](Self::exceeded) whether a failure was the
/// budget's.
#[derive(Debug)]
pub struct BudgetedFile {
    cache: object::ReadCache<Pread>,
    spending: Rc<Spending>,
}

impl BudgetedFile {
    /// `file` of `size` bytes, read under `budget` from now on.
    pub fn new(file: File, size: u64, budget: FileBudget) -> Self {
        let spending = Rc::new(Spending::new(budget));
        let pread = Pread {
            file,
            size,
            position: 0,
            spending: spending.clone(),
        };
        Self {
            cache: object::ReadCache::new(pread),
            spending,
        }
    }

    /// The file as `object` reads it: each range is charged to the budget before it is
    /// allocated or read, so a header that claims a 50 GiB table costs nothing.
    pub fn read(&self) -> BoundedRead<'_> {
        BoundedRead {
            cache: &self.cache,
            spending: &self.spending,
        }
    }

    /// Which bound the reads ran into, if one did.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.spending.exceeded.get()
    }

    /// The error of the first read the kernel failed, if one did: a parse that failed
    /// then says nothing about the file.
    pub fn read_error(&self) -> Option<io::Error> {
        self.spending
            .read_error
            .get()
            .map(io::Error::from_raw_os_error)
    }

    /// Bytes read (charged) so far.
    pub fn bytes_read(&self) -> u64 {
        self.spending.budget.max_bytes - self.spending.remaining.get()
    }
}

/// The reads of a [`BudgetedFile`], for `object`'s parsers.
#[derive(Clone, Copy, Debug)]
pub struct BoundedRead<'a> {
    cache: &'a object::ReadCache<Pread>,
    spending: &'a Spending,
}

impl<'a> object::ReadRef<'a> for BoundedRead<'a> {
    fn len(self) -> Result<u64, ()> {
        self.cache.len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        self.spending.charge(size)?;
        self.cache.read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(
        self,
        range: std::ops::Range<u64>,
        delimiter: u8,
    ) -> Result<&'a [u8], ()> {
        self.spending.check_time()?;
        let bytes = self.cache.read_bytes_at_until(range, delimiter)?;
        self.spending.charge(bytes.len() as u64)?;
        Ok(bytes)
    }
}

/// A target file read in order under a [`FileBudget`], with `pread`: for what is read
/// as a stream rather than parsed in place, such as a perf map's lines or the checksum
/// of a whole debug file. A read past the budget fails with the bound it ran into
/// ([`exceeded`](Self::exceeded)); nothing is kept but the caller's buffer.
#[derive(Debug)]
pub struct BudgetedReader {
    file: File,
    position: u64,
    spending: Spending,
}

impl BudgetedReader {
    /// `file`, read from `offset` on under `budget` from now on.
    pub fn new(file: File, offset: u64, budget: FileBudget) -> Self {
        Self {
            file,
            position: offset,
            spending: Spending::new(budget),
        }
    }

    /// Which bound the reads ran into, if one did.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.spending.exceeded.get()
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.spending.budget.max_bytes - self.spending.remaining.get()
    }
}

impl io::Read for BudgetedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let budget_error = |s: &Spending| {
            io::Error::other(
                s.exceeded
                    .get()
                    .map_or_else(|| "over budget".to_owned(), |e| e.to_string()),
            )
        };
        if buf.is_empty() {
            return Ok(0);
        }
        self.spending
            .check_time()
            .map_err(|()| budget_error(&self.spending))?;
        // One byte past what is left tells the end of the file from a file that goes on.
        let left = self.spending.remaining.get();
        let want = buf
            .len()
            .min(usize::try_from(left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = loop {
            match self.file.read_at(&mut buf[..want], self.position) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        self.spending
            .charge(n as u64)
            .map_err(|()| budget_error(&self.spending))?;
        self.position += n as u64;
        Ok(n)
    }
}
