//! What `otel-ctx profile --all --otlp` costs with 1 and with 10 publishing processes, at
//! 99 Hz, side by side in one run: the targets are copies of `benches/fixtures/busy_routes.c`
//! (four threads each, under their own routes, counting iterations of arithmetic), so the
//! machine's CPUs are always busy with them; an OTLP/HTTP receiver on 127.0.0.1 in this
//! process accepts every request.
//!
//! For each count of targets, windows with the tool alternate with windows without it;
//! each row reports the targets' slowdown (their summed iterations per second against the
//! mean of the neighbouring windows without the tool: median and quartiles), the tool's CPU
//! time as a share of one CPU, its peak memory, the samples it took, and the bytes it sent
//! per sample (gzipped requests, as the receiver got them). The tool's start (the scan of
//! `/proc`, reading every target's modules) is outside the measured span and reported
//! apart, from a run of the same length measured whole.
//!
//! `cargo bench -p otel-ctx --features ebpf --bench fleet_overhead` as root.
//! `OTEL_CTX_BENCH_WINDOW_S` (default 10) and `OTEL_CTX_BENCH_ROUNDS` (default 6) set the
//! window and the rounds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

#[path = "../tests/support/mod.rs"]
mod test_support;

use support::{cpu_seconds, Target};
use test_support::number_before;

const OTEL_CTX: &str = env!("CARGO_BIN_EXE_otel-ctx");

fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fleet-overhead");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Summed iterations of every target, and when.
fn iterations(targets: &mut [Target]) -> (u64, Instant) {
    let n = targets.iter_mut().map(|t| t.iterations().0).sum();
    (n, Instant::now())
}

/// A receiver that answers 200 to everything and counts the bytes of the bodies.
fn receiver() -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let bytes = Arc::new(AtomicU64::new(0));
    let counted = bytes.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {
                                if let Some((k, v)) = line.split_once(':') {
                                    if k.eq_ignore_ascii_case("content-length") {
                                        length = v.trim().parse().unwrap_or(0);
                                    }
                                }
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    counted.fetch_add(length as u64, Ordering::Relaxed);
                    let mut out = reader.get_ref();
                    if out
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (url, bytes)
}

/// Waits for the tool, which must succeed: its CPU seconds, peak memory and stderr.
fn reap(child: Child, stderr: &PathBuf) -> (f64, u64, String) {
    let ended = support::wait_usage(child);
    let text = std::fs::read_to_string(stderr).unwrap_or_default();
    assert!(
        ended.success,
        "otel-ctx failed ({:#x}):\n{text}",
        ended.status
    );
    (ended.cpu_s, ended.max_rss_kib, text)
}

/// The tool's own settling time around the measured span.
const SETTLE: Duration = Duration::from_secs(4);

/// What one window with the tool measured.
struct Measured {
    rate: f64,
    cpu_share: f64,
    max_rss_kib: u64,
    samples: u64,
    lost: u64,
    bytes: u64,
    whole_cpu_s: f64,
}

fn with_tool(targets: &mut [Target], secs: u64) -> Measured {
    let (url, bytes) = receiver();
    let stderr = scratch().join("otel-ctx.stderr");
    let duration = format!("{}s", secs + 2 * SETTLE.as_secs());
    let child = Command::new(OTEL_CTX)
        .args(["profile", "--all", "--export-interval", "1s", "--duration"])
        .arg(&duration)
        .arg(format!("--otlp={url}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start otel-ctx");
    std::thread::sleep(SETTLE);
    let (n0, t0) = iterations(targets);
    let c0 = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = iterations(targets);
    let c1 = cpu_seconds(child.id());
    let (whole_cpu_s, max_rss_kib, text) = reap(child, &stderr);
    let span = (t1 - t0).as_secs_f64();
    Measured {
        rate: (n1 - n0) as f64 / span,
        cpu_share: (c1 - c0) / span,
        max_rss_kib,
        samples: number_before(&text, "samples, "),
        lost: number_before(&text, " lost"),
        bytes: bytes.load(Ordering::Relaxed),
        whole_cpu_s,
    }
}

fn without_tool(targets: &mut [Target], secs: u64) -> f64 {
    let (n0, t0) = iterations(targets);
    std::thread::sleep(Duration::from_secs(secs));
    let (n1, t1) = iterations(targets);
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` finds nothing to list here.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs = env_u64("OTEL_CTX_BENCH_WINDOW_S", 10);
    let rounds = env_u64("OTEL_CTX_BENCH_ROUNDS", 6);
    let exe = support::busy_routes(&scratch());
    let cpu = support::cpu_name();
    println!(
        "fleet_overhead: {cpu}, {} CPUs, {rounds} rounds of {secs} s at 99 Hz",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "| publishing processes | targets' slowdown, median (quartiles) | tool CPU, % of one CPU | tool peak memory | samples/s | samples lost | bytes sent per sample | tool CPU of a whole {}-s run |",
        secs + 2 * SETTLE.as_secs()
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for count in [1usize, 10] {
        let mut targets: Vec<Target> = (0..count)
            .map(|n| Target::start(&exe, &[("OTEL_SERVICE_NAME", &format!("fleet-bench-{n}"))]))
            .collect();
        // Let the targets' threads settle on the CPUs.
        std::thread::sleep(Duration::from_secs(1));
        let mut before = without_tool(&mut targets, secs);
        let (mut slowdowns, mut cpu, mut rss, mut rates, mut per_sample, mut whole) = (
            Vec::new(),
            Vec::new(),
            0u64,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        let mut lost = 0;
        for _ in 0..rounds {
            let m = with_tool(&mut targets, secs);
            let after = without_tool(&mut targets, secs);
            let base = (before + after) / 2.0;
            slowdowns.push(100.0 * (base - m.rate) / base);
            cpu.push(100.0 * m.cpu_share);
            rss = rss.max(m.max_rss_kib);
            rates.push(m.samples as f64 / (secs + 2 * SETTLE.as_secs()) as f64);
            if m.samples > 0 {
                per_sample.push(m.bytes as f64 / m.samples as f64);
            }
            whole.push(m.whole_cpu_s);
            lost += m.lost;
            before = after;
        }
        let (q1, median, q3) = support::quartiles(slowdowns);
        println!(
            "| {count} | {median:+.2}% ({q1:+.2} to {q3:+.2}) | {:.2}% | {:.1} MiB | {:.0} | {lost} | {:.0} | {:.2} s |",
            support::quartiles(cpu).1,
            rss as f64 / 1024.0,
            support::quartiles(rates).1,
            support::quartiles(per_sample).1,
            support::quartiles(whole).1,
        );
    }
}
