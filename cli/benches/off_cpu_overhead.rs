//! What measuring off-CPU time costs, side by side in one run: pairs of threads pass a
//! byte back and forth through pipes (`benches/fixtures/switches.c`), spinning between
//! passes for as long as makes them switch about 10,000 and then about 100,000 times a
//! second in all, while, in turn, nothing profiles them, `otel-ctx profile` (eBPF, CPU
//! time alone), `otel-ctx profile --off-cpu` (eBPF: the scheduler's switches and the
//! system calls' returns followed, each wait of 200 us or more sampled, within the
//! default bound of samples a second) and the same within 1000 samples a second run at
//! 99 Hz for one window.
//!
//! The profilers take turns, round after round; every window with a profiler sits between
//! two without one and is compared with their mean; each row reports the median and
//! quartiles of its per-window slowdowns (passes per second), the profiler's own CPU time
//! as a share of a CPU, and, with `--off-cpu`, its CPU per off-CPU sample (the waits it
//! sampled, from its summary). Beside them, the kernel's count of the BPF programs' own
//! run time (`kernel.bpf_stats_enabled`): time the profiler takes on the CPUs of the
//! threads it follows, which no process's CPU clock shows as its own. Counting costs time
//! at every run of a program, so the count is on only in one more window of each row,
//! after the rounds, whose slowdown is not counted. The switch rate is the target's own
//! count (`voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of its threads).
//!
//! `cargo bench -p otel-ctx --features ebpf --bench off_cpu_overhead` as root.
//! `OTEL_CTX_BENCH_WINDOW_S` (default 3) and `OTEL_CTX_BENCH_ROUNDS` (default 5) set the
//! window and the rounds, `OTEL_CTX_BENCH_RATES` (default `10000,100000`) the switch rates;
//! `OTEL_CTX_BENCH_BEFORE=<path of another otel-ctx>` adds a row of its `--off-cpu`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{cpu_seconds, Target};

/// The pairs of threads passing bytes.
const PAIRS: &str = "2";

/// The kernel's switch for BPF run-time statistics.
const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The profiler's BPF programs: at the scheduler's switch, at a system call's return
/// (both only with `--off-cpu`), and at the tick.
const PROGRAMS: [&str; 3] = ["note_switch", "sample_off_cpu", "sample_thread_context"];

/// How often each of [`PROGRAMS`] has run, and for how long in all (ns), summed over
/// the loaded copies of it (the kernel keeps 15 bytes of a program's name).
fn bpf_run_times() -> [(u64, u64); 3] {
    let mut times = [(0, 0); 3];
    for info in aya::programs::loaded_programs().flatten() {
        let name = info.name_as_str().unwrap_or_default();
        if name.is_empty() {
            continue;
        }
        if let Some(i) = PROGRAMS.iter().position(|p| p.starts_with(name)) {
            times[i].0 += info.run_count();
            times[i].1 += info.run_time().as_nanos() as u64;
        }
    }
    times
}

fn scratch() -> PathBuf {
    support::scratch("off-cpu-overhead")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Profiler {
    Cpu,
    OffCpu,
    /// With `--off-cpu-max-rate 1000`, ten times the default.
    OffCpuDense,
    /// `--off-cpu` by the build `OTEL_CTX_BENCH_BEFORE` names, when it does.
    OffCpuBefore,
}

impl Profiler {
    /// Those measured: the build before this one only when one is named.
    fn all() -> Vec<Self> {
        let mut all = vec![Self::Cpu, Self::OffCpu, Self::OffCpuDense];
        if before().is_some() {
            all.push(Self::OffCpuBefore);
        }
        all
    }

    fn name(self) -> &'static str {
        match self {
            Self::Cpu => "otel-ctx profile (eBPF, CPU time)",
            Self::OffCpu => "otel-ctx profile --off-cpu (eBPF)",
            Self::OffCpuDense => "otel-ctx profile --off-cpu --off-cpu-max-rate 1000 (eBPF)",
            Self::OffCpuBefore => "otel-ctx profile --off-cpu (eBPF), the build before",
        }
    }

    fn command(self, pid: &str, secs: u64, out: &Path) -> Command {
        let exe = match self {
            Self::OffCpuBefore => before().expect("a build before"),
            _ => PathBuf::from(env!("CARGO_BIN_EXE_otel-ctx")),
        };
        let mut command = Command::new(exe);
        command
            .args(["profile", pid, "--sampler", "ebpf", "--hz", "99"])
            .args(["--duration", &format!("{secs}s"), "-o"])
            .arg(out);
        match self {
            Self::Cpu => {}
            Self::OffCpu | Self::OffCpuBefore => {
                command.arg("--off-cpu");
            }
            Self::OffCpuDense => {
                command.args(["--off-cpu", "--off-cpu-max-rate", "1000"]);
            }
        }
        command
    }
}

/// Another build of `otel-ctx` to measure beside this one (`OTEL_CTX_BENCH_BEFORE`).
fn before() -> Option<PathBuf> {
    std::env::var_os("OTEL_CTX_BENCH_BEFORE").map(PathBuf::from)
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

/// What one window with a profiler measured.
struct Window {
    /// The target's passes per second.
    rate: f64,
    /// The profiler's CPU seconds.
    cpu_s: f64,
    /// The off-CPU samples its summary counts (the whole run's).
    sampled: u64,
    /// The target's context switches.
    switches: u64,
    /// Each of [`PROGRAMS`]' runs and run time (ns).
    bpf: [(u64, u64); 3],
}

/// One window with `profiler`, of `secs` measured.
fn window(target: &mut Target, profiler: Profiler, secs: u64) -> Window {
    let out = scratch().join("window.pb.gz");
    let err = scratch().join("window.stderr");
    let child: Child = profiler
        .command(&target.pid(), secs + 2 * SETTLE.as_secs(), &out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start otel-ctx");
    std::thread::sleep(SETTLE);
    let pid = child.id();
    let (n0, t0) = target.iterations();
    let (c0, s0, b0) = (
        cpu_seconds(pid),
        switches(target.child.id()),
        bpf_run_times(),
    );
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = target.iterations();
    let (c1, s1, b1) = (
        cpu_seconds(pid),
        switches(target.child.id()),
        bpf_run_times(),
    );
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
    let bpf = std::array::from_fn(|i| (b1[i].0 - b0[i].0, b1[i].1 - b0[i].1));
    Window {
        rate: (n1 - n0) as f64 / elapsed,
        cpu_s: c1 - c0,
        sampled,
        switches: s1 - s0,
        bpf,
    }
}

/// What the rounds of one profiler measured.
#[derive(Default)]
struct Tally {
    /// Each window's slowdown of the target, beside the mean of the windows around it.
    slowdowns: Vec<f64>,
    /// The profiler's CPU seconds in the measured spans.
    cpu_s: f64,
    /// The off-CPU samples its summaries count.
    samples: u64,
    /// The measured spans' seconds.
    measured: f64,
}

/// ns per run of a program's `(runs, ns)`, or `-` when it did not run.
fn per_run((runs, ns): (u64, u64)) -> String {
    match runs {
        0 => "-".to_owned(),
        n => format!("{:.0}", ns as f64 / n as f64),
    }
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
    let stats_before = std::fs::read_to_string(STATS).unwrap_or_else(|_| "0".into());
    let stats =
        |on: &str| std::fs::write(STATS, on).expect("switch BPF run-time statistics (needs root)");
    stats("0");
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
        println!("| profiler, 99 Hz | target slowdown, median (quartiles) | profiler CPU, % of one CPU | profiler CPU per off-CPU sample | BPF, % of one CPU | BPF per switch of the target | ns per run: switch, return, tick |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        // Rounds of every profiler in turn, so that a drift of the host's speed over the
        // run weighs on each alike; each window between two without a profiler.
        let profilers = Profiler::all();
        let mut tally: Vec<Tally> = profilers.iter().map(|_| Tally::default()).collect();
        let (mut before, _) = rates(&mut target, Duration::from_secs(secs));
        for _ in 0..rounds {
            for (profiler, tally) in profilers.iter().zip(&mut tally) {
                let started = Instant::now();
                let with = window(&mut target, *profiler, secs);
                tally.measured += started.elapsed().as_secs_f64().min(secs as f64);
                let (after, _) = rates(&mut target, Duration::from_secs(secs));
                tally
                    .slowdowns
                    .push(1.0 - with.rate / ((before + after) / 2.0));
                tally.cpu_s += with.cpu_s;
                tally.samples += with.sampled;
                before = after;
            }
        }
        for (profiler, tally) in profilers.into_iter().zip(tally) {
            let Tally {
                slowdowns,
                cpu_s,
                samples,
                measured,
            } = tally;
            // The BPF programs' run time, in a window of its own.
            stats("1");
            let started = Instant::now();
            let counted = window(&mut target, profiler, secs);
            let counted_s = started.elapsed().as_secs_f64().min(secs as f64);
            stats("0");
            let (switched, bpf) = (counted.switches, counted.bpf);
            let (q1, median, q3) = support::quartiles(slowdowns);
            let per_sample = match samples {
                0 => "-".to_owned(),
                n => format!("{:.1} us ({n} samples)", cpu_s * 1e6 / n as f64),
            };
            let bpf_ns: u64 = bpf.iter().map(|p| p.1).sum();
            // The tick's program runs with or without --off-cpu: per switch, the other two.
            let per_switch = (bpf[0].1 + bpf[1].1) as f64 / switched.max(1) as f64;
            println!(
                "| {} | {:+.2}% ({:+.2}% to {:+.2}%) | {:.1}% | {per_sample} | {:.2}% | {per_switch:.0} ns | {}, {}, {} |",
                profiler.name(),
                median * 100.0,
                q1 * 100.0,
                q3 * 100.0,
                cpu_s * 100.0 / measured.max(1e-9),
                bpf_ns as f64 / 1e7 / counted_s.max(1e-9),
                per_run(bpf[0]),
                per_run(bpf[1]),
                per_run(bpf[2]),
            );
        }
    }
    std::fs::write(STATS, stats_before.trim()).expect("restore kernel.bpf_stats_enabled");
}
