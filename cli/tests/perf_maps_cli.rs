//! `otel-ctx profile` of JIT runtimes' services, named by the perf maps the runtimes
//! write: a Node service started with `--perf-basic-prof`, and a Java service run with
//! `-XX:+PreserveFramePointer` whose map `jcmd <pid> Compiler.perfmap` writes. Neither
//! publishes an OpenTelemetry context: each is profiled by its stacks alone, by eBPF and
//! by ptrace, with its JavaScript or Java function names.
//!
//! Root, the `ebpf` feature, Node (`nodejs`) and a JDK (`openjdk-17-jdk-headless`); a
//! test whose runtime is missing says so and does nothing (.ci/run installs both).
#![cfg(feature = "ebpf")]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::{bounded, run, text};

/// The tests take turns: each service keeps a core busy.
static TURNS: Mutex<()> = Mutex::new(());

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perfmap")
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("perf-maps-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Whether `program <flag>` runs (`--version`; jcmd knows only `-h`).
fn installed(program: &str) -> bool {
    let flag = if program == "jcmd" { "-h" } else { "--version" };
    Command::new(program)
        .arg(flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A service started with a `ready <pid>` line; stopped (its perf map removed) on drop.
struct Service {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
}

impl Service {
    fn start(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the service");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let line = bounded::Lines::new(format!("{command:?}"), stdout)
            .line("its `ready <pid>`", bounded::DEADLINE);
        let pid = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the service said {line:?}"));
        Self { child, stdin, pid }
    }

    fn perf_map(&self) -> String {
        format!("/tmp/perf-{}.map", self.pid)
    }

    /// Waits (at most 60 s) until its perf map names `function`.
    fn wait_for_map(&self, function: &str, mut refresh: impl FnMut()) {
        let started = Instant::now();
        loop {
            refresh();
            if std::fs::read_to_string(self.perf_map()).is_ok_and(|m| m.contains(function)) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{} did not name {function} within 60 s",
                self.perf_map()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.perf_map());
    }
}

/// Folded stacks (root first) to samples.
fn read_folded(path: &Path) -> BTreeMap<Vec<String>, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_owned).collect(),
                count.parse().ok()?,
            ))
        })
        .collect()
}

/// Profiles `service` by eBPF and by ptrace: each profile must have a stack with a
/// frame naming the `hot` function, from its perf map, and a caller of it named too (a
/// frame of its own code, `own` in its name: which caller the JIT keeps as a frame of
/// its own, and which it inlines, is the JIT's choice). `refresh` runs every 300 ms
/// meanwhile (a JVM writes its map again: code compiled during the run is named, as the
/// map is read when the profile is made).
fn profile_names(service: &Service, name: &str, hot: &str, own: &str, refresh: &(dyn Fn() + Sync)) {
    let dir = scratch(name);
    for (sampler, flags) in [("eBPF", &[][..]), ("ptrace", &["--ptrace"][..])] {
        let output = dir.join(format!("{sampler}.folded"));
        let mut args = vec![
            "profile".to_owned(),
            service.pid.to_string(),
            "--duration".to_owned(),
            "3s".to_owned(),
            "-o".to_owned(),
            output.to_str().expect("UTF-8 path").to_owned(),
        ];
        args.extend(flags.iter().map(|f| (*f).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let done = std::sync::atomic::AtomicBool::new(false);
        let out = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    refresh();
                    std::thread::sleep(Duration::from_millis(300));
                }
            });
            let out = run(&args);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            out
        });
        let said = text(&out.stdout) + &text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains(&format!("({sampler})")), "{said}");
        assert!(said.contains("publishes no thread contexts"), "{said}");
        assert!(
            said.contains(&format!("perf map {}:", service.perf_map())),
            "{said}"
        );
        let folded = read_folded(&output);
        // No context: every stack under the one root that says so.
        assert!(folded.keys().all(|f| f[0] == "(no context)"), "{folded:#?}");
        let named = folded.keys().any(|frames| {
            frames.iter().any(|f| f.contains(hot))
                && frames.iter().any(|f| f.contains(own) && !f.contains(hot))
        });
        assert!(
            named,
            "{name} by {sampler}: no stack names {hot} and a caller of it\n{said}\n{folded:#?}"
        );
    }
}

#[test]
fn node_service_named_by_its_perf_map() {
    if !installed("node") {
        eprintln!("skipped: node is not installed (Debian package nodejs)");
        return;
    }
    let _turn = TURNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let service = Service::start(
        Command::new("node")
            // V8 writes its logs (isolate-*.log) into its working directory.
            .current_dir(scratch("node"))
            .arg("--perf-basic-prof")
            .arg(fixtures().join("service.js")),
    );
    // V8 writes a line per function it compiles: the hot one once it is optimized.
    service.wait_for_map("fibonacciHotPath", || {});
    // V8 may inline handleRequestLoop into serve: either names the caller.
    profile_names(&service, "node", "fibonacciHotPath", "service.js:", &|| {});
}

#[test]
fn java_service_named_by_its_perf_map() {
    if !installed("java") || !installed("javac") || !installed("jcmd") {
        eprintln!("skipped: no JDK (java, javac, jcmd: Debian package openjdk-17-jdk-headless)");
        return;
    }
    let _turn = TURNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let classes = scratch("java-classes");
    let compiled = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(fixtures().join("HotService.java"))
        .output()
        .expect("run javac");
    assert!(compiled.status.success(), "{}", text(&compiled.stderr));
    let service = Service::start(
        Command::new("java")
            .arg("-XX:+PreserveFramePointer")
            .arg("-cp")
            .arg(&classes)
            .arg("HotService"),
    );
    // The JVM writes its map when asked: once the hot methods are compiled, they are in it.
    let pid = service.pid.to_string();
    let write_map = || {
        let jcmd = Command::new("jcmd")
            .args([pid.as_str(), "Compiler.perfmap"])
            .stdout(Stdio::null())
            .spawn();
        if let Ok(mut jcmd) = jcmd {
            bounded::wait(&mut jcmd, "jcmd Compiler.perfmap", bounded::DEADLINE);
        }
    };
    service.wait_for_map("HotService.fibonacciHotPath", write_map);
    // C2 may inline handleRequestLoop into the worker's lambda: either names the caller.
    profile_names(
        &service,
        "java",
        "HotService.fibonacciHotPath",
        "HotService.",
        &write_map,
    );
}
