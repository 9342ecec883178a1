//! The C fixture of the profile tests, built against the workspace's C ABI, and a
//! running copy of it: shared by this crate's tests and the `otel-ctx profile` tests
//! (which include this file with `#[path]`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The routes the fixture's threads serve, with the prefix of their functions.
pub const ROUTES: [(&str, &str); 3] = [
    ("/cart", "cart"),
    ("/checkout", "checkout"),
    ("/search", "search"),
];

/// `libotel_ctx_ffi.so`, built once through cargo.
pub fn ffi_library() -> &'static PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "otel-ctx-ffi",
                "--quiet",
                "--message-format=json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo");
        assert!(out.status.success(), "cargo build -p otel-ctx-ffi failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|msg| msg["target"]["name"] == "otel_ctx_ffi")
            .flat_map(|msg| {
                msg["filenames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(PathBuf::from))
                    .collect::<Vec<_>>()
            })
            .find(|f| f.extension().is_some_and(|e| e == "so"))
            .expect("cargo built no libotel_ctx_ffi.so")
    })
}

/// The fixtures' sources (this file is also included by the tool's tests, whose
/// package is another).
fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profile/tests/fixtures"
    ))
}

/// Where a test puts what it builds, named after the test binary (two may build at
/// once).
pub fn out_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}", env!("CARGO_CRATE_NAME")))
}

/// Runs `gcc` with `args`, panicking with its output if it fails.
pub fn gcc(args: &[&str]) {
    let out = Command::new("gcc")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run gcc: {e} (install gcc)"));
    assert!(
        out.status.success(),
        "gcc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `routes.c` with `flags` (such as `-fomit-frame-pointer`) as `name`.
pub fn build_routes(name: &str, flags: &[&str]) -> PathBuf {
    let out = out_path(name);
    let lib = ffi_library();
    let src = fixtures().join("routes.c");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ffi/include");
    let rpath = format!(
        "-Wl,-rpath,{}",
        lib.parent().expect("a directory").display()
    );
    let mut args = vec!["-std=c11", "-Wall", "-Werror", "-O2", "-g", "-pthread"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[
        "-I",
        include.to_str().expect("UTF-8 path"),
        "-o",
        out.to_str().expect("UTF-8 path"),
        src.to_str().expect("UTF-8 path"),
        lib.to_str().expect("UTF-8 path"),
        &rpath,
        "-ldl",
    ]);
    gcc(&args);
    out
}

/// Builds `plugin.c` as a shared object `name`.
pub fn build_plugin(name: &str) -> PathBuf {
    let out = out_path(name);
    let src = fixtures().join("plugin.c");
    gcc(&[
        "-O2",
        "-g",
        "-fomit-frame-pointer",
        "-fPIC",
        "-shared",
        "-o",
        out.to_str().expect("UTF-8 path"),
        src.to_str().expect("UTF-8 path"),
    ]);
    out
}

/// A running fixture; killed when dropped.
pub struct Fixture {
    pub child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Fixture {
    /// Starts `program` with `args` and waits for its `ready` line.
    pub fn start(program: &Path, args: &[&Path]) -> Self {
        Self::start_with_env(program, args, &[])
    }

    /// Like [`start`](Self::start), with `env` added to its environment (such as
    /// `OTEL_SERVICE_NAME`).
    pub fn start_with_env(program: &Path, args: &[&Path], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the ready line");
        let pid: u32 = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("fixture said {line:?}, not ready <pid>"));
        assert_eq!(pid, child.id());
        Self {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Sends `command` and waits for the line `answer`.
    pub fn command(&mut self, command: &str, answer: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{command}").expect("write a command");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read an answer");
        assert_eq!(line.trim(), answer);
    }

    /// Closes stdin (the fixture stops its threads and exits) and waits for it, at
    /// most 30 seconds.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the fixture") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the fixture did not exit within 30 s of its stdin closing");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "fixture exited with {status}");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `go`, if installed.
pub fn go() -> Option<&'static str> {
    let found = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    found.then_some("go")
}

/// Runs `go tool pprof args file` offline; its standard output.
pub fn pprof(args: &[&str], file: &std::path::Path) -> String {
    let home = out_path("go-home");
    std::fs::create_dir_all(&home).expect("a home for go");
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        // No toolchain download, no proxy: the go installed here, offline.
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOCACHE", home.join("cache"))
        .env("HOME", &home)
        .env("PPROF_TMPDIR", &home)
        .output()
        .expect("run go tool pprof");
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
