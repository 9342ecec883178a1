//! What profiling costs a CPU-bound target, side by side in one run: four threads, each
//! under its own route, count iterations of some arithmetic in a leaf function two calls
//! deep (`benches/fixtures/busy_routes.c`, built `-O2 -fomit-frame-pointer` against the C
//! ABI), while, in turn, nothing samples it, `otel-ctx watch --ebpf`, `otel-ctx profile`
//! (eBPF), `otel-ctx profile --ptrace`, `perf record -e cpu-clock` without a call graph
//! (the platform's tick and a sample of the instruction pointer), and `perf record -g
//! --call-graph dwarf` (what people use for stacks today) run at 99 Hz for one window.
//!
//! Every window with a sampler sits between two without one and is compared with their
//! mean; each row reports the median and quartiles of its per-window slowdowns, the
//! sampler's own CPU time (user and system, from `/usr/bin/time`) as a share of a CPU, its
//! peak memory, and the bytes it wrote. Then a 60 s profile's peak memory, and the top 10
//! leaf functions of `perf report` beside ours for one window where both sampled at once.
//!
//! `cargo bench -p otel-ctx --features ebpf --bench profile_overhead` as root, with
//! `perf` (Debian's linux-perf) on the PATH. `OTEL_CTX_BENCH_WINDOW_S` (default 3) and
//! `OTEL_CTX_BENCH_ROUNDS` (default 5) set the window and the rounds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod support;

use support::{cpu_seconds, Target};

const OTEL_CTX: &str = env!("CARGO_BIN_EXE_otel-ctx");
const HZ: &str = "99";

fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("profile-overhead");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sampler {
    None,
    WatchEbpf,
    ProfileEbpf,
    ProfilePtrace,
    PerfNoGraph,
    PerfDwarf,
}

impl Sampler {
    const ALL: [Self; 5] = [
        Self::WatchEbpf,
        Self::ProfileEbpf,
        Self::ProfilePtrace,
        Self::PerfNoGraph,
        Self::PerfDwarf,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::None => "no sampler",
            Self::WatchEbpf => "otel-ctx watch --ebpf",
            Self::ProfileEbpf => "otel-ctx profile (eBPF)",
            Self::ProfilePtrace => "otel-ctx profile --ptrace",
            Self::PerfNoGraph => "perf record -e cpu-clock (no call graph)",
            Self::PerfDwarf => "perf record -g --call-graph dwarf",
        }
    }

    /// What its output file is called.
    fn extension(self) -> &'static str {
        match self {
            Self::None | Self::WatchEbpf => "jsonl",
            Self::ProfileEbpf | Self::ProfilePtrace => "pb.gz",
            Self::PerfNoGraph | Self::PerfDwarf => "perf",
        }
    }

    /// The command for one window of `secs` seconds on `pid`, writing to `out`.
    fn command(self, pid: &str, secs: u64, out: &Path) -> Option<Vec<String>> {
        let d = format!("{secs}s");
        let out = out.to_str().expect("utf-8").to_owned();
        let v = |a: &[&str]| Some(a.iter().map(|s| (*s).to_owned()).collect());
        match self {
            Self::None => None,
            Self::WatchEbpf => v(&[
                OTEL_CTX,
                "watch",
                pid,
                "--ebpf",
                "--hz",
                HZ,
                "--duration",
                &d,
                "--json",
            ]),
            Self::ProfileEbpf => v(&[
                OTEL_CTX,
                "profile",
                pid,
                "--hz",
                HZ,
                "--duration",
                &d,
                "-o",
                &out,
            ]),
            Self::ProfilePtrace => v(&[
                OTEL_CTX,
                "profile",
                pid,
                "--ptrace",
                "--hz",
                HZ,
                "--duration",
                &d,
                "-o",
                &out,
            ]),
            Self::PerfNoGraph => v(&[
                "perf",
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                HZ,
                "-p",
                pid,
                "-o",
                &out,
                "--",
                "sleep",
                &secs.to_string(),
            ]),
            Self::PerfDwarf => v(&[
                "perf",
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                HZ,
                "-g",
                "--call-graph",
                "dwarf",
                "-p",
                pid,
                "-o",
                &out,
                "--",
                "sleep",
                &secs.to_string(),
            ]),
        }
    }
}

/// What a sampler used: CPU seconds while the target was measured, and peak memory.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    cpu_s: f64,
    max_rss_kib: u64,
}

/// Starts `argv`, its standard output into `stdout` (or nowhere), its standard error
/// kept for when it fails.
fn spawn(argv: &[String], stdout: Option<&Path>) -> Child {
    let out = match stdout {
        Some(path) => Stdio::from(std::fs::File::create(path).expect("the output file")),
        None => Stdio::null(),
    };
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(out)
        .stderr(std::fs::File::create(stderr_file(argv)).expect("the error file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {argv:?}: {e}"))
}

/// Where the standard error of `argv` goes (one file per program: two run at once).
fn stderr_file(argv: &[String]) -> PathBuf {
    let program = Path::new(&argv[0]).file_name().unwrap_or_default();
    scratch().join(format!("{}.stderr", program.to_string_lossy()))
}

/// Waits for `child`; panics with its standard error if it failed. Its CPU time and
/// peak memory.
fn reap(child: Child, argv: &[String]) -> Usage {
    let ended = support::wait_usage(child);
    assert!(
        ended.success,
        "{argv:?} failed (wait status {:#x}):\n{}",
        ended.status,
        std::fs::read_to_string(stderr_file(argv)).unwrap_or_default()
    );
    Usage {
        cpu_s: ended.cpu_s,
        max_rss_kib: ended.max_rss_kib,
    }
}

/// How long a sampler runs before and after the measured span: its start (loading the
/// program, reading the modules) and its end (writing the profile) are one-time costs,
/// reported by the 60 s run's totals, not slowdown.
const SETTLE: Duration = Duration::from_secs(1);

/// One window: the target's iterations per second over `secs` seconds, and the
/// sampler's usage meanwhile.
fn window(target: &mut Target, sampler: Sampler, secs: u64, out: &Path) -> (f64, Usage) {
    let Some(argv) = sampler.command(&target.pid(), secs + 2 * SETTLE.as_secs(), out) else {
        let (n0, t0) = target.iterations();
        std::thread::sleep(Duration::from_secs(secs));
        let (n1, t1) = target.iterations();
        return ((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), Usage::default());
    };
    let child = spawn(&argv, (sampler == Sampler::WatchEbpf).then_some(out));
    std::thread::sleep(SETTLE);
    let (n0, t0) = target.iterations();
    let c0 = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = target.iterations();
    let c1 = cpu_seconds(child.id());
    let max_rss_kib = reap(child, &argv).max_rss_kib;
    let rate = (n1 - n0) as f64 / (t1 - t0).as_secs_f64();
    let cpu_s = (c1 - c0) * secs as f64 / (t1 - t0).as_secs_f64();
    (rate, Usage { cpu_s, max_rss_kib })
}

/// Runs `argv` to its end: its total CPU seconds and peak memory.
fn run(argv: &[String]) -> Usage {
    reap(spawn(argv, None), argv)
}

/// `n` bytes, in the unit that reads best.
fn size(n: u64) -> String {
    if n < 10 << 10 {
        format!("{n} B")
    } else {
        format!("{} KiB", n >> 10)
    }
}

/// The top leaves of `perf report`, by share of samples.
fn perf_leaves(data: &Path) -> Vec<(String, f64)> {
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-g",
            "none",
            "-i",
        ])
        .arg(data)
        .output()
        .expect("perf report");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('%'))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let share = words.next()?.trim_end_matches('%').parse().ok()?;
            let name = words.skip(1).collect::<Vec<_>>().join(" ");
            Some((name, share))
        })
        .take(10)
        .collect()
}

/// The top leaves of our folded profile, by share of samples.
fn our_leaves(folded: &Path) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(folded).expect("the folded profile");
    let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for line in text.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        total += n;
        *leaves
            .entry(stack.rsplit(';').next().unwrap_or("").to_owned())
            .or_default() += n;
    }
    let mut leaves: Vec<(String, f64)> = leaves
        .into_iter()
        .map(|(name, n)| (name, 100.0 * n as f64 / total.max(1) as f64))
        .collect();
    leaves.sort_by(|a, b| b.1.total_cmp(&a.1));
    leaves.truncate(10);
    leaves
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs: u64 = std::env::var("OTEL_CTX_BENCH_WINDOW_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rounds: usize = std::env::var("OTEL_CTX_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let cpu = support::cpu_name();
    println!(
        "profile_overhead: {cpu}, {} CPUs, {rounds} rounds of {secs} s windows at {HZ} Hz",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut target = Target::start(&support::busy_routes(&scratch()), &[]);
    let dir = scratch();
    let mut slowdowns: BTreeMap<Sampler, Vec<f64>> = BTreeMap::new();
    let mut usage: BTreeMap<Sampler, Vec<Usage>> = BTreeMap::new();
    let mut bytes: BTreeMap<Sampler, u64> = BTreeMap::new();
    // Warm-up: the first profile reads the modules.
    let _ = window(
        &mut target,
        Sampler::ProfileEbpf,
        1,
        &dir.join("warm.pb.gz"),
    );
    let (mut before, _) = window(&mut target, Sampler::None, secs, &dir.join("none"));
    for round in 0..rounds {
        for k in 0..Sampler::ALL.len() {
            let sampler = Sampler::ALL[(k + round) % Sampler::ALL.len()];
            let out = dir.join(format!("{sampler:?}.{}", sampler.extension()));
            let _ = std::fs::remove_file(&out);
            let (rate, used) = window(&mut target, sampler, secs, &out);
            let (after, _) = window(&mut target, Sampler::None, secs, &dir.join("none"));
            let baseline = (before + after) / 2.0;
            slowdowns
                .entry(sampler)
                .or_default()
                .push(100.0 * (1.0 - rate / baseline));
            usage.entry(sampler).or_default().push(used);
            bytes.insert(sampler, std::fs::metadata(&out).map_or(0, |m| m.len()));
            before = after;
        }
    }
    println!("\n| sampler, {HZ} Hz | target slowdown, median (quartiles) | sampler CPU while measured, % of one CPU | sampler peak memory | output of one window |");
    println!("|---|---:|---:|---:|---:|");
    for sampler in Sampler::ALL {
        let (q1, med, q3) = support::quartiles(slowdowns[&sampler].clone());
        let cpu: Vec<f64> = usage[&sampler]
            .iter()
            .map(|u| 100.0 * u.cpu_s / secs as f64)
            .collect();
        let (_, cpu_med, _) = support::quartiles(cpu);
        let rss = usage[&sampler]
            .iter()
            .map(|u| u.max_rss_kib)
            .max()
            .unwrap_or(0);
        println!(
            "| {} | {med:+.2}% ({q1:+.2}% to {q3:+.2}%) | {cpu_med:.1}% | {:.1} MiB | {} |",
            sampler.name(),
            rss as f64 / 1024.0,
            size(bytes.get(&sampler).copied().unwrap_or(0))
        );
    }

    // A 60 s profile: its peak memory.
    let long = dir.join("long.pb.gz");
    let pid = target.pid();
    let profile = |secs, out: &Path| {
        Sampler::ProfileEbpf
            .command(&pid, secs, out)
            .expect("a command")
    };
    let used = run(&profile(60, &long));
    println!(
        "\n60 s profile (eBPF, {HZ} Hz): peak memory {:.1} MiB, CPU {:.2} s in all (start and end included), pprof {}",
        used.max_rss_kib as f64 / 1024.0,
        used.cpu_s,
        size(std::fs::metadata(&long).map_or(0, |m| m.len()))
    );

    // Both at once, for the leaves.
    let perf_data = dir.join("both.perf");
    let folded = dir.join("both.folded");
    let both = Sampler::PerfDwarf
        .command(&pid, secs, &perf_data)
        .expect("a command");
    let perf = spawn(&both, None);
    run(&profile(secs, &folded));
    reap(perf, &both);
    let (theirs, ours) = (perf_leaves(&perf_data), our_leaves(&folded));
    println!("\n| rank | perf report (leaf, share) | otel-ctx profile (leaf, share) |");
    println!("|---:|---|---|");
    for i in 0..theirs.len().max(ours.len()) {
        let cell = |v: &[(String, f64)]| {
            v.get(i)
                .map_or_else(String::new, |(n, s)| format!("{n} {s:.1}%"))
        };
        println!("| {} | {} | {} |", i + 1, cell(&theirs), cell(&ours));
    }
}
