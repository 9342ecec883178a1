//! What sampling costs a CPU-bound target: four threads, each with a thread context
//! attached, count loop iterations (`tests/ebpf_fixtures/counting.c`, built with gcc),
//! and their throughput is measured with no sampler, with the ptrace sampler at 99 Hz
//! (rounds that stop every thread, as `otel-ctx watch` does), with the eBPF sampler at
//! 99 Hz and 999 Hz per CPU, and with the eBPF sampler ticking at the same rates for
//! another, stopped process (the cost of the perf-event ticks alone). The configurations
//! alternate over several rounds, and each row reports the median. Throughput is given
//! per second of wall time and per second of the target's own CPU time (the scheduler's
//! account, less sensitive to other processes taking CPU from the target on a shared
//! machine). Cost per sample: on the target's side, the work it lost per CPU-second
//! divided by the samples taken; on the sampler's side, the time of one `sample_into`
//! (ptrace) or one run of the BPF program (the kernel's own statistics,
//! `kernel.bpf_stats_enabled`, switched on for the run and restored after).
//!
//! `cargo bench -p otel-ctx-reader --features ebpf --bench ebpf_overhead` as root.
//! `OTEL_CTX_BENCH_WINDOW_MS` (default 2000) and `OTEL_CTX_BENCH_ROUNDS` (default 5) set
//! the length of each measurement and the number of rounds.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_reader::{EbpfOptions, EbpfSampler, RecordBuffer, ThreadReader, ThreadReaderOptions};

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
            .arg(format!("{TESTS}/fixtures/tls/writer.c"))
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
            let pid = reader.pid();
            let flag = stop.clone();
            let worker = std::thread::spawn(move || {
                let options = ThreadReaderOptions::default().with_require_known_schema(false);
                let mut reader = ThreadReader::with_options(pid, options).expect("reader");
                let mut buffer = RecordBuffer::new();
                let tids = reader.tids().expect("threads");
                let period = Duration::from_secs(1) / hz;
                let (mut samples, mut spent) = (0u64, Duration::ZERO);
                let mut next = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    for &tid in &tids {
                        let t = Instant::now();
                        let _ = reader.sample_into(tid, &mut buffer);
                        spent += t.elapsed();
                        samples += 1;
                    }
                    next += period;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
                (samples, spent)
            });
            let (c0, t0, cpu0) = target.iterations();
            std::thread::sleep(window);
            let (c1, t1, cpu1) = target.iterations();
            stop.store(true, Ordering::Relaxed);
            let (samples, spent) = worker.join().expect("ptrace sampler");
            let secs = (t1 - t0).as_secs_f64();
            Run {
                rate: (c1 - c0) as f64 / secs,
                per_cpu_s: (c1 - c0) as f64 * 1e9 / (cpu1 - cpu0).max(1) as f64,
                // The worker ran a little longer than the window: close enough for a rate.
                samples: samples as f64 / secs,
                sampler_ns: spent.as_nanos() as f64 / samples.max(1) as f64,
            }
        }
        Sampler::Ebpf(hz) | Sampler::EbpfElsewhere(hz) => {
            let options = EbpfOptions::default().with_frequency_hz(hz);
            let reader = if let Sampler::Ebpf(_) = sampler {
                reader
            } else {
                elsewhere
            };
            let mut ebpf = EbpfSampler::start(reader, options).expect("start the eBPF sampler");
            let (runs0, time0) = ebpf.run_time().expect("run time");
            let (c0, t0, cpu0) = target.iterations();
            let mut samples = 0u64;
            while t0.elapsed() < window {
                let _ = ebpf.wait(Duration::from_millis(50));
                while let Some((_, context)) = ebpf.next_context(reader) {
                    assert!(context.is_ok(), "{:?}", context.err());
                    samples += 1;
                }
            }
            let (c1, t1, cpu1) = target.iterations();
            let (runs1, time1) = ebpf.run_time().expect("run time");
            let runs = runs1 - runs0;
            Run {
                rate: (c1 - c0) as f64 / (t1 - t0).as_secs_f64(),
                per_cpu_s: (c1 - c0) as f64 * 1e9 / (cpu1 - cpu0).max(1) as f64,
                samples: samples as f64 / (t1 - t0).as_secs_f64(),
                sampler_ns: (time1 - time0).as_nanos() as f64 / runs.max(1) as f64,
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let window = Duration::from_millis(env_number("OTEL_CTX_BENCH_WINDOW_MS", 2000));
    let rounds = env_number("OTEL_CTX_BENCH_ROUNDS", 5).max(1) as usize;
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
        Sampler::None,
        Sampler::Ptrace(99),
        Sampler::Ebpf(99),
        Sampler::EbpfElsewhere(99),
        Sampler::Ebpf(999),
        Sampler::EbpfElsewhere(999),
    ];
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        // A different order each round, so a slow spell of the machine is spread.
        for k in 0..configs.len() {
            let i = (k + round) % configs.len();
            runs[i].push(measure(
                &mut target,
                &mut reader,
                &mut elsewhere,
                configs[i],
                window,
            ));
        }
    }
    std::fs::write(STATS, stats_before.trim()).expect("restore kernel.bpf_stats_enabled");

    let base = median(runs[0].iter().map(|r| r.rate).collect());
    let base_cpu = median(runs[0].iter().map(|r| r.per_cpu_s).collect());
    println!(
        "{:<40} {:>12} {:>8} {:>14} {:>8} {:>10} {:>13} {:>14}",
        "sampler",
        "iter/s",
        "vs none",
        "iter/CPU-s",
        "vs none",
        "samples/s",
        "target ns/smp",
        "sampler ns/smp"
    );
    for (config, runs) in configs.iter().zip(&runs) {
        let rate = median(runs.iter().map(|r| r.rate).collect());
        let per_cpu = median(runs.iter().map(|r| r.per_cpu_s).collect());
        let samples = median(runs.iter().map(|r| r.samples).collect());
        let sampler_ns = median(runs.iter().map(|r| r.sampler_ns).collect());
        let loss = 1.0 - per_cpu / base_cpu;
        // The target's lost work per sample, in ns of its CPU time: the share of each
        // CPU-second lost, over the samples of a CPU-second (the target keeps every CPU
        // busy, so samples per second are spread over that many CPU-seconds).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let target_ns = if samples > 0.0 {
            format!("{:.0}", loss * 1e9 * cpus / samples)
        } else {
            "-".into()
        };
        println!(
            "{:<40} {:>12.4e} {:>+7.2}% {:>14.4e} {:>+7.2}% {:>10.0} {:>13} {:>14}",
            config.name(),
            rate,
            (rate / base - 1.0) * 100.0,
            per_cpu,
            -loss * 100.0,
            samples,
            target_ns,
            if samples > 0.0 {
                format!("{sampler_ns:.0}")
            } else {
                "-".into()
            },
        );
    }
    println!(
        "{rounds} rounds of {} ms each; medians. The eBPF program's time per run is over every \
         tick on every CPU, the target's or not.",
        window.as_millis()
    );
}
