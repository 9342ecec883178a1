//! What sampling costs a CPU-bound target: four threads, each with a thread context
//! attached, count loop iterations of some arithmetic (`tests/ebpf_fixtures/counting.c`,
//! built with gcc), and their throughput is measured with the ptrace sampler at 99 Hz
//! (rounds that stop every thread, as `otel-ctx watch` does), with the eBPF sampler at
//! 99 Hz and 999 Hz per CPU, and with the eBPF sampler ticking at 999 Hz for another,
//! stopped process (the cost of the perf-event ticks alone: the program returns at its
//! first test).
//!
//! Every window with a sampler sits between two windows without one and is compared with
//! their mean, so that a slow or fast spell of the machine moves both sides of a
//! comparison alike; the configurations take turns in a different order each round, and
//! each row reports the median and quartiles of its per-window slowdowns. Throughput is
//! given per second of wall time and per second of the target's own CPU time (the
//! scheduler's account in `/proc/<pid>/task/*/schedstat`, which leaves out CPU time other
//! processes, the sampler included, took from the target).
//!
//! Cost per sample: on the target's side, the work it lost per CPU-second times the CPUs
//! it keeps busy, divided by the samples taken; on the sampler's side, the time of one
//! `sample_into` (ptrace, wall time, most of it waiting for the thread to stop) or of one
//! run of the BPF program (the kernel's own statistics, `kernel.bpf_stats_enabled`,
//! switched on for the run and restored after), and this process's CPU time per sample
//! (the reader's system calls and user space).
//!
//! `cargo bench -p otel-ctx-reader --features ebpf --bench ebpf_overhead` as root.
//! `OTEL_CTX_BENCH_WINDOW_MS` (default 1000) and `OTEL_CTX_BENCH_ROUNDS` (default 12) set
//! the length of each window and the number of rounds (each round is 8 windows).

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_reader::thread::ThreadReaderOptions;
use otel_ctx_reader::{RecordBuffer, ThreadReader};
use otel_ctx_sampler::ebpf::{EbpfOptions, EbpfSampler};

const TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

struct Target {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Target {
    fn start() -> Self {
        let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ebpf-bench-counting");
        let status = Command::new("gcc")
            .args(["-O2", "-pthread", "-rdynamic", "-o"])
            .arg(&exe)
            .arg(format!("{TESTS}/ebpf_fixtures/counting.c"))
            .arg(format!(
                "{TESTS}/../../reader-linux/tests/fixtures/tls/writer.c"
            ))
            .status()
            .expect("run gcc");
        assert!(status.success(), "gcc failed");
        let mut child = Command::new(&exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the target");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = lines.next().expect("target output").expect("target output");
        assert_eq!(ready, "ready");
        Self { child, lines }
    }

    /// The target's iterations so far, when they were read, and the CPU time its threads
    /// had used then (ns, the scheduler's own account in `/proc/<pid>/task/*/schedstat`).
    fn iterations(&mut self) -> (u64, Instant, u64) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"\n").expect("ask for the count");
        stdin.flush().expect("flush");
        let line = self.lines.next().expect("count").expect("count");
        let at = Instant::now();
        let mut cpu = 0u64;
        let tasks = format!("/proc/{}/task", self.child.id());
        for entry in std::fs::read_dir(tasks).expect("the target's threads") {
            let path = entry.expect("a thread").path().join("schedstat");
            if let Ok(stat) = std::fs::read_to_string(path) {
                cpu += stat
                    .split_whitespace()
                    .next()
                    .and_then(|ns| ns.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        (line.trim().parse().expect("a count"), at, cpu)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sampler {
    None,
    Ptrace(u32),
    Ebpf(u64),
    /// The eBPF sampler aimed at another, stopped process: the ticks' cost alone.
    EbpfElsewhere(u64),
}

impl Sampler {
    fn name(self) -> String {
        match self {
            Self::None => "no sampler".into(),
            Self::Ptrace(hz) => format!("ptrace, {hz} Hz (every thread per round)"),
            Self::Ebpf(hz) => format!("eBPF, {hz} Hz per CPU"),
            Self::EbpfElsewhere(hz) => format!("eBPF, {hz} Hz, another process"),
        }
    }
}

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    /// Target iterations per second.
    rate: f64,
    /// Target iterations per second of its own CPU time: unlike `rate`, not lowered when
    /// other processes of the machine take CPU time from the target.
    per_cpu_s: f64,
    /// Samples per second.
    samples: f64,
    /// Sampler-side time per sample, in ns.
    sampler_ns: f64,
    /// This process's CPU time during the window (the sampler's user space and system
    /// calls), in ns per sample.
    reader_cpu_ns: f64,
}

/// This process's CPU time so far, in ns: every thread's, user and system.
fn own_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

fn measure(
    target: &mut Target,
    reader: &mut ThreadReader,
    elsewhere: &mut ThreadReader,
    sampler: Sampler,
    window: Duration,
) -> Run {
    match sampler {
        Sampler::None => {
            let (c0, t0, cpu0) = target.iterations();
            std::thread::sleep(window);
            let (c1, t1, cpu1) = target.iterations();
            Run {
                rate: (c1 - c0) as f64 / (t1 - t0).as_secs_f64(),
                per_cpu_s: (c1 - c0) as f64 * 1e9 / (cpu1 - cpu0).max(1) as f64,
                ..Run::default()
            }
        }
        Sampler::Ptrace(hz) => {
            let stop = Arc::new(AtomicBool::new(false));
            // Samples taken and the time spent in `sample_into`, in ns, so far.
            let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let pid = reader.pid();
            let (flag, shared) = (stop.clone(), counts.clone());
            let worker = std::thread::spawn(move || {
                let options = ThreadReaderOptions::default().with_require_known_schema(false);
                let mut reader = ThreadReader::with_options(pid, options).expect("reader");
                let mut buffer = RecordBuffer::new();
                let tids = reader.tids().expect("threads");
                let period = Duration::from_secs(1) / hz;
                let mut next = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    for &tid in &tids {
                        let t = Instant::now();
                        let _ = reader.sample_into(tid, &mut buffer);
                        let spent = t.elapsed().as_nanos() as u64;
                        shared[0].fetch_add(1, Ordering::Relaxed);
                        shared[1].fetch_add(spent, Ordering::Relaxed);
                    }
                    next += period;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
            });
            // Let the worker open its reader before the window starts.
            while counts[0].load(Ordering::Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (c0, t0, cpu0) = target.iterations();
            let (own0, n0, ns0) = (
                own_cpu_ns(),
                counts[0].load(Ordering::Relaxed),
                counts[1].load(Ordering::Relaxed),
            );
            std::thread::sleep(window);
            let (c1, t1, cpu1) = target.iterations();
            let (own1, n1, ns1) = (
                own_cpu_ns(),
                counts[0].load(Ordering::Relaxed),
                counts[1].load(Ordering::Relaxed),
            );
            stop.store(true, Ordering::Relaxed);
            worker.join().expect("ptrace sampler");
            let secs = (t1 - t0).as_secs_f64();
            let samples = (n1 - n0) as f64;
            Run {
                rate: (c1 - c0) as f64 / secs,
                per_cpu_s: (c1 - c0) as f64 * 1e9 / (cpu1 - cpu0).max(1) as f64,
                samples: samples / secs,
                sampler_ns: (ns1 - ns0) as f64 / samples.max(1.0),
                reader_cpu_ns: (own1 - own0) / samples.max(1.0),
            }
        }
        Sampler::Ebpf(hz) | Sampler::EbpfElsewhere(hz) => {
            let options = EbpfOptions::default().with_frequency_hz(hz);
            let reader = if let Sampler::Ebpf(_) = sampler {
                reader
            } else {
                elsewhere
            };
            let mut ebpf = EbpfSampler::new(options).expect("start the eBPF sampler");
            ebpf.add_process(reader).expect("follow the target");
            let (runs0, time0) = ebpf.run_time().expect("run time");
            let (c0, t0, cpu0) = target.iterations();
            let own0 = own_cpu_ns();
            let mut samples = 0u64;
            while t0.elapsed() < window {
                let _ = ebpf.wait(Duration::from_millis(50));
                while let Some(sample) = ebpf.next_sample(reader) {
                    assert!(sample.context.is_ok(), "{:?}", sample.context.err());
                    samples += 1;
                }
            }
            let (c1, t1, cpu1) = target.iterations();
            let own1 = own_cpu_ns();
            let (runs1, time1) = ebpf.run_time().expect("run time");
            let runs = runs1 - runs0;
            Run {
                rate: (c1 - c0) as f64 / (t1 - t0).as_secs_f64(),
                per_cpu_s: (c1 - c0) as f64 * 1e9 / (cpu1 - cpu0).max(1) as f64,
                samples: samples as f64 / (t1 - t0).as_secs_f64(),
                sampler_ns: (time1 - time0).as_nanos() as f64 / runs.max(1) as f64,
                reader_cpu_ns: (own1 - own0) / samples.max(1) as f64,
            }
        }
    }
}

/// The `q` quantile (0 to 1) of `v`, by the nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One configuration's window and the mean of the no-sampler windows just before and
/// just after it.
struct Paired {
    run: Run,
    base: Run,
}

impl Paired {
    /// The share of the target's iterations per second lost to the sampler.
    fn loss(&self) -> f64 {
        1.0 - self.run.rate / self.base.rate
    }

    /// The share of the target's iterations per CPU-second lost to the sampler.
    fn loss_per_cpu(&self) -> f64 {
        1.0 - self.run.per_cpu_s / self.base.per_cpu_s
    }
}

/// "median (first quartile to third quartile)" of `v`, as percentages.
fn spread(v: &[f64]) -> String {
    format!(
        "{:+.2}% ({:+.2} to {:+.2})",
        quantile(v, 0.5) * 100.0,
        quantile(v, 0.25) * 100.0,
        quantile(v, 0.75) * 100.0
    )
}

fn main() {
    let window = Duration::from_millis(env_number("OTEL_CTX_BENCH_WINDOW_MS", 1000));
    let rounds = env_number("OTEL_CTX_BENCH_ROUNDS", 12).max(1) as usize;
    let stats_before = std::fs::read_to_string(STATS).unwrap_or_else(|_| "0".into());
    std::fs::write(STATS, "1").expect("switch on BPF run-time statistics (needs root)");

    let mut target = Target::start();
    let options = ThreadReaderOptions::default().with_require_known_schema(false);
    let mut reader =
        ThreadReader::with_options(target.child.id(), options).expect("open the target");
    // A second target, stopped at once: a process the eBPF program filters out.
    let stopped = Target::start();
    let mut elsewhere =
        ThreadReader::with_options(stopped.child.id(), options).expect("open the stopped target");
    let stopped_pid = rustix::process::Pid::from_raw(stopped.child.id() as i32)
        .expect("a process id is positive");
    rustix::process::kill_process(stopped_pid, rustix::process::Signal::STOP)
        .expect("stop the second target");
    let configs = [
        Sampler::Ptrace(99),
        Sampler::Ebpf(99),
        Sampler::Ebpf(999),
        Sampler::EbpfElsewhere(999),
    ];
    // Every window with a sampler sits between two windows without one, and is compared
    // with their mean: a slow or fast spell of the machine that spans a few seconds
    // moves both sides of a comparison alike.
    let mut paired: Vec<Vec<Paired>> = configs.iter().map(|_| Vec::new()).collect();
    let none = Sampler::None;
    let mut before = measure(&mut target, &mut reader, &mut elsewhere, none, window);
    for round in 0..rounds {
        // A different order each round.
        for k in 0..configs.len() {
            let i = (k + round) % configs.len();
            let run = measure(&mut target, &mut reader, &mut elsewhere, configs[i], window);
            let after = measure(&mut target, &mut reader, &mut elsewhere, none, window);
            let base = Run {
                rate: (before.rate + after.rate) / 2.0,
                per_cpu_s: (before.per_cpu_s + after.per_cpu_s) / 2.0,
                ..Run::default()
            };
            paired[i].push(Paired { run, base });
            before = after;
        }
    }
    std::fs::write(STATS, stats_before.trim()).expect("restore kernel.bpf_stats_enabled");

    // The CPUs the target keeps busy: its 4 threads, or every CPU when there are fewer.
    let cpus = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4) as f64;
    let base_rate = quantile(
        &paired
            .iter()
            .flatten()
            .map(|p| p.base.rate)
            .collect::<Vec<_>>(),
        0.5,
    );
    println!(
        "target without a sampler: {base_rate:.4e} iterations/s on {cpus} busy CPUs; {rounds} \
         rounds of {} ms windows",
        window.as_millis()
    );
    println!(
        "{:<36} {:>9} {:>27} {:>27} {:>13} {:>14} {:>13}",
        "sampler",
        "samples/s",
        "slowdown, iter/s (IQR)",
        "slowdown, iter/CPU-s (IQR)",
        "target ns/smp",
        "sampler ns/smp",
        "reader CPU ns"
    );
    let mut ebpf_999_ns = None;
    let mut ebpf_99_samples = None;
    for (config, paired) in configs.iter().zip(&paired) {
        let losses: Vec<f64> = paired.iter().map(Paired::loss).collect();
        let cpu_losses: Vec<f64> = paired.iter().map(Paired::loss_per_cpu).collect();
        let samples = quantile(
            &paired.iter().map(|p| p.run.samples).collect::<Vec<_>>(),
            0.5,
        );
        let sampler_ns = quantile(
            &paired.iter().map(|p| p.run.sampler_ns).collect::<Vec<_>>(),
            0.5,
        );
        let reader_cpu_ns = quantile(
            &paired
                .iter()
                .map(|p| p.run.reader_cpu_ns)
                .collect::<Vec<_>>(),
            0.5,
        );
        // The target's work lost per sample, in ns of its CPU time: the share of each
        // CPU-second lost, times the busy CPUs, over the samples of a second.
        let target_ns = (samples > 0.0).then(|| quantile(&cpu_losses, 0.5) * 1e9 * cpus / samples);
        match config {
            Sampler::Ebpf(999) => ebpf_999_ns = target_ns,
            Sampler::Ebpf(99) => ebpf_99_samples = Some(samples),
            _ => {}
        }
        println!(
            "{:<36} {:>9.0} {:>27} {:>27} {:>13} {:>14} {:>13}",
            config.name(),
            samples,
            spread(&losses),
            spread(&cpu_losses),
            target_ns.map_or("-".into(), |ns| format!("{ns:.0}")),
            if samples > 0.0 {
                format!("{sampler_ns:.0}")
            } else {
                "-".into()
            },
            if samples > 0.0 {
                format!("{reader_cpu_ns:.0}")
            } else {
                "-".into()
            },
        );
    }
    if let (Some(ns), Some(samples)) = (ebpf_999_ns, ebpf_99_samples) {
        println!(
            "eBPF at 999 Hz cost the target {ns:.0} ns per sample; at the {samples:.0} samples/s \
             of 99 Hz that is {:.3}% of its CPU time",
            ns * samples / (cpus * 1e9) * 100.0
        );
    }
    println!(
        "Each window with a sampler is compared with the mean of the windows without one just \
         before and after it; medians and quartiles over the rounds. The sampler's time per \
         sample is one `sample_into` (ptrace, wall time) or one run of the BPF program (the \
         kernel's statistics, over every tick on every CPU, the target's or not); the reader's \
         CPU time is this process's, per sample."
    );
}
