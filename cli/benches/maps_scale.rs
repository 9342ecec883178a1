//! What `otel-ctx` costs as the target grows: `show`, `check --observe 0` and `watch
//! --duration 0` (their set-up) on publishers with 1,000, 100,000 and 1,000,000 mappings,
//! beside one plain read of the same `/proc/<pid>/maps` (`cat`); and `ps` beside a plain
//! read of every process's maps, on a host with 1,000 more processes.
//!
//! Every row runs a program (the tool, or `cat`), so each pays one process start. The
//! 1,000,000-mapping target needs `vm.max_map_count` above that: run as root, the bench
//! raises it; otherwise it leaves that target out and says so.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// The tool, as cargo built it for this bench.
const OTEL_CTX: &str = env!("CARGO_BIN_EXE_otel-ctx");

/// Builds a helper binary of `otel-ctx-conformance-helpers` with the bench profile.
fn helper(bin: &str) -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--profile",
            "bench",
            "--quiet",
            "--message-format=json",
        ])
        .args(["-p", "otel-ctx-conformance-helpers", "--bin", bin])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "building {bin} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no {bin} executable"))
}

/// A running `otel-ctx-many-mappings`; stopped on drop.
struct Target(Child);

impl Target {
    fn start(helper: &Path, mappings: usize) -> Option<Self> {
        let mut child = Command::new(helper)
            .arg(mappings.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start otel-ctx-many-mappings");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        if !line.starts_with("ready ") {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        Some(Self(child))
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `program args`, output discarded; the exit status is the command's business
/// (`check` exits 1 on this target: its helper does not export the TLS symbol).
fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the command");
    assert!(status.code().is_some(), "{program} {args:?} was killed");
}

/// Makes room for a million mappings, when allowed to.
fn raise_map_count(wanted: usize) -> bool {
    let path = "/proc/sys/vm/max_map_count";
    let now: usize = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    now > wanted || std::fs::write(path, (wanted + 100_000).to_string()).is_ok()
}

fn mappings(c: &mut Criterion) {
    let helper = helper("otel-ctx-many-mappings");
    let mut group = c.benchmark_group("maps_scale");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for n in [1_000usize, 100_000, 1_000_000] {
        if !raise_map_count(n) {
            eprintln!("maps_scale: vm.max_map_count is below {n} and cannot be raised (not root): left out");
            continue;
        }
        let Some(target) = Target::start(&helper, n) else {
            eprintln!("maps_scale: a target with {n} mappings could not start: left out");
            continue;
        };
        let pid = target.pid();
        let maps = format!("/proc/{pid}/maps");
        group.bench_function(BenchmarkId::new("cat_maps", n), |b| {
            b.iter(|| run("cat", &[&maps]))
        });
        group.bench_function(BenchmarkId::new("show", n), |b| {
            b.iter(|| run(OTEL_CTX, &["show", &pid]))
        });
        group.bench_function(BenchmarkId::new("check_observe_0", n), |b| {
            b.iter(|| run(OTEL_CTX, &["check", &pid, "--observe", "0"]))
        });
        group.bench_function(BenchmarkId::new("watch_duration_0", n), |b| {
            b.iter(|| run(OTEL_CTX, &["watch", &pid, "--duration", "0"]))
        });
    }
    group.finish();
}

fn ps(c: &mut Criterion) {
    // 1,000 idle processes, and one that publishes.
    let sleepers: Vec<Child> = (0..1000)
        .map(|_| {
            Command::new("sleep")
                .arg("3600")
                .stdin(Stdio::null())
                .spawn()
                .expect("start sleep")
        })
        .collect();
    let publisher = Target::start(&helper("otel-ctx-many-mappings"), 1).expect("publisher");
    let mut group = c.benchmark_group("ps_1000_processes");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("cat_every_maps", |b| {
        b.iter(|| run("sh", &["-c", "cat /proc/[0-9]*/maps > /dev/null 2>&1"]))
    });
    group.bench_function("ps", |b| b.iter(|| run(OTEL_CTX, &["ps"])));
    group.finish();
    drop(publisher);
    for mut sleeper in sleepers {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
}

criterion_group!(benches, mappings, ps);
criterion_main!(benches);
