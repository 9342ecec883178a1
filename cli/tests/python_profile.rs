//! `otel-ctx profile` of Python services: the same small CPython program
//! (`sampler-linux/tests/python/service.py`: three workers, each in a request of its own,
//! running work -> serve -> py_mid_hot -> py_leaf_hot) under Debian's python3.11
//! publishing through the C ABI and through ddtrace, in its libpython3.11.so embedded in
//! a C program, and under trixie's 3.13 and sid's
//! 3.14 started with chroot. Each target is profiled by ptrace and, in a build with
//! `ebpf`, by eBPF: at least 80% of its workers' samples show the chain, in order, with
//! their request's labels; and py-spy 0.4.3 (PyPI) profiles the same process, whose
//! leaf share is within 10 points of ours. Root (ptrace, BPF), the targets of
//! `scripts/python-targets.sh`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

#[path = "../../sampler-linux/tests/python_support/mod.rs"]
mod python_support;

use python_support::{shows_chain, start, targets_dir, Publisher, PythonTarget, Runtime};
use support::{bounded, read_folded, run, text};

/// A frame's function, without the ` (file:line)` py-spy adds.
fn function(frame: &str) -> &str {
    frame.split(" (").next().unwrap_or(frame)
}

/// A frame's line, from its ` (file:line)` (py-spy) or `file:line` (pprof).
fn line(frame: &str) -> Option<u32> {
    frame.rsplit_once(':')?.1.trim_end_matches(')').parse().ok()
}

/// Runs `otel-ctx profile <pid> --duration 3s -o <out> <args>`, which must succeed; its
/// summary.
fn profile(target: &PythonTarget, out: &Path, args: &[&str]) -> String {
    let pid = target.pid.to_string();
    let path = out.to_str().expect("a UTF-8 path");
    let mut all = vec!["profile", &pid, "--duration", "3s", "-o", path];
    all.extend_from_slice(args);
    let output = run(&all);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}: {all:?}\n{stdout}{stderr}",
        target.label
    );
    format!("{stdout}{stderr}")
}

/// One sample of a pprof file as `go tool pprof -traces` prints it: its labels and its
/// frames (leaf first), each `function` or `function file:line`.
#[derive(Debug, Default)]
struct Trace {
    count: u64,
    labels: BTreeMap<String, String>,
    frames: Vec<String>,
}

/// The samples of `file` (pprof), with their labels and lines.
fn traces(file: &Path) -> Vec<Trace> {
    let printed = fixture::pprof(&["-sample_index=samples", "-lines", "-traces"], file);
    let mut traces = Vec::new();
    for block in printed.split("-----------+").skip(1) {
        let mut trace = Trace::default();
        for text in block.lines().skip(1) {
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            if trace.frames.is_empty() {
                if let Some((key, value)) = text.split_once(":  ") {
                    if !key.contains(' ') {
                        trace.labels.insert(key.to_owned(), value.trim().to_owned());
                        continue;
                    }
                }
                let (count, frame) = text.split_once(char::is_whitespace).expect("a count");
                trace.count = count.parse().expect("a sample count");
                trace.frames.push(frame.trim().to_owned());
            } else {
                trace.frames.push(text.to_owned());
            }
        }
        if !trace.frames.is_empty() {
            traces.push(trace);
        }
    }
    traces
}

/// What a profile of the workers shows: their samples, those that show the chain in
/// order with their request's labels, those whose innermost Python frame is
/// py_leaf_hot, and its lines.
#[derive(Debug, Default)]
struct Shown {
    workers: u64,
    chain: u64,
    leaf: u64,
    leaf_lines: BTreeMap<u32, u64>,
}

impl Shown {
    /// From a pprof file's samples: a worker's is told by its thread id; the chain is
    /// the order of its Python frames (native frames may lie between), and its labels
    /// are its request's trace id (and route with the C ABI).
    fn of(target: &PythonTarget, traces: &[Trace]) -> Self {
        let mut shown = Self::default();
        for trace in traces {
            let tid = trace.labels.get("thread.id").and_then(|t| t.parse().ok());
            let Some(worker) = target.workers.iter().position(|w| Some(*w) == tid) else {
                continue;
            };
            shown.workers += trace.count;
            // Python frames carry their file (`--lines`); outermost first.
            let python: Vec<&str> = trace
                .frames
                .iter()
                .rev()
                .filter(|f| f.contains(".py:"))
                .map(|f| f.split(' ').next().unwrap_or(f))
                .collect();
            let labels = target.labels_match(
                worker,
                trace.labels.get("trace_id").map(String::as_str),
                trace.labels.get("http.route").map(String::as_str),
            );
            if shows_chain(&python) && labels {
                shown.chain += trace.count;
            }
            if python.last() == Some(&"py_leaf_hot") {
                shown.leaf += trace.count;
                let leaf = trace.frames.iter().find(|f| f.contains(".py:"));
                if let Some(l) = leaf.and_then(|f| line(f)) {
                    *shown.leaf_lines.entry(l).or_default() += trace.count;
                }
            }
        }
        shown
    }

    fn leaf_share(&self) -> f64 {
        self.leaf as f64 / self.workers.max(1) as f64
    }
}

/// py-spy 0.4.3 recording the same process for 3 s at 99 Hz (its default: it stops the
/// process for each sample), started now.
fn py_spy_start(target: &PythonTarget, out: &Path) -> std::process::Child {
    let py_spy = targets_dir().join("py311/bin/py-spy");
    assert!(
        py_spy.exists(),
        "{} is missing: bash scripts/python-targets.sh",
        py_spy.display()
    );
    Command::new(&py_spy)
        .args(["record", "-r", "99", "-d", "3", "-f", "raw", "-o"])
        .arg(out)
        .args(["-p", &target.pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run py-spy")
}

/// What py-spy saw: the workers' samples (those in serve), the leaf share, and the
/// leaf's lines, from its raw (folded) output.
fn py_spy_finish(child: std::process::Child, out: &Path) -> (u64, f64, BTreeMap<u32, u64>) {
    // It records for 3 s.
    let ended = bounded::wait_with_output(child, "py-spy record", bounded::DEADLINE);
    assert!(ended.status.success(), "py-spy: {}", text(&ended.stderr));
    let (mut workers, mut leaf) = (0, 0);
    let mut lines = BTreeMap::new();
    for (frames, n) in read_folded(out) {
        if !frames.iter().any(|f| function(f) == "serve") {
            continue;
        }
        workers += n;
        let last = frames.last().map_or("", String::as_str);
        if function(last) == "py_leaf_hot" {
            leaf += n;
            if let Some(l) = line(last) {
                *lines.entry(l).or_default() += n;
            }
        }
    }
    (workers, leaf as f64 / workers.max(1) as f64, lines)
}

/// The most frequent line.
fn top(lines: &BTreeMap<u32, u64>) -> Option<u32> {
    lines.iter().max_by_key(|(_, n)| **n).map(|(l, _)| *l)
}

/// One configuration at a time: each target keeps three threads busy on a machine that
/// may have two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn profiles(runtime: Runtime, publisher: Publisher) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let target = start(runtime, publisher);
    let dir = support::scratch(&format!("python-{runtime:?}-{publisher:?}"));
    let mut ours = Vec::new();

    // ptrace: the native frames around the Python ones, with lines.
    let out = dir.join("ptrace.pb.gz");
    let summary = profile(&target, &out, &["--ptrace", "--lines"]);
    assert!(
        summary.contains(&format!("python: CPython 3.{}.", runtime.minor())),
        "{}: {summary}",
        target.label
    );
    let samples = traces(&out);
    // Native frames stay below the Python ones: the outermost frame of every worker's
    // sample is the thread's native start, not Python.
    for trace in &samples {
        let outermost = trace.frames.last().map_or("", String::as_str);
        assert!(!outermost.contains(".py:"), "{}: {trace:?}", target.label);
    }
    ours.push(("ptrace", Shown::of(&target, &samples)));
    let spy_out = dir.join("py-spy.txt");

    // eBPF: the Python frames alone.
    #[cfg(not(feature = "ebpf"))]
    let spy_seen = None;
    #[cfg(feature = "ebpf")]
    let spy_seen = {
        // py-spy beside it (one tracer at a time: not beside ptrace).
        let out = dir.join("ebpf.pb.gz");
        let spy = py_spy_start(&target, &spy_out);
        let summary = profile(&target, &out, &["--native", "false", "--lines"]);
        let seen = py_spy_finish(spy, &spy_out);
        assert!(summary.contains("(eBPF)"), "{}: {summary}", target.label);
        let samples = traces(&out);
        for trace in samples
            .iter()
            .filter(|t| t.frames.iter().any(|f| f.contains(".py:")))
        {
            assert!(
                trace.frames.iter().all(|f| f.contains(".py:")),
                "{}: --native false kept a native frame: {trace:?}",
                target.label
            );
        }
        ours.push(("eBPF", Shown::of(&target, &samples)));
        Some(seen)
    };

    // Without eBPF, py-spy after ptrace.
    let (spy_workers, spy_share, spy_lines) = match spy_seen {
        Some(seen) => seen,
        None => py_spy_finish(py_spy_start(&target, &spy_out), &spy_out),
    };
    for (how, shown) in &ours {
        assert!(
            spy_workers > 50,
            "{}: py-spy saw {spy_workers}",
            target.label
        );
        eprintln!(
            "{} by {how}: {} worker samples, {} with the chain, leaf share {:.2} \
             (py-spy {:.2} of {spy_workers}), leaf lines {:?} (py-spy {:?})",
            target.label,
            shown.workers,
            shown.chain,
            shown.leaf_share(),
            spy_share,
            shown.leaf_lines,
            spy_lines
        );
        assert!(shown.workers >= 30, "{} by {how}: {shown:?}", target.label);
        assert!(
            shown.chain * 100 >= shown.workers * 80,
            "{} by {how}: {} of {} worker samples show the chain with their labels",
            target.label,
            shown.chain,
            shown.workers
        );
        let share = shown.leaf_share();
        assert!(
            (share - spy_share).abs() <= 0.10,
            "{} by {how}: leaf share {share:.2}, py-spy's {spy_share:.2}",
            target.label
        );
        // Lines: where the leaf spends its time, as py-spy reads it too. Its loop's two
        // lines share the time in a ratio that depends on how the CPU runs the
        // interpreter: ours must be a line py-spy gives a good part of the leaf's samples.
        let spy_total: u64 = spy_lines.values().sum();
        let ours_top = top(&shown.leaf_lines);
        assert!(
            ours_top
                .and_then(|line| spy_lines.get(&line))
                .is_some_and(|&n| n * 10 >= spy_total * 3),
            "{} by {how}: py_leaf_hot's lines, ours {:?}, py-spy's {:?}",
            target.label,
            shown.leaf_lines,
            spy_lines
        );
    }
}

#[test]
fn python_311_with_the_c_abi() {
    profiles(Runtime::Bookworm311, Publisher::Ffi);
}

#[test]
fn python_311_in_libpython() {
    profiles(Runtime::Embedded311, Publisher::Ffi);
}

#[test]
fn python_311_with_ddtrace() {
    profiles(Runtime::Bookworm311, Publisher::Ddtrace);
}

#[test]
fn python_313_in_a_chroot() {
    profiles(Runtime::Trixie313, Publisher::Ffi);
}

#[test]
fn python_314_in_a_chroot() {
    profiles(Runtime::Sid314, Publisher::Ffi);
}

/// A Python service that publishes no thread contexts is profiled by its stacks and
/// Python frames, its samples without a context.
#[test]
fn python_without_thread_contexts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let target = start(Runtime::Bookworm311, Publisher::Nothing);
    let dir = support::scratch("python-no-contexts");
    let mut how = vec![vec!["--ptrace"]];
    if cfg!(feature = "ebpf") {
        how.push(Vec::new());
    }
    for args in how {
        let out = dir.join("out.folded");
        let mut all = vec!["--native", "false"];
        all.extend_from_slice(&args);
        let summary = profile(&target, &out, &all);
        assert!(
            summary.contains(" 0 with a thread context")
                && summary.contains("python: CPython 3.11"),
            "{args:?}: {summary}"
        );
        let folded = read_folded(&out);
        let (mut all_samples, mut chain) = (0, 0);
        for (frames, n) in &folded {
            assert_eq!(frames[0], "(no context)", "{args:?}: {frames:?}");
            let names: Vec<&str> = frames[1..].iter().map(String::as_str).collect();
            all_samples += n;
            if shows_chain(&names) {
                chain += n;
            }
        }
        assert!(
            all_samples >= 30 && chain * 100 >= all_samples * 80,
            "{args:?}: {chain} of {all_samples} show the chain"
        );
    }
}

/// `--by thread.name` groups a Python service's samples by the names its code gave its
/// threads (`threading.Thread(name=...)`), not by the interpreter's kernel name, under
/// each runtime and each method: its three workers are roots of their own.
#[test]
fn python_thread_names_group_the_profile() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut how = vec!["--ptrace"];
    if cfg!(feature = "ebpf") {
        how.push("--ebpf");
    }
    for runtime in [
        Runtime::Bookworm311,
        Runtime::Embedded311,
        Runtime::Trixie313,
        Runtime::Sid314,
    ] {
        let target = start(runtime, Publisher::Nothing);
        let dir = support::scratch(&format!("python-names-{runtime:?}"));
        for method in &how {
            let out = dir.join(format!("{}.folded", method.trim_start_matches('-')));
            let args = ["--by", "thread.name", "--native", "false", method];
            profile(&target, &out, &args);
            let mut roots: BTreeMap<String, u64> = BTreeMap::new();
            for (frames, n) in read_folded(&out) {
                *roots.entry(frames[0].clone()).or_default() += n;
            }
            let workers: u64 = (0..3)
                .map(|n| roots.get(&format!("worker-{n}")).copied().unwrap_or(0))
                .sum();
            let all: u64 = roots.values().sum();
            assert!(
                (0..3).all(|n| roots.contains_key(&format!("worker-{n}")))
                    && workers * 100 >= all * 80,
                "{} by {method}: {roots:?}",
                target.label
            );
        }
    }
}

/// Off-CPU time of a Python service (`SERVICE_WAITERS=1`): the thread that naps in
/// `time.sleep` and the one that waits for a `threading.Lock` show their waits under
/// their own Python functions, in their requests' routes; the workers, which burn CPU,
/// show little. By eBPF, whose off-CPU samples walk the Python frames as its ticks do.
#[test]
fn python_waits_under_their_functions() {
    if cfg!(not(feature = "ebpf")) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("SERVICE_WAITERS", "1")];
    let target = python_support::start_with_env(Runtime::Bookworm311, Publisher::Ffi, &env);
    let dir = support::scratch("python-off-cpu");
    let out = dir.join("off-cpu.folded");
    // More samples than by default: each route's total is checked.
    let args = [
        "--off-cpu",
        "--off-cpu-max-rate",
        "1000",
        "--show",
        "off-cpu",
        "--native",
        "false",
        "--sampler",
        "ebpf",
    ];
    let summary = profile(&target, &out, &args);
    let mut by_route: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (frames, micros) in read_folded(&out) {
        let own = match frames[0].as_str() {
            "/nap" => "py_nap",
            "/wait-lock" => "py_wait_lock",
            _ => "serve",
        };
        let entry = by_route.entry(frames[0].clone()).or_default();
        entry.0 += micros;
        if frames.iter().any(|f| function(f) == own) {
            entry.1 += micros;
        }
    }
    for route in ["/nap", "/wait-lock"] {
        let (all, through) = by_route.get(route).copied().unwrap_or_default();
        // Most of 3 s away, 80% of it under the route's function.
        assert!(all >= 1_500_000, "{route}: {all} us off a CPU\n{summary}");
        assert!(
            through * 10 >= all * 8,
            "{route}: {through} of {all} us under its function: {by_route:?}"
        );
    }
    // Three CPU-bound workers on fewer CPUs wait for the GIL, and those waits too are
    // under their own functions.
    for route in ["/checkout", "/search", "/cart"] {
        let (all, through) = by_route.get(route).copied().unwrap_or_default();
        assert!(
            through * 10 >= all * 8,
            "{route}: {through} of {all} us under serve: {by_route:?}"
        );
    }
}
