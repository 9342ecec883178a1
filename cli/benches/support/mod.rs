//! What the tool's cost benchmarks share: their CPU-bound target, and the CPU time and
//! memory of the processes they measure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Instant;

#[path = "../../../profile/tests/support/fixture.rs"]
pub mod fixture;

/// Builds `benches/fixtures/busy_routes.c` (four threads under their own routes, counting
/// iterations of arithmetic) against the C ABI as `<dir>/busy_routes`.
pub fn busy_routes(dir: &Path) -> PathBuf {
    let lib = fixture::ffi_library();
    let exe = dir.join("busy_routes");
    let rpath = format!("-Wl,-rpath,{}", lib.parent().expect("dir").display());
    fixture::gcc(&[
        "-O2",
        "-g",
        "-fomit-frame-pointer",
        "-pthread",
        "-I",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../ffi/include"),
        "-o",
        exe.to_str().expect("utf-8"),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/fixtures/busy_routes.c"
        ),
        lib.to_str().expect("utf-8"),
        &rpath,
    ]);
    exe
}

/// Builds `benches/fixtures/<name>.c` against the C ABI as `<dir>/<name>`, with
/// frame pointers (so that a profile of it needs no CFI).
pub fn c_target(dir: &Path, name: &str) -> PathBuf {
    let lib = fixture::ffi_library();
    let exe = dir.join(name);
    let rpath = format!("-Wl,-rpath,{}", lib.parent().expect("dir").display());
    let source = format!("{}/benches/fixtures/{name}.c", env!("CARGO_MANIFEST_DIR"));
    fixture::gcc(&[
        "-O2",
        "-g",
        "-fno-omit-frame-pointer",
        "-pthread",
        "-I",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../ffi/include"),
        "-o",
        exe.to_str().expect("utf-8"),
        &source,
        lib.to_str().expect("utf-8"),
        &rpath,
    ]);
    exe
}

/// The folder `<CARGO_TARGET_TMPDIR>/<name>`, made if missing.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The first and third quartiles and the median of `v` (not empty), in that order.
pub fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.5), at(0.75))
}

/// The CPU's model name (`/proc/cpuinfo`), for the line above a table.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default()
}

/// The window and the rounds: `OTEL_CTX_BENCH_WINDOW_S` (default 3) and
/// `OTEL_CTX_BENCH_ROUNDS` (default 5).
pub fn window_and_rounds() -> (u64, usize) {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    (
        env("OTEL_CTX_BENCH_WINDOW_S", 3),
        env("OTEL_CTX_BENCH_ROUNDS", 5) as usize,
    )
}

/// User and system CPU seconds of process `pid` so far (all its threads).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the parenthesized name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf reads a constant of the system and has no other effect.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(14) + ticks(15)) / hz
}

/// How a child ended: whether it exited with 0, its wait status, its CPU seconds (user
/// and system) and its peak memory in KiB.
pub struct Ended {
    pub success: bool,
    pub status: i32,
    pub cpu_s: f64,
    pub max_rss_kib: u64,
}

/// Waits for `child` with `wait4`, for its resource usage.
pub fn wait_usage(mut child: Child) -> Ended {
    let mut status = 0;
    // SAFETY: all-zero bytes are a valid `rusage` (integers and timevals).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `status` and `usage` are valid for writes; `pid` is our unreaped child,
    // which std does not wait for afterwards (its status is not polled again).
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child.stdin.take());
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ended {
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        status,
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
    }
}

/// A running `busy_routes`; killed when dropped.
pub struct Target {
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Target {
    /// Starts `exe` (`busy_routes`) with `env` added, and waits for its `ready` line.
    pub fn start(exe: &Path, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(exe);
        command.envs(env.iter().copied());
        Self::spawn(command)
    }

    /// Starts `command`, a target that prints a `ready` line and answers each line of
    /// its standard input with its iterations so far (`busy_routes`, the Python
    /// service), and waits for its `ready` line.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the target");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = lines.next().expect("output").expect("output");
        assert!(ready.starts_with("ready "), "{ready}");
        Self { child, lines }
    }

    /// Its process id, as a command line takes it.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Sends `line` and returns the target's one-line answer.
    pub fn ask(&mut self, line: &str) -> String {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("ask");
        stdin.flush().expect("flush");
        self.lines.next().expect("an answer").expect("an answer")
    }

    /// Iterations so far, and when.
    pub fn iterations(&mut self) -> (u64, Instant) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"\n").expect("ask");
        stdin.flush().expect("flush");
        let line = self.lines.next().expect("count").expect("count");
        (line.trim().parse().expect("a count"), Instant::now())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
