//! The one reading of `/proc` for the reading side: the process and thread lists, a
//! task's `stat` (its state, flags and start time), its `comm`, and its `status` (tracer,
//! capabilities, ids, `NSpid`). Every other module, and the crates above the reader, ask
//! here: each of these files is parsed in this file only.
//!
//! Everything in `/proc/<pid>/...` is written by the kernel but named by the target: a
//! command name may hold spaces, parentheses and any byte but NUL, so `stat` is parsed
//! from the last `)` on, and nothing here trusts a length or a number it did not check.

use std::fs;
use std::io;

use crate::denied::cap_names;
use crate::error::Error;

pub use crate::denied::Refuser;

/// `CAP_SYS_PTRACE`'s bit in the capability sets.
const CAP_SYS_PTRACE: u32 = 19;

/// The pids in `/proc`, in increasing order.
pub fn pids() -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The thread ids of process `pid` (`/proc/<pid>/task`), in increasing order.
pub fn thread_ids(pid: u32) -> Result<Vec<u32>, Error> {
    let path = format!("/proc/{pid}/task");
    let mut tids: Vec<u32> = fs::read_dir(&path)
        .map_err(|e| Error::from_io(pid, format!("list {path}"), e))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The command name of process `pid` (`/proc/<pid>/comm`, at most 15 bytes).
pub fn comm(pid: u32) -> io::Result<String> {
    read_comm(&format!("/proc/{pid}/comm"))
}

/// The name of thread `tid` of process `pid` (`/proc/<pid>/task/<tid>/comm`); empty when
/// it cannot be read (the thread has exited).
pub fn thread_name(pid: u32, tid: u32) -> String {
    read_comm(&format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default()
}

fn read_comm(path: &str) -> io::Result<String> {
    let mut comm = fs::read_to_string(path)?;
    if comm.ends_with('\n') {
        comm.pop();
    }
    Ok(comm)
}

/// `PF_EXITING` in the flags of a `stat` file: the task is tearing itself down (its
/// memory may already be gone) and is about to become a zombie.
const PF_EXITING: u64 = 0x4;

/// What the reading side takes from a task's `stat` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stat {
    /// The state letter (`R` running or ready, `S` sleeping, `Z` zombie, ...).
    pub state: u8,
    /// The kernel's `PF_*` flags.
    pub flags: u64,
    /// When the task started, in clock ticks since boot (field 22): with the pid, what
    /// tells a process from a later one that reuses its id.
    pub start_time: u64,
}

impl Stat {
    /// Parses a `stat` line: `pid (comm) state ppid ...`. `None` when it is not one.
    pub fn parse(stat: &[u8]) -> Option<Self> {
        // The command name (field 2) may hold anything: fields resume after the last ')',
        // with field 3 (the state).
        let close = stat.iter().rposition(|&b| b == b')')?;
        let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
        let mut fields = rest.split_ascii_whitespace();
        let state = *fields.next()?.as_bytes().first()?;
        // Field 9 (flags) is the 6th after the state; field 22 (starttime) the 13th after.
        let flags = fields.nth(5)?.parse().ok()?;
        let start_time = fields.nth(12)?.parse().ok()?;
        Some(Self {
            state,
            flags,
            start_time,
        })
    }

    /// Running or ready to run (`R`): what a CPU profile samples where the kernel keeps no
    /// scheduler statistics.
    pub const fn is_running(&self) -> bool {
        self.state == b'R'
    }

    /// A zombie, dead, or exiting (`PF_EXITING`).
    pub const fn has_exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x') || self.flags & PF_EXITING != 0
    }

    /// The start time in `CLOCK_BOOTTIME` nanoseconds.
    pub fn start_time_ns(&self) -> u64 {
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        self.start_time.saturating_mul(1_000_000_000 / per_second)
    }
}

/// Process `pid`'s `stat` (its main thread's); `None` when it is gone (or the file lies).
pub fn stat(pid: u32) -> Option<Stat> {
    Stat::parse(&fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// Thread `tid` of process `pid`'s `stat`; `None` when it is gone.
pub fn task_stat(pid: u32, tid: u32) -> Option<Stat> {
    Stat::parse(&fs::read(format!("/proc/{pid}/task/{tid}/stat")).ok()?)
}

/// Thread `tid` of process `pid`'s time on a CPU so far, in nanoseconds (the first field
/// of its `schedstat`); `None` when it is gone, or the kernel keeps no scheduler
/// statistics (`CONFIG_SCHED_INFO`).
pub fn task_cpu_time(pid: u32, tid: u32) -> Option<u64> {
    parse_schedstat(&fs::read(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
}

/// The first field of a `schedstat` file: nanoseconds on a CPU.
pub fn parse_schedstat(bytes: &[u8]) -> Option<u64> {
    parse_schedstat_runs(bytes).map(|(on_cpu_ns, _)| on_cpu_ns)
}

/// The first and third fields of a `schedstat` file: nanoseconds on a CPU, and how many
/// times the thread was given a CPU (its count goes up as it starts running, where the
/// time may only be counted later).
pub fn parse_schedstat_runs(bytes: &[u8]) -> Option<(u64, u64)> {
    let mut fields = bytes.split(u8::is_ascii_whitespace);
    let mut number = || -> Option<u64> { std::str::from_utf8(fields.next()?).ok()?.parse().ok() };
    let on_cpu_ns = number()?;
    // The third field: a kernel without it gives the time alone.
    let runs = number().and_then(|_| number()).unwrap_or(u64::MAX);
    Some((on_cpu_ns, runs))
}

/// Where a thread blocked in a system call was when it entered it, as its
/// `/proc/<pid>/task/<tid>/syscall` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedInSyscall {
    /// The system call's number.
    pub number: u64,
    /// The user stack pointer.
    pub sp: u64,
    /// The user instruction pointer: the instruction after the system call's.
    pub pc: u64,
}

/// Parses a `syscall` file: `None` unless the thread is blocked in a system call (the
/// file says `running`, or `-1` and two numbers for a thread blocked elsewhere, a page
/// fault say), or the text is not the kernel's.
pub fn parse_syscall(bytes: &[u8]) -> Option<BlockedInSyscall> {
    let text = std::str::from_utf8(bytes).ok()?;
    // The number, six arguments, then the stack and instruction pointers.
    let mut fields = [""; 9];
    for (at, field) in text.split_ascii_whitespace().enumerate() {
        *fields.get_mut(at)? = field;
    }
    let [number, _, _, _, _, _, _, sp, pc] = fields;
    let hex = |field: &str| u64::from_str_radix(field.strip_prefix("0x")?, 16).ok();
    Some(BlockedInSyscall {
        number: number.parse().ok()?,
        sp: hex(sp)?,
        pc: hex(pc)?,
    })
}

/// Thread `tid`'s `stat`, whatever its process (`/proc/<tid>/stat` names any thread).
pub(crate) fn any_task_stat(tid: u32) -> Option<Stat> {
    stat(tid)
}

/// Process `pid`'s start time (`/proc/<pid>/stat` field 22, in clock ticks since boot);
/// `None` when it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// A task's `status` file, as text: `Name:\tvalue` lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    text: String,
}

impl Status {
    /// Wraps the text of a `status` file.
    pub fn parse(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }

    /// The value of field `name` (without its colon), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim())
        })
    }

    /// A capability set (`CapEff`, `CapPrm`, ...) as its bits.
    pub fn capabilities(&self, name: &str) -> Option<u64> {
        u64::from_str_radix(self.field(name)?, 16).ok()
    }

    /// The real user id (the first of `Uid:`).
    pub fn real_uid(&self) -> Option<u32> {
        self.field("Uid")?
            .split_ascii_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// The process id of the tracer holding the task (`TracerPid:`), if one does.
    pub fn tracer_pid(&self) -> Option<u32> {
        self.field("TracerPid")?
            .parse()
            .ok()
            .filter(|&pid| pid != 0)
    }

    /// The task's id in its own pid namespace: the last of `NSpid:` (the innermost
    /// namespace), or `None` when the kernel shows no `NSpid` line.
    pub fn ns_pid(&self) -> Option<u32> {
        self.field("NSpid")?
            .split_ascii_whitespace()
            .last()?
            .parse()
            .ok()
    }
}

/// The most of a `status` file read: the kernel writes a few KiB.
const MAX_STATUS: u64 = 64 * 1024;

/// Process `pid`'s `status` (or the calling process's, for `"self"`).
pub fn status(pid: &str) -> io::Result<Status> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(format!("/proc/{pid}/status"))?
        .take(MAX_STATUS)
        .read_to_string(&mut text)?;
    Ok(Status::parse(text))
}

/// Works out what refused this reader access to process `pid`, from `/proc` (its
/// `status` and `uid_map`, readable by anyone) and Yama's setting.
pub fn diagnose(pid: u32) -> Refuser {
    let own = status("self").unwrap_or_default();
    let theirs = status(&pid.to_string()).unwrap_or_default();
    let own_effective = own.capabilities("CapEff").unwrap_or(0);
    let has_ptrace = own_effective & (1 << CAP_SYS_PTRACE) != 0;
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok())
        .unwrap_or(0);
    if yama >= 3 || (yama >= 1 && !has_ptrace) {
        return Refuser::Yama(yama);
    }
    // The uid map of a process is shown relative to the reader's own user namespace:
    // another one than the reader's own shows another map.
    let same_user_ns = match (
        std::fs::read_to_string("/proc/self/uid_map"),
        std::fs::read_to_string(format!("/proc/{pid}/uid_map")),
    ) {
        (Ok(own_map), Ok(their_map)) => own_map == their_map,
        _ => true,
    };
    if !same_user_ns {
        return Refuser::OtherUserNamespace;
    }
    if has_ptrace {
        let modules = std::fs::read_to_string("/sys/kernel/security/lsm")
            .ok()
            .map(|s| s.trim().replace(',', ", "))
            .filter(|s| !s.is_empty());
        return Refuser::SecurityModule(modules);
    }
    let own_uid = rustix::process::getuid().as_raw();
    if theirs.real_uid().is_some_and(|uid| uid != own_uid) {
        return Refuser::OtherUser;
    }
    let extra = theirs.capabilities("CapPrm").unwrap_or(0) & !own_effective;
    if extra != 0 {
        return Refuser::MoreCapabilities(cap_names(extra));
    }
    // Same uid, no capability missing: a process that is not dumpable has its /proc
    // entries owned by root instead of its own user.
    Refuser::NotDumpable
}

/// The error of a system call on process `pid`, told apart by what `/proc` shows.
impl Error {
    /// Turns a system call's error into [`Error::PermissionDenied`],
    /// [`Error::ProcessGone`] or [`Error::Io`].
    pub fn from_io(pid: u32, operation: impl Into<String>, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => Self::PermissionDenied {
                pid,
                operation: operation.into(),
                source,
                refuser: diagnose(pid),
            },
            Some(libc::ESRCH | libc::ENOENT) => Self::ProcessGone { pid },
            _ => Self::Io {
                pid,
                operation: operation.into(),
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_the_time_on_a_cpu() {
        assert_eq!(
            parse_schedstat(b"1310646444 4309598838 2809\n"),
            Some(1310646444)
        );
        assert_eq!(parse_schedstat(b"0 0 0\n"), Some(0));
        for lying in [
            &b""[..],
            b"\n",
            b"-1 2 3",
            b"12x 3 4",
            b"99999999999999999999999 1 1",
        ] {
            assert_eq!(parse_schedstat(lying), None, "{lying:?}");
        }
        let me = std::process::id();
        assert!(task_cpu_time(me, me).is_some_and(|ns| ns > 0));
        assert_eq!(
            parse_schedstat_runs(b"1310646444 4309598838 2809\n"),
            Some((1310646444, 2809))
        );
        assert_eq!(parse_schedstat_runs(b"12"), Some((12, u64::MAX)));
        assert_eq!(parse_schedstat_runs(b"12 3 x"), Some((12, u64::MAX)));
    }

    #[test]
    fn syscall_files_say_where_a_blocked_thread_is() {
        let blocked = b"230 0x0 0x0 0x7ffdfc7cc230 0x7ffdfc7cc270 0x0 0x0 0x7ffdfc7cc218 \
                        0x7f9870099503\n";
        assert_eq!(
            parse_syscall(blocked),
            Some(BlockedInSyscall {
                number: 230,
                sp: 0x7ffdfc7cc218,
                pc: 0x7f9870099503
            })
        );
        for not_blocked in [
            &b"running\n"[..],
            b"-1 0x7ffdfc7cc218 0x7f9870099503\n",
            b"",
            b"230 0x0 0x0 0x0 0x0 0x0 0x0 0x1\n",
            b"230 0x0 0x0 0x0 0x0 0x0 0x0 0x1 0x2 0x3\n",
            b"230 0x0 0x0 0x0 0x0 0x0 0x0 0x1 2\n",
            b"230 0x0 0x0 0x0 0x0 0x0 0x0 0x1 0x10000000000000000\n",
            b"\xff 0x0\n",
        ] {
            assert_eq!(parse_syscall(not_blocked), None, "{not_blocked:?}");
        }
    }

    #[test]
    fn stat_lines_whatever_the_command_name() {
        let fields = "1 2 3 4 5 64 7 8 9 10 11 12 13 14 15 16 17 18 424242 19";
        let line = format!("77 (a) R 1 2 (b)) S {fields}\n");
        // The state after the *last* ')'.
        let stat = Stat::parse(line.as_bytes()).expect("a stat line");
        assert_eq!(stat.state, b'S');
        assert_eq!(stat.flags, 64);
        assert_eq!(stat.start_time, 424242);
        assert!(!stat.is_running() && !stat.has_exited());
        assert_eq!(Stat::parse(b"77 (short) S 1 2"), None);
        assert_eq!(Stat::parse(b"no parenthesis"), None);
        assert_eq!(Stat::parse(&[0xff, b')', b' ', 0xfe]), None);
        let exiting = format!("1 (x) R 0 0 0 0 0 4 {}", "0 ".repeat(14));
        assert!(Stat::parse(exiting.as_bytes()).unwrap().has_exited());
        let own = super::stat(std::process::id()).expect("own stat");
        assert!(own.start_time > 0 && own.start_time_ns() > 0);
        assert_eq!(start_time(std::process::id()), Some(own.start_time));
    }

    #[test]
    fn status_fields() {
        let status = Status::parse(
            "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nTracerPid:\t0\n\
             NSpid:\t4242\t7\nCapEff:\t000001ffffffffff\n",
        );
        assert_eq!(status.field("Name"), Some("python3"));
        assert_eq!(status.real_uid(), Some(1000));
        assert_eq!(status.tracer_pid(), None);
        assert_eq!(status.ns_pid(), Some(7));
        assert_eq!(status.capabilities("CapEff"), Some(0x1ff_ffff_ffff));
        assert_eq!(status.field("Nope"), None);
        let own = super::status(&std::process::id().to_string()).expect("own status");
        assert_eq!(own.ns_pid(), Some(std::process::id()));
        assert_eq!(
            comm(std::process::id()).ok(),
            Some(own.field("Name").unwrap().into())
        );
    }
    #[test]
    fn own_process_is_not_refused_for_want_of_a_namespace() {
        // The reader and itself share every namespace: whatever the diagnosis of this
        // process, it is never another user namespace.
        assert_ne!(diagnose(std::process::id()), Refuser::OtherUserNamespace);
    }
}
