//! The reader when things go wrong around it: a target killed or exiting mid-read,
//! threads exiting while they are read, another tracer, a reader killed while it holds a
//! thread stopped, memory reads denied, and module files deleted or replaced under a
//! running target. Each must end with a clear result, and no thread may be left stopped
//! (state `t` in `/proc/<pid>/task/<tid>/stat`) once the reader is done.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_codec::attrs::AttrsIter;
use otel_ctx_conformance_helpers::open_thread_reader;
use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::thread::tls::{read_stopped, SlotState, StoppedThread};
use otel_ctx_reader::thread::tls::{AccessModel, PtraceError};
use otel_ctx_reader::thread::{OwnedThreadContext, ThreadReaderOptions};
use otel_ctx_reader::SampleError;
use otel_ctx_reader::{Error, ProcessContextReader, ThreadError, ThreadReader};

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

const TARGET: &str = env!("CARGO_BIN_EXE_otel-ctx-stress-target");
const TRACER: &str = env!("CARGO_BIN_EXE_otel-ctx-stress-tracer");
const TLS_FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../reader-linux/tests/fixtures/tls"
);

/// Longest a fault may take to settle (a process to be reaped, a thread to run on).
const SETTLE: Duration = Duration::from_secs(20);

/// A child process, killed and reaped on drop.
struct Process {
    child: Child,
    stdout: Option<bounded::Lines>,
}

impl Process {
    fn spawn(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let piped = child.stdout.take().expect("piped stdout");
        let stdout = bounded::Lines::new(format!("{command:?}"), piped);
        Self {
            child,
            stdout: Some(stdout),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its next line, at most [`bounded::DEADLINE`] away; empty when its output ended.
    fn line(&mut self) -> String {
        let stdout = self.stdout.as_mut().expect("stdout");
        let line = stdout.next_line("a line", bounded::DEADLINE);
        line.unwrap_or_default().trim_end().to_owned()
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        let _ = stdin.write_all(line.as_bytes());
        let _ = stdin.write_all(b"\n");
        let _ = stdin.flush();
    }

    /// Reaps the process; `None` if it is still not reapable after [`SETTLE`].
    fn reap(&mut self) -> Option<ExitStatus> {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        // Bounded: a process that cannot be reaped fails its test rather than hanging it.
        let _ = self.reap();
    }
}

/// `otel-ctx-stress-target` with its writer threads.
struct Target {
    process: Process,
    /// `(writer index, tid)`.
    writers: Vec<(u64, u32)>,
}

impl Target {
    fn start(args: &[&str]) -> Self {
        Self::start_with(Command::new(TARGET).args(args))
    }

    fn start_with(command: &mut Command) -> Self {
        let mut process = Process::spawn(command);
        let mut writers = Vec::new();
        loop {
            let line = process.line();
            if line == "ready" {
                break;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["thread", index, tid] => writers.push((
                    index.parse().expect("writer index"),
                    tid.parse().expect("writer tid"),
                )),
                _ => panic!("unexpected target line {line:?}"),
            }
        }
        Self { process, writers }
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Thread states of `pid` (`/proc/<pid>/task/<tid>/stat`, third field).
fn thread_states(pid: u32) -> Vec<(u32, char)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let tid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        Some((tid, thread_state(pid, tid)?))
    })
    .collect()
}

fn thread_state(pid: u32, tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// `TracerPid` of a thread (0: not traced).
fn tracer_pid(pid: u32, tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()
}

/// Nanoseconds thread `tid` has run (`/proc/<pid>/task/<tid>/schedstat`, first field).
fn run_time(pid: u32, tid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn assert_no_thread_stopped(pid: u32) {
    let states = thread_states(pid);
    assert!(
        states.iter().all(|&(_, state)| state != 't'),
        "threads of {pid} left in tracing stop: {states:?}"
    );
}

/// Waits until `condition` holds, for at most [`SETTLE`].
fn settle(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETTLE;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not after {SETTLE:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The record of thread `tid`: the stress target detaches and re-attaches its records
/// in its cycle, so a single read may find none.
fn read_record(reader: &mut ThreadReader, tid: u32) -> OwnedThreadContext {
    let mut found = None;
    settle("a record attached", || {
        found = reader.read_thread(tid).expect("read");
        found.is_some()
    });
    found.expect("settled on a record")
}

/// The counter of a record of writer `index` (the format of `otel-ctx-stress-target`),
/// after checking that its copies agree.
fn record_counter(index: u64, c: &OwnedThreadContext) -> u64 {
    let trace_id = c.trace_id();
    let n = u64::from_be_bytes(trace_id[..8].try_into().expect("8 bytes"));
    assert_eq!(trace_id[8..], (!n).to_be_bytes(), "mixed record {c:?}");
    assert_eq!(
        c.span_id(),
        (n ^ ((index + 1) << 56)).to_be_bytes(),
        "mixed record {c:?}"
    );
    assert_eq!(c.trace_flags(), n as u8, "mixed record {c:?}");
    let entries: Vec<(u8, Vec<u8>)> = AttrsIter::new(&c.attrs_data)
        .map(|(k, v)| (k, v.to_vec()))
        .collect();
    assert!(
        entries.len() >= 2
            && entries[0] == (0, n.to_string().into_bytes())
            && entries[1] == (1, index.to_string().into_bytes()),
        "mixed record {c:?}"
    );
    n
}

/// What a thread read may return once its process is gone.
fn is_gone_sample(e: &SampleError) -> bool {
    match e {
        SampleError::Ptrace(PtraceError::Gone) => true,
        SampleError::Memory { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

#[test]
fn target_killed_while_a_thread_is_held_stopped() {
    let mut target = Target::start(&["--threads", "2"]);
    let pid = target.pid();
    let (_, tid) = target.writers[0];
    let reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
    let memory = ProcessMemory::new(pid, ReadMethod::Auto);

    let stopped = StoppedThread::stop(tid).expect("stop the writer");
    assert_eq!(thread_state(pid, tid), Some('t'));
    target.process.child.kill().expect("SIGKILL the target");
    // The held thread dies with its process; reading it now fails cleanly.
    let started = Instant::now();
    let result = read_stopped(&stopped, reader.resolution(), &memory, 640);
    let elapsed = started.elapsed();
    drop(stopped);
    println!("read of the held thread after SIGKILL: {result:?} in {elapsed:?}");
    match &result {
        Err(e) => assert!(is_gone_sample(e), "{e:?}"),
        // The kill may not have reached the thread yet: then the read is whole.
        Ok(sample) => assert!(matches!(sample.state, SlotState::Record(_)), "{sample:?}"),
    }
    let status = target.process.reap();
    assert!(
        status.is_some(),
        "the killed target could not be reaped after the reader let its thread go"
    );
    // Reaped: its id is free, as if it never was.
    let e = ProcessContextReader::open(pid).map(|_| ()).unwrap_err();
    assert!(
        matches!(e, Error::ProcessGone { .. } | Error::NoSuchProcess { .. }),
        "{e:?}"
    );
}

#[test]
fn target_exits_while_a_thread_is_held_stopped() {
    let mut target = Target::start(&["--threads", "2"]);
    let pid = target.pid();
    let (_, tid) = target.writers[1];
    let reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
    let memory = ProcessMemory::new(pid, ReadMethod::Auto);

    let stopped = StoppedThread::stop(tid).expect("stop the writer");
    // Another thread of the target calls exit_group while this one is held stopped.
    target.process.say("exit");
    settle("the exiting target's held thread to die", || {
        !matches!(thread_state(pid, tid), Some('t'))
    });
    let result = read_stopped(&stopped, reader.resolution(), &memory, 640);
    drop(stopped);
    println!("read of the held thread after its process exited: {result:?}");
    let e = result.expect_err("the thread is gone");
    assert!(is_gone_sample(&e), "{e:?}");
    let status = target.process.reap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(3),
        "the target did not exit cleanly with the code of its `exit` command"
    );
}

#[test]
fn target_killed_mid_read() {
    // Several rounds: each kill lands at another point of the reads.
    for round in 0..4u64 {
        let mut target = Target::start(&["--threads", "2"]);
        let pid = target.pid();
        let writers = target.writers.clone();
        let thread_reads = Arc::new(AtomicU64::new(0));
        let process_reads = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));

        let process = {
            let (reads, killed) = (process_reads.clone(), killed.clone());
            std::thread::spawn(move || {
                let mut reader = ProcessContextReader::open(pid).expect("open");
                loop {
                    match reader.read() {
                        Ok(_) | Err(Error::StillUpdating { .. }) => {
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => return (e, killed.load(Ordering::SeqCst)),
                    }
                }
            })
        };
        let threads = {
            let (reads, killed) = (thread_reads.clone(), killed.clone());
            std::thread::spawn(move || {
                let mut reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
                for i in 0u64.. {
                    let (index, tid) = writers[(i % writers.len() as u64) as usize];
                    match reader.read_thread(tid) {
                        Ok(Some(context)) => {
                            record_counter(index, &context);
                        }
                        Ok(None) => {}
                        Err(e) => return (e, killed.load(Ordering::SeqCst)),
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                unreachable!()
            })
        };
        // Kill after a number of reads that grows with the round.
        let goal = 50 * (round + 1);
        settle("reads before the kill", || {
            thread_reads.load(Ordering::Relaxed) >= goal
                && process_reads.load(Ordering::Relaxed) >= 10 * goal
        });
        killed.store(true, Ordering::SeqCst);
        target.process.child.kill().expect("SIGKILL the target");
        let killed_at = Instant::now();

        settle("the readers to stop after the kill", || {
            process.is_finished() && threads.is_finished()
        });
        let (process_error, after_kill) = process.join().expect("process reader");
        assert!(
            after_kill,
            "process read failed before the kill: {process_error}"
        );
        assert!(
            matches!(process_error, Error::ProcessGone { .. }),
            "{process_error:?}"
        );
        let (thread_error, after_kill) = threads.join().expect("thread reader");
        assert!(
            after_kill,
            "thread read failed before the kill: {thread_error}"
        );
        assert!(is_gone_sample(&thread_error), "{thread_error:?}");
        println!(
            "round {round}: killed after {} thread and {} process reads; both readers \
             stopped within {:?}: {thread_error} / {process_error}",
            thread_reads.load(Ordering::Relaxed),
            process_reads.load(Ordering::Relaxed),
            killed_at.elapsed()
        );
        assert!(
            target.process.reap().is_some(),
            "the killed target could not be reaped"
        );
    }
}

#[test]
fn threads_exiting_while_they_are_read() {
    let target = Target::start(&["--threads", "1", "--churn"]);
    let pid = target.pid();
    let mut reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
    let started = Instant::now();
    let (mut churn_records, mut churn_empty, mut gone) = (0u64, 0u64, 0u64);
    let mut churn_threads = std::collections::BTreeSet::new();
    // Count-based: enough reads of short-lived threads, within a generous cap.
    while churn_records < 300 || gone < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {churn_records} records and {gone} exits after {:?}",
            started.elapsed()
        );
        let tids = reader.tids().expect("list the threads");
        for tid in tids {
            let writer = target.writers.iter().any(|&(_, t)| t == tid);
            match reader.read_thread(tid) {
                Ok(Some(context)) => {
                    let index = context
                        .attributes
                        .iter()
                        .find(|(key, _)| key == "stress.thread")
                        .and_then(|(_, i)| i.parse::<u64>().ok())
                        .unwrap_or_else(|| panic!("no stress.thread in {context:?}"));
                    record_counter(index, &context);
                    // Short-lived threads number themselves from 1000.
                    if index >= 1000 {
                        assert!(!writer, "{context:?}");
                        churn_threads.insert(index);
                        churn_records += 1;
                    }
                }
                Ok(None) => {
                    if !writer {
                        churn_empty += 1;
                    }
                }
                // Exited between the listing and the stop, or while being stopped.
                Err(SampleError::Ptrace(PtraceError::Gone)) => gone += 1,
                Err(e) => panic!("thread {tid}: {e}"),
            }
        }
    }
    println!(
        "{churn_records} records of {} short-lived threads, {churn_empty} without a context \
         (not attached yet, or detached on exit), {gone} exited while being read, in {:?}",
        churn_threads.len(),
        started.elapsed()
    );
    assert_no_thread_stopped(pid);
}

#[test]
fn another_tracer_is_denied_and_not_disturbed() {
    let target = Target::start(&["--threads", "2"]);
    let pid = target.pid();
    let (traced_index, traced) = target.writers[0];
    let (free_index, free) = target.writers[1];
    let mut tracer = Process::spawn(Command::new(TRACER).args(["seize", &traced.to_string()]));
    assert_eq!(tracer.line(), "traced");
    let other = tracer.pid();
    assert_eq!(tracer_pid(pid, traced), Some(other));

    let mut reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
    let ran_before = run_time(pid, traced);
    let e = reader
        .read_thread(traced)
        .expect_err("the thread has a tracer");
    println!("{e}");
    assert!(
        matches!(&e, SampleError::Ptrace(PtraceError::Traced { tracer, .. }) if *tracer == other),
        "{e:?}"
    );
    assert!(e.to_string().contains("another tracer"), "{e}");
    // Not disturbed: still traced by the other tracer, running, making progress.
    assert_eq!(tracer_pid(pid, traced), Some(other));
    settle("the traced thread to run on", || {
        run_time(pid, traced) > ran_before
    });
    assert_ne!(thread_state(pid, traced), Some('t'));
    // The other threads read as usual, and read_all reports the traced one.
    let context = read_record(&mut reader, free);
    record_counter(free_index, &context);
    let reports = reader.read_all().expect("read every thread");
    let denied: Vec<u32> = reports
        .iter()
        .filter(|r| {
            matches!(
                r.context,
                Err(SampleError::Ptrace(PtraceError::Traced { .. }))
            )
        })
        .map(|r| r.tid)
        .collect();
    assert_eq!(denied, vec![traced]);

    // Once the other tracer is gone, the thread reads again.
    drop(tracer.child.stdin.take());
    assert!(tracer.reap().is_some());
    settle("the other tracer to detach", || {
        tracer_pid(pid, traced) == Some(0)
    });
    let context = read_record(&mut reader, traced);
    record_counter(traced_index, &context);
    assert_no_thread_stopped(pid);
}

#[test]
fn reader_killed_while_it_holds_a_thread_stopped() {
    let target = Target::start(&["--threads", "2"]);
    let pid = target.pid();
    let (index, tid) = target.writers[0];
    let mut holder =
        Process::spawn(Command::new(TRACER).args(["hold", &pid.to_string(), &tid.to_string()]));
    let said = holder.line();
    assert!(said.starts_with("stopped "), "{said}");
    assert_eq!(thread_state(pid, tid), Some('t'));
    assert_eq!(tracer_pid(pid, tid), Some(holder.pid()));

    // A second reader meanwhile: denied, and the thread stays as the first one holds it.
    let mut reader = open_thread_reader(pid, SETTLE).expect("open the thread reader");
    let e = reader.read_thread(tid).expect_err("held by another reader");
    assert!(
        matches!(&e, SampleError::Ptrace(PtraceError::Traced { tracer, .. }) if *tracer == holder.pid()),
        "{e:?}"
    );
    assert_eq!(thread_state(pid, tid), Some('t'));

    holder.child.kill().expect("SIGKILL the holding reader");
    assert!(holder.reap().is_some());
    let killed_at = Instant::now();
    settle("the held thread to run on", || {
        thread_state(pid, tid) != Some('t') && tracer_pid(pid, tid) == Some(0)
    });
    let resumed_in = killed_at.elapsed();
    let first = reader.read_thread(tid).expect("read").expect("a record");
    let first = record_counter(index, &first);
    let mut last = first;
    settle("the writer to move on", || {
        if let Ok(Some(context)) = reader.read_thread(tid) {
            last = record_counter(index, &context);
        }
        last > first
    });
    println!(
        "{said}; the reader was killed; the thread ran again within {resumed_in:?} (its \
         counter went from {first} to {last})"
    );
    assert_no_thread_stopped(pid);
}

/// Installs, on the calling thread only, a filter that denies both ways of copying
/// another process's memory with `EPERM`, as a strict container profile may.
fn deny_memory_reads() {
    let rules = [
        libc::SYS_process_vm_readv,
        libc::SYS_pread64,
        libc::SYS_preadv,
        libc::SYS_preadv2,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .expect("a seccomp architecture");
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .expect("the filter");
    let program: seccompiler::BpfProgram = filter.try_into().expect("the BPF program");
    seccompiler::apply_filter(&program).expect("install the filter");
}

#[test]
fn memory_reads_denied_by_seccomp() {
    let target = Target::start(&["--threads", "1"]);
    let pid = target.pid();
    let (_, tid) = target.writers[0];
    let (process, threads) = std::thread::spawn(move || {
        deny_memory_reads();
        let process = ProcessContextReader::open(pid).and_then(|mut r| r.read());
        let threads = ThreadReader::open(pid).map(|mut r| r.read_thread(tid));
        (process, threads)
    })
    .join()
    .expect("the filtered thread");

    let e = process.expect_err("memory reads are denied");
    println!("process context: {e}");
    assert!(
        matches!(&e, Error::PermissionDenied { operation, .. } if operation.contains("/proc/<pid>/mem")),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.contains("permission denied"), "{message}");
    match threads {
        Ok(Err(e)) => {
            println!("thread: {e}");
            assert!(
                matches!(&e, SampleError::Memory { source, .. } if source.raw_os_error() == Some(libc::EPERM)),
                "{e:?}"
            );
        }
        Err(e) => {
            println!("thread reader: {e}");
            assert!(e.to_string().contains("not permitted"), "{e}");
        }
        Ok(Ok(context)) => panic!("read a thread without memory access: {context:?}"),
    }
    assert_no_thread_stopped(pid);
}

/// Copies `binary` into `dir` (world-readable and executable) for another uid to run.
fn copy_for_everyone(binary: &str, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = dir.join(Path::new(binary).file_name().expect("file name"));
    std::fs::copy(binary, &to).expect("copy the binary");
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    to
}

#[test]
fn target_of_another_uid_is_denied() {
    if rustix::process::geteuid().as_raw() != 0 {
        // The test switches uids for both processes: only root can.
        panic!("this test runs as root (it starts processes as uids 65533 and 65534)");
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("otel-ctx-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let target_bin = copy_for_everyone(TARGET, &dir);
    let tracer_bin = copy_for_everyone(TRACER, &dir);

    let target = Target::start_with(
        Command::new(&target_bin)
            .args(["--threads", "1"])
            .uid(65534)
            .gid(65534),
    );
    let pid = target.pid();
    let mut read = Command::new(&tracer_bin);
    read.args(["read", &pid.to_string()]).uid(65533).gid(65533);
    let out = bounded::output(&mut read, bounded::DEADLINE).expect("run the reader as uid 65533");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let process = text
        .lines()
        .find(|l| l.starts_with("process "))
        .expect("a process line");
    assert!(
        process.starts_with("process error permission_denied:")
            && process.contains("CAP_SYS_PTRACE"),
        "{process}"
    );
    let threads = text
        .lines()
        .find(|l| l.starts_with("threads ") || l.starts_with("thread "))
        .expect("a thread line");
    assert!(
        threads.contains("error") && threads.contains("permission denied"),
        "{threads}"
    );
    assert_no_thread_stopped(pid);
}

/// A C test target from `reader-linux/tests/fixtures/tls`: threads with records, and
/// what each printed about itself.
struct CTarget {
    process: Process,
    /// `(tid, record address)` of the threads with a record.
    records: Vec<(u32, u64)>,
}

impl CTarget {
    fn start(exe: &Path, args: &[&Path]) -> Self {
        let mut process = Process::spawn(Command::new(exe).args(args));
        let mut records = Vec::new();
        loop {
            let line = process.line();
            if line == "ready" {
                break;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 5, "unexpected fixture line {line:?}");
            let record =
                u64::from_str_radix(f[4].trim_start_matches("record="), 16).expect("record");
            if record != 0 {
                records.push((f[1].parse().expect("tid"), record));
            }
        }
        assert_eq!(records.len(), 3, "the fixture attaches three records");
        Self { process, records }
    }

    /// Reads every thread with a fresh reader: the model found, and each record where the
    /// thread said it is, with the fixture's content.
    fn check(&self, what: &str) -> AccessModel {
        let pid = self.process.pid();
        // The C fixture publishes no process context, so no schema: read the slot anyway.
        let options = ThreadReaderOptions::default().with_require_known_schema(false);
        let mut reader = ThreadReader::with_options(pid, options)
            .unwrap_or_else(|e| panic!("{what}: open the reader: {e}"));
        for &(tid, record) in &self.records {
            let context = reader
                .read_thread(tid)
                .unwrap_or_else(|e| panic!("{what}: thread {tid}: {e}"))
                .unwrap_or_else(|| panic!("{what}: thread {tid} has no record"));
            assert_eq!(context.record_address, record, "{what}: thread {tid}");
            let n = context.trace_id()[0] / 16;
            assert!((1..=3).contains(&n), "{what}: {context:?}");
            assert_eq!(context.span_id()[0], 0x80 + n * 8, "{what}");
        }
        assert_no_thread_stopped(pid);
        reader.resolution().model
    }
}

fn gcc(out: &Path, args: &[&str]) {
    let status = Command::new("gcc")
        .args(["-O1", "-pthread"])
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .expect("run gcc (install gcc)");
    assert!(status.success(), "gcc {args:?} failed");
}

#[test]
fn module_file_deleted_or_replaced_under_the_target() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("faults-module");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let (main, writer) = (
        format!("{TLS_FIXTURES}/main.c"),
        format!("{TLS_FIXTURES}/writer.c"),
    );
    let at = |name: &str| dir.join(name);
    let path = |name: &str| at(name).to_str().expect("utf-8").to_owned();
    gcc(
        &at("libdesc.so"),
        &["-shared", "-fPIC", "-mtls-dialect=gnu2", &writer],
    );
    gcc(
        &at("libgd.so"),
        &["-shared", "-fPIC", "-mtls-dialect=gnu", &writer],
    );
    gcc(&at("dl"), &["-DDLOPEN", &main, "-ldl"]);
    gcc(&at("le"), &["-rdynamic", &main, &writer]);

    // The library that defines the symbol, loaded with dlopen: deleted, then replaced by
    // a different build of the same library (general dynamic instead of TLSDESC), which
    // a reader that opened the path would analyse instead.
    std::fs::copy(at("libdesc.so"), at("libfault.so")).expect("copy");
    let target = CTarget::start(&at("dl"), &[&at("libfault.so")]);
    let model = target.check("library in place");
    std::fs::remove_file(at("libfault.so")).expect("delete the library");
    assert_eq!(target.check("library deleted"), model);
    std::fs::copy(at("libgd.so"), at("libfault.so.new")).expect("copy");
    std::fs::rename(at("libfault.so.new"), at("libfault.so")).expect("replace the library");
    assert_eq!(target.check("library replaced"), model);
    println!("dlopen'ed library ({model:?}): read in place, deleted and replaced");
    drop(target);

    // The executable that defines the symbol: deleted, then replaced by another program.
    std::fs::copy(at("le"), at("le-fault")).expect("copy");
    let target = CTarget::start(&at("le-fault"), &[]);
    let model = target.check("executable in place");
    assert_eq!(model, AccessModel::LocalExec);
    std::fs::remove_file(at("le-fault")).expect("delete the executable");
    assert_eq!(target.check("executable deleted"), model);
    std::fs::copy(at("dl"), path("le-fault")).expect("replace the executable");
    assert_eq!(target.check("executable replaced"), model);
    println!("executable ({model:?}): read in place, deleted and replaced");
}

#[test]
fn gone_thread_reader_errors_are_clear() {
    // A target that is already gone: both readers say so, plainly.
    let mut target = Target::start(&["--threads", "1"]);
    let pid = target.pid();
    target.process.child.kill().expect("SIGKILL");
    target.process.reap().expect("reaped");
    // Reaped: its id is free, as if it never was.
    let e = ProcessContextReader::open(pid).map(|_| ()).unwrap_err();
    assert!(
        matches!(e, Error::ProcessGone { .. } | Error::NoSuchProcess { .. }),
        "{e:?}"
    );
    match ThreadReader::open(pid) {
        Err(ThreadError::Process(Error::ProcessGone { .. } | Error::NoSuchProcess { .. })) => {}
        other => panic!("{other:?}"),
    }
}
