//! Where `otel-ctx profile` writes, as the README says: one process's profile to the file
//! `-o` names (`-`: standard output), `--all`'s one file per process named after `-o` (a
//! directory only when it is one or ends with `/`, else the name with the pid before its
//! extension), in the format the name or `--format` gives; the summary always on stderr.
//! A build with the eBPF sampler (`--all`); root (ptrace, BPF) and gcc.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use fixture::{build_routes, Fixture};
use support::{bounded, otel_ctx, run, text, KillOnDrop};

/// The fixtures' threads spin on both CPUs, and `--all` samples every publisher: one test
/// at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("profile-outputs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Runs `otel-ctx <args>` in `dir`, for at most [`bounded::DEADLINE`].
fn run_in(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(otel_ctx());
    command.args(args).current_dir(dir);
    bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx")
}

fn succeeded(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    stderr
}

/// What a profile file holds, from its first bytes.
fn kind(path: &Path) -> &'static str {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if bytes.starts_with(&[0x1f, 0x8b]) {
        "pprof"
    } else if bytes.starts_with(b"<?xml") {
        "svg"
    } else if !bytes.is_empty()
        && text(&bytes).lines().all(|l| {
            l.rsplit_once(' ')
                .is_some_and(|(_, n)| n.parse::<u64>().is_ok())
        })
    {
        "folded"
    } else {
        "unknown"
    }
}

#[test]
fn neither_a_pid_nor_all_says_that_all_exists() {
    let _serial = serial();
    let out = run(&["profile"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("<PID|--all>"), "{stderr}");
}

#[test]
fn one_process_summary_on_stderr_and_the_profile_where_o_says() {
    let _serial = serial();
    let exe = build_routes("outputs-one", &["-fomit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    let pid = fixture.pid.to_string();
    let dir = scratch("one");

    // `profile <pid> --duration 1s --ptrace <args>` in `dir`, which must succeed.
    let profile = |args: &[&str]| {
        let mut all = vec!["profile", &pid, "--duration", "1s", "--ptrace"];
        all.extend_from_slice(args);
        let out = run_in(&dir, &all);
        let stderr = succeeded(&out);
        (text(&out.stdout), stderr)
    };

    // A file: nothing on stdout, the summary on stderr.
    let (stdout, stderr) = profile(&["-o", "cpu.svg"]);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("samples in"), "{stderr}");
    assert!(
        stderr.contains("flame graph written to cpu.svg"),
        "{stderr}"
    );
    assert_eq!(kind(&dir.join("cpu.svg")), "svg");

    // Standard output: the profile alone there (folded), the summary on stderr.
    let (folded, stderr) = profile(&["-o", "-"]);
    assert!(stderr.contains("samples in"), "{stderr}");
    assert!(
        !folded.is_empty()
            && folded
                .lines()
                .all(|l| l.starts_with('/') || l.starts_with('(')),
        "{folded}"
    );

    // No -o: profile.<pid>.pb.gz in the current directory.
    profile(&[]);
    assert_eq!(kind(&dir.join(format!("profile.{pid}.pb.gz"))), "pprof");

    // A directory, existing or ending with `/`: profile.<pid>.<ext> in it.
    profile(&["-o", "new/", "--format", "folded"]);
    assert_eq!(
        kind(&dir.join(format!("new/profile.{pid}.folded"))),
        "folded"
    );
    fixture.finish();
}

/// An output that cannot be written is said before sampling starts, with what is wrong
/// (a part that is not a directory said as such), and nothing is sampled: exit status 2
/// well within the `--duration` sampling would have taken.
#[test]
fn an_output_that_cannot_be_written_fails_before_sampling() {
    let _serial = serial();
    let dir = scratch("refused");
    let plain = dir.join("plain");
    std::fs::write(&plain, "a file").expect("a file");
    let target = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let target = KillOnDrop(target);
    let pid = target.0.id().to_string();
    let under = format!("{}/x.svg", plain.display());
    let slash = format!("{}/", plain.display());
    let mut cases = vec![
        (
            vec!["profile", &pid, "-o", "/proc/x.svg"],
            "-o /proc/x.svg: cannot write there: ".to_owned(),
        ),
        (
            vec!["profile", &pid, "-o", &under],
            format!("-o {under}: {} is not a directory", plain.display()),
        ),
        (
            vec!["profile", &pid, "-o", &slash],
            format!("-o {slash}: not a directory"),
        ),
    ];
    let otlp_file = format!("{}/requests.otlp", plain.display());
    if cfg!(feature = "ebpf") {
        cases.push((
            vec!["profile", "--all", "-o", &under],
            "is not a directory".to_owned(),
        ));
        cases.push((
            vec!["profile", &pid, "--otlp-file", &otlp_file],
            format!(
                "--otlp-file {otlp_file}: {} is not a directory",
                plain.display()
            ),
        ));
    }
    for (args, said) in cases {
        let started = Instant::now();
        let out = run_in(&dir, &[&args[..], &["--duration", "8s"]].concat());
        let took = started.elapsed();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&said), "{args:?}: {stderr}");
        assert!(!stderr.contains("samples"), "{args:?} sampled: {stderr}");
        assert!(took < Duration::from_secs(8), "{args:?} took {took:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "a file");
    drop(target);
}

mod all {
    use super::*;

    /// The fixtures `--all` is to find, each with its own service name.
    fn two_fixtures(name: &str) -> (Fixture, Fixture) {
        let exe = build_routes(name, &["-fno-omit-frame-pointer"]);
        let start =
            |service: &str| Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", service)]);
        (start("outputs-a"), start("outputs-b"))
    }

    /// Whether `otel-ctx profile --all` (process `pid`) has started its discovery thread.
    fn started_discovery(pid: libc::pid_t) -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().any(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == "discovery")
        })
    }

    /// `profile --all --rescan 1h <args>` in `dir`, until it follows every pid of `pids`
    /// (its summary on SIGUSR1 lists the processes it follows: each is analysed before it
    /// is sampled, which on a loaded host takes seconds), then 2 s more, then SIGTERM; its
    /// stderr.
    fn profile_all(dir: &Path, pids: &[u32], args: &[&str]) -> String {
        let log = dir.join("stderr.txt");
        let mut tool = Command::new(otel_ctx())
            .args(["profile", "--all", "--duration", "0", "--rescan", "1h"])
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log"))
            .spawn()
            .expect("start otel-ctx");
        let pid = tool.id() as libc::pid_t;
        let signal = |signal| {
            // SAFETY: kill(2) on the child this test started and has not reaped.
            let rc = unsafe { libc::kill(pid, signal) };
            assert_eq!(rc, 0, "kill");
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if pids.iter().all(|pid| said.contains(&format!("\n  {pid} "))) {
                break;
            }
            if let Some(status) = tool.try_wait().expect("wait") {
                panic!("otel-ctx exited ({status}) before it followed {pids:?}:\n{said}");
            }
            assert!(
                Instant::now() < deadline,
                "not all of {pids:?} followed:\n{said}"
            );
            // A signal while the kernel verifies the BPF programs fails their load
            // (EAGAIN): none before the discovery thread, started after them, runs.
            if started_discovery(pid) {
                signal(libc::SIGUSR1);
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        signal(libc::SIGTERM);
        // It writes a profile per process, then exits.
        let out = bounded::wait_with_output(
            tool,
            "otel-ctx profile --all, after SIGTERM,",
            bounded::DEADLINE,
        );
        let stderr = std::fs::read_to_string(&log).expect("the log");
        assert!(out.status.success(), "{stderr}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
        stderr
    }

    #[test]
    fn a_file_name_gives_each_process_its_file_in_the_names_format() {
        let _serial = serial();
        let (a, b) = two_fixtures("outputs-all-name");
        let dir = scratch("all-name");
        let stderr = profile_all(&dir, &[a.pid, b.pid], &["-o", "svg/out.svg"]);
        assert!(!dir.join("svg/out.svg").exists(), "out.svg was made");
        for pid in [a.pid, b.pid] {
            let path = dir.join(format!("svg/out.{pid}.svg"));
            assert_eq!(kind(&path), "svg", "{stderr}");
            assert!(
                stderr.contains(&format!("written to svg/out.{pid}.svg")),
                "{stderr}"
            );
        }
        // One scan of /proc at the start, said in the singular.
        assert!(stderr.contains("discovery: 1 scan of /proc"), "{stderr}");

        // --format, for every file, with the name's own extension kept.
        let stderr = profile_all(
            &dir,
            &[a.pid, b.pid],
            &["-o", "cpu.data", "--format", "folded"],
        );
        for pid in [a.pid, b.pid] {
            assert_eq!(
                kind(&dir.join(format!("cpu.{pid}.data"))),
                "folded",
                "{stderr}"
            );
        }
        a.finish();
        b.finish();
    }

    #[test]
    fn a_directory_when_it_is_one_or_ends_with_a_slash_and_else_the_current_one() {
        let _serial = serial();
        let (a, b) = two_fixtures("outputs-all-dir");
        let dir = scratch("all-dir");
        std::fs::create_dir(dir.join("existing.svg")).expect("a directory");
        profile_all(&dir, &[a.pid, b.pid], &["-o", "existing.svg"]);
        profile_all(&dir, &[a.pid, b.pid], &["-o", "new/", "--format", "svg"]);
        profile_all(&dir, &[a.pid, b.pid], &[]);
        for pid in [a.pid, b.pid] {
            let pprof = format!("existing.svg/profile.{pid}.pb.gz");
            assert_eq!(kind(&dir.join(pprof)), "pprof");
            assert_eq!(kind(&dir.join(format!("new/profile.{pid}.svg"))), "svg");
            assert_eq!(kind(&dir.join(format!("profile.{pid}.pb.gz"))), "pprof");
        }
        // Standard output cannot take a file per process.
        let out = run_in(&dir, &["profile", "--all", "--duration", "1s", "-o", "-"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("out.<pid>.svg"),
            "{}",
            text(&out.stderr)
        );
        a.finish();
        b.finish();
    }
}
