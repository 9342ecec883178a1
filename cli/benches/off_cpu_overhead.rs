//! What measuring off-CPU time costs, side by side in one run: pairs of threads pass a
//! byte back and forth through pipes (`benches/fixtures/switches.c`), spinning between
//! passes for as long as makes them switch about 10,000 and then about 100,000 times a
//! second in all, while, in turn, nothing profiles them, `otel-ctx profile` (eBPF, CPU
//! time alone) and `otel-ctx profile --off-cpu` (eBPF: the scheduler's switches and the
//! system calls' returns followed, each wait of 200 us or more sampled) run at 99 Hz for
//! one window.
//!
//! Every window with a profiler sits between two without one and is compared with their
//! mean; each row reports the median and quartiles of its per-window slowdowns (passes
//! per second), the profiler's own CPU time as a share of a CPU, and, with `--off-cpu`,
//! its CPU per off-CPU sample (the waits it sampled, from its summary). The switch rate
//! is the target's own count (`voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches`
//! of its threads).
//!
//! `cargo bench -p otel-ctx --features ebpf --bench off_cpu_overhead` as root.
//! `OTEL_CTX_BENCH_WINDOW_S` (default 3) and `OTEL_CTX_BENCH_ROUNDS` (default 5) set the
//! window and the rounds, `OTEL_CTX_BENCH_RATES` (default `10000,100000`) the switch rates.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{cpu_seconds, Target};

/// The pairs of threads passing bytes.
const PAIRS: &str = "2";

fn scratch() -> PathBuf {
    support::scratch("off-cpu-overhead")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Profiler {
    Cpu,
    OffCpu,
}

impl Profiler {
    const ALL: [Self; 2] = [Self::Cpu, Self::OffCpu];

    fn name(self) -> &'static str {
        match self {
            Self::Cpu => "otel-ctx profile (eBPF, CPU time)",
            Self::OffCpu => "otel-ctx profile --off-cpu (eBPF)",
        }
    }

    fn command(self, pid: &str, secs: u64, out: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_otel-ctx"));
        command
            .args(["profile", pid, "--sampler", "ebpf", "--hz", "99"])
            .args(["--duration", &format!("{secs}s"), "-o"])
            .arg(out);
        if self == Self::OffCpu {
            command.arg("--off-cpu");
        }
        command
    }
}

/// The context switches of every thread of `pid` so far.
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The target's passes and switches per second over `span`, unprofiled.
fn rates(target: &mut Target, span: Duration) -> (f64, f64) {
    let pid = target.child.id();
    let (n0, t0) = target.iterations();
    let s0 = switches(pid);
    std::thread::sleep(span);
    let (n1, t1) = target.iterations();
    let s1 = switches(pid);
    let secs = (t1 - t0).as_secs_f64();
    ((n1 - n0) as f64 / secs, (s1 - s0) as f64 / secs)
}

/// Sets the target's spin so that it switches about `wanted` times a second: the spin,
/// and the rate reached.
fn calibrate(target: &mut Target, wanted: f64) -> (u64, f64) {
    let (mut low, mut high) = (0u64, 1u64 << 24);
    let mut best = (0, 0.0);
    for _ in 0..20 {
        let spin = (low + high) / 2;
        assert_eq!(target.ask(&format!("spin {spin}")), "ok");
        let (_, rate) = rates(target, Duration::from_millis(500));
        if (rate - wanted).abs() < (best.1 - wanted).abs() {
            best = (spin, rate);
        }
        if (rate - wanted).abs() < wanted * 0.05 {
            break;
        }
        if rate > wanted {
            low = spin;
        } else {
            high = spin;
        }
    }
    assert_eq!(target.ask(&format!("spin {}", best.0)), "ok");
    best
}

/// How long a profiler runs before and after the measured span (its start and its end
/// are one-time costs).
const SETTLE: Duration = Duration::from_secs(1);

/// One window with `profiler`: the target's passes per second, the profiler's CPU
/// seconds meanwhile, and the off-CPU samples its summary counts.
fn window(target: &mut Target, profiler: Profiler, secs: u64) -> (f64, f64, u64) {
    let out = scratch().join("window.pb.gz");
    let err = scratch().join("window.stderr");
    let child: Child = profiler
        .command(&target.pid(), secs + 2 * SETTLE.as_secs(), &out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start otel-ctx");
    std::thread::sleep(SETTLE);
    let (n0, t0) = target.iterations();
    let c0 = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = target.iterations();
    let c1 = cpu_seconds(child.id());
    let ended = support::wait_usage(child);
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(ended.success, "{} failed:\n{said}", profiler.name());
    let sampled = said
        .lines()
        .find_map(|l| l.strip_prefix("off-CPU: "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let elapsed = (t1 - t0).as_secs_f64();
    ((n1 - n0) as f64 / elapsed, c1 - c0, sampled)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (secs, rounds) = support::window_and_rounds();
    let cpu = support::cpu_name();
    println!(
        "off_cpu_overhead: {cpu}, {} CPUs, {rounds} rounds of {secs} s windows at 99 Hz, \
         {PAIRS} pairs of threads",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let exe = support::c_target(&scratch(), "switches");
    let mut command = Command::new(exe);
    command.arg(PAIRS);
    let mut target = Target::spawn(command);
    // Warm-up: the first profile reads the modules.
    let _ = window(&mut target, Profiler::OffCpu, 1);
    // OTEL_CTX_BENCH_RATES=10000 measures one rate.
    let wanted_rates: Vec<f64> = std::env::var("OTEL_CTX_BENCH_RATES")
        .ok()
        .map(|r| r.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000.0, 100_000.0]);
    for wanted in wanted_rates {
        let (spin, reached) = calibrate(&mut target, wanted);
        println!("\n{wanted:.0} switches/s asked: spin {spin}, {reached:.0} switches/s unprofiled");
        println!("| profiler, 99 Hz | target slowdown, median (quartiles) | profiler CPU, % of one CPU | profiler CPU per off-CPU sample |");
        println!("|---|---:|---:|---:|");
        for profiler in Profiler::ALL {
            let mut slowdowns = Vec::new();
            let (mut cpu_s, mut samples, mut measured) = (0.0, 0u64, 0.0);
            for _ in 0..rounds {
                let (before, _) = rates(&mut target, Duration::from_secs(secs));
                let started = Instant::now();
                let (with, cpu, sampled) = window(&mut target, profiler, secs);
                measured += started.elapsed().as_secs_f64().min(secs as f64);
                let (after, _) = rates(&mut target, Duration::from_secs(secs));
                slowdowns.push(1.0 - with / ((before + after) / 2.0));
                cpu_s += cpu;
                samples += sampled;
            }
            let (q1, median, q3) = support::quartiles(slowdowns);
            let per_sample = match samples {
                0 => "-".to_owned(),
                n => format!("{:.1} us ({n} samples)", cpu_s * 1e6 / n as f64),
            };
            println!(
                "| {} | {:+.2}% ({:+.2}% to {:+.2}%) | {:.1}% | {per_sample} |",
                profiler.name(),
                median * 100.0,
                q1 * 100.0,
                q3 * 100.0,
                cpu_s * 100.0 / measured.max(1e-9),
            );
        }
    }
}
