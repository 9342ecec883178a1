//! `otel-ctx profile` of processes that claim to be CPython and are not
//! (`tests/fixtures/python/fake_python.c`: a `_PyRuntime` without an interpreter, a
//! frame chain that loops, a name of a gigabyte, a frame pointer into unmapped memory),
//! by ptrace and, in a build with `ebpf`, by eBPF: each keeps its native frames, the
//! summary counts the reason it has no Python frames, and each profile ends within its
//! bound. Root (ptrace, BPF) and gcc.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod support;

use support::{bounded, read_folded, run, scratch, text};

/// The fixture, built once with gcc (its symbols exported, as an interpreter's are).
fn fixture() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python/fake_python.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake_python");
        let built = Command::new("gcc")
            .args(["-O1", "-g", "-rdynamic", "-pthread", "-o"])
            .arg(&out)
            .arg(&source)
            .output()
            .expect("run gcc");
        assert!(built.status.success(), "gcc: {}", text(&built.stderr));
        out
    })
}

/// A running fixture, stopped on drop.
struct Fake(Child, u32);

impl Drop for Fake {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(mode: &str) -> Fake {
    let mut child = Command::new(fixture())
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let stdout = child.stdout.take().expect("piped");
    let line = bounded::Lines::new(format!("fake_python {mode}"), stdout)
        .line("its `ready`", bounded::DEADLINE);
    assert!(line.starts_with("ready"), "{mode}: {line:?}");
    let pid = child.id();
    Fake(child, pid)
}

/// The most a one-second profile of these targets may take.
const BOUND: Duration = Duration::from_secs(20);

/// Profiles `mode`'s fixture for a second with `args`: it must succeed within
/// [`BOUND`], keep the spinning thread's native frames, and say `reason` in its summary;
/// the folded stacks.
fn hostile(mode: &str, args: &[&str], reason: &str) -> support::Folded {
    let target = start(mode);
    let dir = scratch(&format!("python-hostile-{mode}-{}", args.len()));
    let out = dir.join("out.folded");
    let pid = target.1.to_string();
    let mut all = vec!["profile", &pid, "--duration", "1s", "-o"];
    all.push(out.to_str().expect("UTF-8"));
    all.extend_from_slice(args);
    let started = Instant::now();
    let output = run(&all);
    let took = started.elapsed();
    let said = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{mode} {args:?}: {said}");
    assert!(took < BOUND, "{mode} {args:?} took {took:?}");
    assert!(
        said.contains(reason),
        "{mode} {args:?}: no {reason:?} in {said}"
    );
    let folded = read_folded(&out);
    let native = folded
        .keys()
        .filter(|frames| frames.iter().any(|f| f == "spin_native"))
        .count();
    assert!(native > 0, "{mode} {args:?}: no native frames: {folded:?}");
    folded
}

/// ptrace, and eBPF where the build has it.
fn both(mode: &str, reason: &str, check: impl Fn(&support::Folded)) {
    check(&hostile(mode, &["--ptrace"], reason));
    #[cfg(feature = "ebpf")]
    check(&hostile(mode, &[], reason));
}

#[test]
fn a_fake_runtime() {
    both("fake", "python: none read: python_fake", |_| {});
}

#[test]
fn a_frame_chain_that_loops() {
    both("loop", "python_loop", |folded| {
        assert!(
            !folded.keys().any(|f| f.iter().any(|f| f == "hostile")),
            "a looping chain's frames were kept"
        );
    });
}

#[test]
fn pointers_into_unmapped_memory() {
    both("unmapped", "python_memory", |_| {});
}

#[test]
fn a_name_of_a_gigabyte() {
    // Named, cut to its bound.
    both("bigname", "1 code objects named", |folded| {
        let name = folded
            .keys()
            .flatten()
            .find(|f| f.starts_with("aaaa"))
            .expect("the long name");
        assert!(name.ends_with('…'), "{name}");
        assert!(
            name.chars().count() <= 513,
            "{} characters",
            name.chars().count()
        );
    });
}
