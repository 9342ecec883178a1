//! What the `otel-ctx` tests share: the tool itself, and the helper processes of the
//! conformance helpers package that publish contexts for it to read.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

// A test that also includes the profile tests' `fixture.rs` has two copies of it.
#[allow(clippy::duplicate_mod)]
#[path = "../../../reader-linux/tests/support/bounded.rs"]
pub mod bounded;

/// The `otel-ctx` binary cargo built for these tests.
pub fn otel_ctx() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_otel-ctx"))
}

/// Runs `otel-ctx <args>` with no input and returns what it did, failing the test when
/// it has not ended within [`bounded::DEADLINE`].
pub fn run(args: &[&str]) -> Output {
    bounded::output(Command::new(otel_ctx()).args(args), bounded::DEADLINE).expect("run otel-ctx")
}

/// An empty directory of the tests' own, `<CARGO_TARGET_TMPDIR>/<name>`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Folded stacks: frames (root first) to samples.
pub type Folded = std::collections::BTreeMap<Vec<String>, u64>;

/// Reads folded stacks (`frame;frame;... count` lines).
pub fn read_folded(path: &Path) -> Folded {
    let body = std::fs::read_to_string(path).expect("read the folded stacks");
    body.lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').expect("`stack count`");
            let frames = stack.split(';').map(str::to_owned).collect();
            (frames, count.parse().expect("a count"))
        })
        .collect()
}

/// Output bytes as text (invalid UTF-8 replaced), for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The routes of the demo service (`otel_ctx_tracing::demo`).
pub const DEMO_ROUTES: [&str; 5] = [
    "/api/checkout",
    "/api/cart",
    "/api/cart/items",
    "/api/products/:id",
    "/healthz",
];

/// The demo's service (`tracing` + the OpenTelemetry SDK), as the `traced_service`
/// example of `otel-ctx-tracing` runs it (the same service as `otel-ctx demo-service` in a
/// build with the `demo` feature), stopped by closing its input on drop.
pub struct DemoService(Child);

/// The `traced_service` example, built once.
pub fn traced_service() -> &'static Path {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        build(
            &[
                "build",
                "-p",
                "otel-ctx-tracing",
                "--features",
                "demo-service",
                "--example",
                "traced_service",
            ],
            "traced_service",
        )
    })
}

impl DemoService {
    /// Starts it and waits until its key map is published.
    pub fn start() -> Self {
        let child = Command::new(traced_service())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the demo service");
        let service = Self(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = run(&["show", &service.pid(), "--json"]);
            if out.status.success() {
                let doc: serde_json::Value =
                    serde_json::from_slice(&out.stdout).expect("show --json prints JSON");
                if doc["process_context"]["attributes"]["threadlocal.attribute_key_map"].is_array()
                {
                    return service;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the demo service never published its key map"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its process id, as the tool's arguments take it.
    pub fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for DemoService {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        bounded::reap(&mut self.0, bounded::GRACE);
    }
}

/// A child killed and reaped when the test lets go of it, passed or panicked: a busy
/// target left behind would take a core from the later tests and hold their output open.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the binary `bin` of `package` through cargo and returns its path.
pub fn binary(package: &str, bin: &str) -> PathBuf {
    build(&["build", "-p", package, "--bin", bin], bin)
}

/// Builds `example` of `package` through cargo and returns its path.
pub fn example(package: &str, example: &str) -> PathBuf {
    build(&["build", "-p", package, "--example", example], example)
}

/// Builds `bin` of `otel-ctx-conformance-helpers` (publishers and writers the tests read)
/// through cargo, and returns its path. Those helpers depend on the writer and on
/// libdatadog, which the tool itself must not: they live in a package of their own,
/// which cargo does not build for this package's tests. `extra` goes to rustc for that
/// binary only.
pub fn helper(bin: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        if extra.is_empty() { "build" } else { "rustc" },
        "-p",
        "otel-ctx-conformance-helpers",
        "--bin",
        bin,
    ];
    if !extra.is_empty() {
        args.push("--");
        args.extend_from_slice(extra);
    }
    build(&args, bin)
}

/// Runs `cargo <args>` (a build) and returns the path of the executable it names.
fn build(args: &[&str], name: &str) -> PathBuf {
    let (before, after) = match args.iter().position(|&a| a == "--") {
        Some(at) => args.split_at(at),
        None => (args, &[][..]),
    };
    let out = Command::new(env!("CARGO"))
        .args(before)
        .args(["--quiet", "--message-format=json"])
        .args(after)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cannot run cargo");
    assert!(out.status.success(), "building {name} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no {name} executable"))
}

/// The C test writer `tests/fixtures/check/writer.c`, compiled once into `name` under the
/// tests' temporary directory with `otel_thread_ctx_v1` exported (needs gcc).
pub fn c_writer(name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/check/writer.c");
    let status = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .args([source, "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"])
        .status()
        .unwrap_or_else(|e| panic!("run gcc: {e} (install gcc)"));
    assert!(status.success(), "gcc {source} failed");
    out
}

/// The number just before the first `what` in `text` (`12 dropped`, `(3 samples`): a
/// figure of a summary line.
pub fn number_before(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("a number before {what:?} in {text}"))
}
