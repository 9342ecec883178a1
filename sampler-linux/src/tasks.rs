//! The files a ptrace profile reads at every round, kept open from round to round: each
//! followed process's thread list, and its threads' `schedstat` and `syscall`. Their
//! text is parsed by the reader's `procfs`.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::fs::File;
use std::os::unix::fs::FileExt;

use otel_ctx_reader::procfs::{self, parse_schedstat_runs, parse_syscall, BlockedInSyscall};
use otel_ctx_reader::Error;
use rustix::fs::{Mode, OFlags};

/// The most `schedstat` files one [`TaskFiles`] keeps open; the threads past it have
/// theirs opened at each reading.
pub const MAX_OPEN_SCHEDSTAT: usize = 256;

/// Process `pid`'s list of threads and its threads' `schedstat`, kept open and read
/// again at each call: for a reader that asks many times a second (a ptrace profile's
/// rounds), each reading is a `pread` instead of a path lookup, an open, a read and a
/// close, and the list is not read again while it cannot have changed. What each call
/// says is what [`procfs::thread_ids`] and [`procfs::task_cpu_time`] say: a file that no longer reads
/// (its thread or process gone) is closed, and the path is opened again.
///
/// The list is read again unless every thread of the last one was seen alive since
/// (its `schedstat` read, or [`seen_alive`](Self::seen_alive)) and the process still
/// has as many threads (the link count of `/proc/<pid>/task`, one `fstat`): then no
/// thread can have left it, nor joined it.
#[derive(Debug)]
pub struct TaskFiles {
    pid: u32,
    task: Option<rustix::fs::Dir>,
    schedstat: HashMap<u32, File>,
    /// The threads' `syscall`, opened at their first reading.
    syscall: HashMap<u32, File>,
    /// The last list read, and the link count of the directory when it was.
    listed: Vec<u32>,
    links: u64,
    /// The threads seen alive since the list was last handed out.
    alive: HashSet<u32>,
}

impl TaskFiles {
    /// Process `pid`'s files, none opened yet.
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            task: None,
            schedstat: HashMap::new(),
            syscall: HashMap::new(),
            listed: Vec::new(),
            links: 0,
            alive: HashSet::new(),
        }
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// Notes that thread `tid` was seen alive (sampled), for the next
    /// [`thread_ids`](Self::thread_ids).
    pub fn seen_alive(&mut self, tid: u32) {
        self.alive.insert(tid);
    }

    /// The thread ids of the process, in increasing order, as [`procfs::thread_ids`].
    pub fn thread_ids(&mut self) -> Result<Vec<u32>, Error> {
        let all_alive = !self.listed.is_empty()
            && self.listed.len() == self.alive.len()
            && self.listed.iter().all(|tid| self.alive.contains(tid));
        self.alive.clear();
        let links = self
            .task
            .as_ref()
            .and_then(|dir| rustix::fs::fstat(dir.fd().ok()?).ok())
            .map(|stat| links_of(&stat));
        if all_alive && links == Some(self.links) {
            return Ok(self.listed.clone());
        }
        // The count from before the list: a thread that comes or goes while it is read
        // changes the count from this one.
        let tids = self.list()?;
        self.listed.clone_from(&tids);
        self.links = links.unwrap_or(u64::MAX);
        Ok(tids)
    }

    /// The thread ids, read from the directory.
    fn list(&mut self) -> Result<Vec<u32>, Error> {
        if let Some(dir) = &mut self.task {
            dir.rewind();
            let mut tids = Vec::new();
            let mut failed = false;
            while let Some(entry) = dir.read() {
                let Ok(entry) = entry else {
                    failed = true;
                    break;
                };
                if let Some(tid) = entry.file_name().to_str().ok().and_then(|s| s.parse().ok()) {
                    tids.push(tid);
                }
            }
            // A process gone lists no threads: the path says whether another took its
            // pid.
            if !failed && !tids.is_empty() {
                tids.sort_unstable();
                return Ok(tids);
            }
            self.task = None;
        }
        let tids = procfs::thread_ids(self.pid)?;
        let path = format!("/proc/{}/task", self.pid);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        self.task = rustix::fs::open(path, flags, Mode::empty())
            .ok()
            .and_then(|fd| rustix::fs::Dir::new(fd).ok());
        Ok(tids)
    }

    /// Thread `tid`'s time on a CPU so far, in nanoseconds, as
    /// [`procfs::task_cpu_time`].
    pub fn cpu_time(&mut self, tid: u32) -> Option<u64> {
        self.cpu_runs(tid).map(|(on_cpu_ns, _)| on_cpu_ns)
    }

    /// Thread `tid`'s time on a CPU so far, in nanoseconds, and how many times it was
    /// given a CPU (`u64::MAX` when the kernel does not say), as
    /// [`procfs::parse_schedstat_runs`].
    pub fn cpu_runs(&mut self, tid: u32) -> Option<(u64, u64)> {
        if let Some(file) = self.schedstat.get(&tid) {
            if let Some(read) = read_schedstat(file) {
                self.alive.insert(tid);
                return Some(read);
            }
            self.schedstat.remove(&tid);
        }
        let file = File::open(format!("/proc/{}/task/{tid}/schedstat", self.pid)).ok()?;
        let read = read_schedstat(&file)?;
        if self.schedstat.len() < MAX_OPEN_SCHEDSTAT {
            self.schedstat.insert(tid, file);
        }
        self.alive.insert(tid);
        Some(read)
    }

    /// Where thread `tid` is blocked in a system call, if it is (its `syscall`, as
    /// [`procfs::parse_syscall`]). Reading it needs the right to trace the thread.
    pub fn blocked_in_syscall(&mut self, tid: u32) -> Option<BlockedInSyscall> {
        let mut bytes = [0u8; 256];
        if let Some(file) = self.syscall.get(&tid) {
            match file.read_at(&mut bytes, 0) {
                Ok(n) => return parse_syscall(bytes.get(..n)?),
                Err(_) => self.syscall.remove(&tid),
            };
        }
        let file = File::open(format!("/proc/{}/task/{tid}/syscall", self.pid)).ok()?;
        let n = file.read_at(&mut bytes, 0).ok()?;
        if self.syscall.len() < MAX_OPEN_SCHEDSTAT {
            self.syscall.insert(tid, file);
        }
        parse_syscall(bytes.get(..n)?)
    }

    /// Closes the files of every thread for which `keep` is false.
    pub fn retain_threads(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.schedstat.retain(|&tid, _| keep(tid));
        self.syscall.retain(|&tid, _| keep(tid));
    }

    /// How many `schedstat` files are open.
    pub fn open_schedstats(&self) -> usize {
        self.schedstat.len()
    }
}

/// The link count of a file (`st_nlink` is 32 bits wide on some architectures).
#[allow(clippy::unnecessary_cast)]
fn links_of(stat: &rustix::fs::Stat) -> u64 {
    stat.st_nlink as u64
}

/// The time on a CPU and the runs an open `schedstat` says, read from its start.
fn read_schedstat(file: &File) -> Option<(u64, u64)> {
    // Three numbers of at most 20 digits each.
    let mut bytes = [0u8; 128];
    let n = file.read_at(&mut bytes, 0).ok()?;
    parse_schedstat_runs(bytes.get(..n)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that says its id and waits for the sender to send or go.
    fn parked_thread() -> (
        u32,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            started_tx
                .send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let _ = rx.recv();
        });
        (started_rx.recv().unwrap(), tx, thread)
    }

    #[test]
    fn kept_files_read_what_the_paths_do() {
        // The thread list is this process's, and the other tests of this binary start
        // and end threads in it while it runs: the test runs again in a process of its
        // own, where the only threads are the ones it makes.
        const ALONE: &str = "OTEL_CTX_TASKS_TEST_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tasks::tests::kept_files_read_what_the_paths_do"])
                .args(["--test-threads=1", "--nocapture"])
                .env(ALONE, "1")
                .status()
                .unwrap();
            assert!(status.success(), "{status}");
            return;
        }
        let mut files = TaskFiles::new(std::process::id());
        let (tid, tx, thread) = parked_thread();
        let here = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        for _ in 0..3 {
            let listed = files.thread_ids().unwrap();
            assert!(
                listed.contains(&here) && listed.contains(&tid),
                "{listed:?}"
            );
            assert!(listed.windows(2).all(|w| w[0] < w[1]), "{listed:?}");
            let before = files.cpu_time(here).unwrap();
            // Work on a CPU until the kernel counts it: the kept file reads the time
            // again, not its first value (however slowly this CPU is given).
            let spin = std::time::Instant::now();
            loop {
                let now = files.cpu_time(here).unwrap();
                assert!(now >= before, "{before} then {now}");
                if now > before {
                    break;
                }
                assert!(spin.elapsed().as_secs() < 10, "the time stays {before}");
            }
            assert!(files.cpu_time(tid).is_some());
            // The parked thread waits in a system call (the channel's futex); this one
            // is seen in the system call that reads the file.
            let blocked = files.blocked_in_syscall(tid).expect("blocked");
            assert_eq!(blocked.number, libc::SYS_futex as u64, "{blocked:?}");
            assert!(blocked.sp != 0 && blocked.pc != 0, "{blocked:?}");
            let reading = files.blocked_in_syscall(here).map(|b| b.number);
            assert_eq!(reading, Some(libc::SYS_pread64 as u64));
            let (_, runs) = files.cpu_runs(tid).unwrap();
            assert_eq!(files.cpu_runs(tid).unwrap().1, runs);
        }
        assert_eq!(files.open_schedstats(), 2);
        tx.send(()).unwrap();
        thread.join().unwrap();
        // The thread gone (a joined thread may be in its exit a little longer): the list
        // leaves it out, and its kept file no longer reads.
        let joined = std::time::Instant::now();
        while files.thread_ids().unwrap().contains(&tid) {
            assert!(joined.elapsed().as_secs() < 10, "thread {tid} never went");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(files.cpu_time(tid), None);
        assert_eq!(files.open_schedstats(), 1);
        files.retain_threads(|t| t != here);
        assert_eq!(files.open_schedstats(), 0);
        // Every listed thread seen alive: a thread that joins since is listed all the same.
        let listed = files.thread_ids().unwrap();
        for &tid in &listed {
            files.seen_alive(tid);
        }
        let (joined, tx, thread) = parked_thread();
        let now = files.thread_ids().unwrap();
        assert!(now.contains(&joined), "{now:?}");
        for &tid in &now {
            files.seen_alive(tid);
        }
        assert_eq!(files.thread_ids().unwrap(), now);
        tx.send(()).unwrap();
        thread.join().unwrap();
        assert!(TaskFiles::new(u32::MAX).thread_ids().is_err());
        assert_eq!(TaskFiles::new(u32::MAX).cpu_time(1), None);
    }
}
