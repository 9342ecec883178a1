//! What profiling a Python service costs, side by side in one run, on the tests' Python
//! target (`sampler-linux/tests/python/service.py` under Debian's python3.11, publishing
//! through the C ABI: three CPU-bound workers), at 99 Hz:
//!
//! - the slowdown of a one-worker target (its rounds of `py_mid_hot` per second) under `otel-ctx
//!   profile` (eBPF), `otel-ctx profile --ptrace`, `py-spy record` (its default, which
//!   stops the process for each sample) and `py-spy record --nonblocking`: each window
//!   with a profiler sits between two without one and is compared with their mean;
//!   median and quartiles over the rounds;
//! - each profiler's own CPU per thread sample of the three-worker target, over one 12 s
//!   run (in all, and its 10 s in the middle from the threads' `schedstat`);
//! - the BPF program's run time per sample of the target, with and without the Python
//!   walk (`EbpfSampler::run_time`, with `kernel.bpf_stats_enabled=1` for the
//!   measurement);
//! - the memory of the name cache, as the profile's summary reports it.
//!
//! `cargo bench -p otel-ctx --features ebpf --bench python_overhead` as root, after
//! `bash scripts/python-targets.sh`. `OTEL_CTX_BENCH_WINDOW_S` (default 3) and
//! `OTEL_CTX_BENCH_ROUNDS` (default 5) set the window and the rounds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use otel_ctx_reader::{ProcessMaps, ThreadReader};
use otel_ctx_sampler::ebpf::{EbpfOptions, EbpfSampler};
use otel_ctx_sampler::python::PythonProcess;

mod support;

use support::{wait_usage, Target};

const OTEL_CTX: &str = env!("CARGO_BIN_EXE_otel-ctx");
const HZ: &str = "99";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-overhead");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The Python target, publishing through `libotel_ctx_ffi.so` (built through cargo).
fn start_target(workers: &str) -> Target {
    let built = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "otel-ctx-ffi"])
        .current_dir(workspace())
        .status()
        .expect("cargo");
    assert!(built.success(), "cargo build -p otel-ctx-ffi");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    let mut command = Command::new("/usr/bin/python3.11");
    command
        .env("SERVICE_WORKERS", workers)
        .arg(workspace().join("sampler-linux/tests/python/service.py"))
        .arg("ffi")
        .arg(target_dir.join("release/libotel_ctx_ffi.so"));
    Target::spawn(command)
}

fn py_spy() -> PathBuf {
    let path = workspace().join("target/python/py311/bin/py-spy");
    assert!(
        path.exists(),
        "{}: bash scripts/python-targets.sh",
        path.display()
    );
    path
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Profiler {
    Ebpf,
    Ptrace,
    PySpy,
    PySpyNonblocking,
}

impl Profiler {
    const ALL: [Self; 4] = [
        Self::Ebpf,
        Self::Ptrace,
        Self::PySpy,
        Self::PySpyNonblocking,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Ebpf => "`otel-ctx profile` (eBPF)",
            Self::Ptrace => "`otel-ctx profile --ptrace`",
            Self::PySpy => "`py-spy record` (default: stops the process)",
            Self::PySpyNonblocking => "`py-spy record --nonblocking`",
        }
    }

    /// The command for `secs` seconds on `pid`, writing to `out`.
    fn command(self, pid: &str, secs: u64, out: &Path) -> Vec<String> {
        let d = secs.to_string();
        let out = out.to_str().expect("utf-8").to_owned();
        let ours = |extra: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = [OTEL_CTX, "profile", pid, "--hz", HZ, "--duration"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            v.push(format!("{secs}s"));
            v.extend(["-o".to_owned(), out.clone(), "--quiet".to_owned()]);
            v.extend(extra.iter().map(|s| (*s).to_owned()));
            v
        };
        let spy = |extra: &[&str]| -> Vec<String> {
            let mut v = vec![py_spy().to_str().expect("utf-8").to_owned()];
            v.extend(
                [
                    "record", "-r", HZ, "-d", &d, "-f", "raw", "-p", pid, "-o", &out,
                ]
                .iter()
                .map(|s| (*s).to_owned()),
            );
            v.extend(extra.iter().map(|s| (*s).to_owned()));
            v
        };
        match self {
            Self::Ebpf => ours(&[]),
            Self::Ptrace => ours(&["--ptrace"]),
            Self::PySpy => spy(&[]),
            Self::PySpyNonblocking => spy(&["--nonblocking"]),
        }
    }

    /// The thread samples a finished run took, from what it printed.
    fn samples(self, printed: &str) -> u64 {
        let number = |after: &str| {
            printed
                .split(after)
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        match self {
            // "<n> samples in ..." starts the summary.
            Self::Ebpf | Self::Ptrace => printed
                .lines()
                .find(|l| l.contains(" samples in "))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            Self::PySpy | Self::PySpyNonblocking => number("Samples: "),
        }
    }
}

/// Starts `argv` with its output in `log`.
fn spawn(argv: &[String], log: &Path) -> std::process::Child {
    let file = std::fs::File::create(log).expect("the log");
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(file.try_clone().expect("the log"))
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {argv:?}: {e}"))
}

const SETTLE: Duration = Duration::from_secs(1);

/// The target's rounds per second over `secs`, with `profiler` running (or none).
fn window(target: &mut Target, profiler: Option<Profiler>, secs: u64, dir: &Path) -> f64 {
    let Some(profiler) = profiler else {
        let (n0, t0) = target.iterations();
        std::thread::sleep(Duration::from_secs(secs));
        let (n1, t1) = target.iterations();
        return (n1 - n0) as f64 / (t1 - t0).as_secs_f64();
    };
    let out = dir.join(format!("{profiler:?}.folded"));
    let argv = profiler.command(&target.pid(), secs + 2 * SETTLE.as_secs(), &out);
    let child = spawn(&argv, &dir.join(format!("{profiler:?}.log")));
    std::thread::sleep(SETTLE);
    let (n0, t0) = target.iterations();
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = target.iterations();
    let ended = wait_usage(child);
    assert!(ended.success, "{argv:?} failed");
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

/// The CPU time of every thread of process `pid` so far, in nanoseconds (the first field
/// of each thread's `schedstat`: finer than the clock ticks of `stat`).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The BPF program's run time per tick on the target over `secs`, with or without the
/// Python walk: (ticks on the target, ns per run, ns per target tick).
fn bpf_run_time(pid: u32, python: bool, secs: u64) -> (u64, f64, f64) {
    let mut reader = ThreadReader::open(pid).expect("the target's thread contexts");
    let options = EbpfOptions::default()
        .with_frequency_hz(99)
        .with_stack_size(otel_ctx_sampler::stack::DEFAULT_STACK_SIZE);
    let mut sampler = EbpfSampler::new(options).expect("the eBPF sampler");
    sampler.add_process(&reader).expect("follow the target");
    if python {
        let maps = ProcessMaps::read(pid).expect("maps");
        let interpreter = PythonProcess::find(&maps)
            .expect("the interpreter")
            .expect("a Python process");
        sampler
            .set_process_python(pid, &interpreter)
            .expect("the Python walk");
    }
    let (runs0, time0) = sampler.run_time().expect("run time");
    let ticks0 = sampler.counters().expect("counters").ticks;
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        let _ = sampler.wait(Duration::from_millis(100));
        while sampler.next_sample(&mut reader).is_some() {}
    }
    let (runs1, time1) = sampler.run_time().expect("run time");
    let ticks = sampler.counters().expect("counters").ticks - ticks0;
    let ns = (time1 - time0).as_nanos() as f64;
    (
        ticks,
        ns / (runs1 - runs0).max(1) as f64,
        ns / ticks.max(1) as f64,
    )
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
        "python_overhead: {cpu}, {} CPUs, {rounds} rounds of {secs} s windows at {HZ} Hz, \
         load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let dir = scratch();
    // The slowdown of one CPU-bound worker (three contend for the GIL, and the speed of
    // their rounds follows how the GIL is handed over more than any profiler's cost).
    let mut target = start_target("1");
    // Warm-up: the first profile reads the modules.
    let _ = window(&mut target, Some(Profiler::Ebpf), 1, &dir);

    let mut slowdowns: BTreeMap<Profiler, Vec<f64>> = BTreeMap::new();
    let mut before = window(&mut target, None, secs, &dir);
    for round in 0..rounds {
        for profiler in Profiler::ALL {
            let with = window(&mut target, Some(profiler), secs, &dir);
            let after = window(&mut target, None, secs, &dir);
            let baseline = (before + after) / 2.0;
            slowdowns
                .entry(profiler)
                .or_default()
                .push(100.0 * (1.0 - with / baseline));
            before = after;
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }

    drop(target);
    // CPU per thread sample, on the three-worker target: one 12 s run of each; in all
    // (start and end included), and over its 10 s in the middle (its samples there taken
    // as 10/12 of its count).
    let target = start_target("3");
    let pid: u32 = target.pid().parse().expect("a pid");
    let mut per_sample = BTreeMap::new();
    for profiler in Profiler::ALL {
        let out = dir.join(format!("{profiler:?}-cpu.folded"));
        let log = dir.join(format!("{profiler:?}-cpu.log"));
        let argv = profiler.command(&target.pid(), 12, &out);
        let child = spawn(&argv, &log);
        let id = child.id();
        std::thread::sleep(SETTLE);
        let c0 = cpu_ns(id);
        std::thread::sleep(Duration::from_secs(10));
        let steady = (cpu_ns(id) - c0) as f64 / 1e9;
        let ended = wait_usage(child);
        assert!(ended.success, "{argv:?}");
        let printed = std::fs::read_to_string(&log).unwrap_or_default();
        let samples = profiler.samples(&printed);
        let cache = printed
            .lines()
            .find(|l| l.starts_with("python: "))
            .map(str::to_owned);
        per_sample.insert(
            profiler,
            (ended.cpu_s, steady, samples, ended.max_rss_kib, cache),
        );
    }

    // The BPF program's run time per sample, with and without the Python walk.
    let stats = "/proc/sys/kernel/bpf_stats_enabled";
    let was = std::fs::read_to_string(stats).unwrap_or_default();
    std::fs::write(stats, "1").expect("enable the BPF statistics (root)");
    let without = bpf_run_time(pid, false, 10);
    let with = bpf_run_time(pid, true, 10);
    let _ = std::fs::write(stats, was.trim());

    println!();
    println!("| profiler, 99 Hz | target slowdown, median (quartiles) | CPU per thread sample, steady (in all) | thread samples in 12 s | CPU in 12 s | peak memory |");
    println!("|---|---:|---:|---:|---:|---:|");
    for profiler in Profiler::ALL {
        let (q1, median, q3) = support::quartiles(slowdowns[&profiler].clone());
        let (cpu_s, steady, samples, rss, _) = &per_sample[&profiler];
        let samples = (*samples).max(1) as f64;
        println!(
            "| {} | {median:+.2}% ({q1:+.2}% to {q3:+.2}%) | {:.1} µs ({:.1} µs) | {samples} | {:.3} s | {:.1} MiB |",
            profiler.name(),
            steady * 1e6 / (samples * 10.0 / 12.0),
            cpu_s * 1e6 / samples,
            cpu_s,
            *rss as f64 / 1024.0
        );
    }
    println!();
    println!(
        "BPF program per run (every tick of every CPU) and per tick on the target: without \
         the Python walk {:.0} ns and {:.0} ns ({} ticks), with it {:.0} ns and {:.0} ns \
         ({} ticks): the walk costs {:.2} µs per sample",
        without.1,
        without.2,
        without.0,
        with.1,
        with.2,
        with.0,
        (with.2 - without.2) / 1000.0
    );
    for profiler in [Profiler::Ebpf, Profiler::Ptrace] {
        if let Some(line) = &per_sample[&profiler].4 {
            println!("{}: {line}", profiler.name());
        }
    }
}
