//! The Python targets of the tests (`tests/python/service.py`): Debian bookworm's
//! `python3.11`, trixie's 3.13 and sid's 3.14 (each in a folder `scripts/python-targets.sh`
//! installs with debootstrap, started with `chroot`: a target whose root is not ours),
//! publishing thread contexts through `libotel_ctx_ffi.so` or ddtrace. Shared by the
//! reader's, the profile layer's and the tool's tests (`#[path]`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The workspace's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("a crate of the workspace")
        .to_owned()
}

/// Where the Python targets are installed (`scripts/python-targets.sh`).
pub fn targets_dir() -> PathBuf {
    workspace().join("target/python")
}

/// An interpreter the tests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// Debian bookworm's `/usr/bin/python3.11`, on this machine's root.
    Bookworm311,
    /// Bookworm's CPython 3.11 in `libpython3.11.so`, embedded in a C program
    /// (`tests/python/embed.c`, built with gcc and `python3.11-config --embed`).
    Embedded311,
    /// Debian trixie's 3.13, in `target/python/trixie`, started with `chroot`.
    Trixie313,
    /// Trixie's debug build of 3.13 (`python3.13d`, which keeps its symbol table).
    Trixie313Debug,
    /// Debian sid's 3.14, in `target/python/sid`, started with `chroot`.
    Sid314,
}

impl Runtime {
    /// The version it runs.
    pub const fn minor(self) -> u8 {
        match self {
            Self::Bookworm311 | Self::Embedded311 => 11,
            Self::Trixie313 | Self::Trixie313Debug => 13,
            Self::Sid314 => 14,
        }
    }

    /// The chroot folder, for the ones that run in one.
    pub fn root(self) -> Option<PathBuf> {
        match self {
            Self::Bookworm311 | Self::Embedded311 => None,
            Self::Trixie313 | Self::Trixie313Debug => Some(targets_dir().join("trixie")),
            Self::Sid314 => Some(targets_dir().join("sid")),
        }
    }

    /// The interpreter's path inside its root.
    pub fn python(self) -> String {
        match self {
            Self::Trixie313Debug => "/usr/bin/python3.13d".to_owned(),
            _ => format!("/usr/bin/python3.{}", self.minor()),
        }
    }
}

/// How the target publishes its thread contexts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publisher {
    /// `libotel_ctx_ffi.so` through ctypes.
    Ffi,
    /// ddtrace from PyPI (`target/python/py311`, CPython 3.11 only).
    Ddtrace,
    /// Nothing: a Python service without thread contexts.
    Nothing,
}

/// `libotel_ctx_ffi.so`, built once through cargo.
pub fn ffi_library() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "otel-ctx-ffi"])
            .current_dir(workspace())
            .status()
            .expect("cannot run cargo");
        assert!(status.success(), "cargo build -p otel-ctx-ffi failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| workspace().join("target"), PathBuf::from);
        target.join("debug/libotel_ctx_ffi.so")
    })
}

/// `tests/python/embed.c` built against bookworm's `libpython3.11.so`, once.
pub fn embedded() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let config = |flag: &str| -> Vec<String> {
            let out = Command::new("/usr/bin/python3.11-config")
                .args([flag, "--embed"])
                .output()
                .unwrap_or_else(|_| missing(Path::new("/usr/bin/python3.11-config")));
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        let out = targets_dir().join("embed311");
        let built = Command::new("gcc")
            .arg(workspace().join("sampler-linux/tests/python/embed.c"))
            .args(config("--cflags"))
            .args(config("--ldflags"))
            .arg("-o")
            .arg(&out)
            .output()
            .expect("run gcc");
        assert!(
            built.status.success(),
            "gcc embed.c: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        out
    })
}

/// A running `service.py`.
pub struct PythonTarget {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its process id.
    pub pid: u32,
    /// Its three workers' thread ids.
    pub workers: Vec<u32>,
    /// Their requests' trace ids, 32 hex digits.
    pub traces: Vec<String>,
    /// How it publishes.
    pub publisher: Publisher,
    /// What it runs, for messages.
    pub label: String,
}

impl Drop for PythonTarget {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn missing(what: &Path) -> ! {
    panic!(
        "{} is missing: install the Python targets with `bash scripts/python-targets.sh` \
         (as .ci/run does)",
        what.display()
    )
}

/// Starts `service.py` under `runtime`, publishing with `publisher`, and waits for its
/// workers.
pub fn start(runtime: Runtime, publisher: Publisher) -> PythonTarget {
    start_with_env(runtime, publisher, &[])
}

/// [`start`], with `env` added to the service's environment (`SERVICE_WAITERS=1`).
pub fn start_with_env(
    runtime: Runtime,
    publisher: Publisher,
    env: &[(&str, &str)],
) -> PythonTarget {
    let script = workspace().join("sampler-linux/tests/python/service.py");
    let mut command = match runtime.root() {
        None if runtime == Runtime::Embedded311 => {
            let mut c = Command::new(embedded());
            c.arg(&script);
            c
        }
        None => {
            let python = PathBuf::from(runtime.python());
            if !python.exists() {
                missing(&python);
            }
            let mut c = Command::new(python);
            c.arg(&script);
            c
        }
        Some(root) => {
            if !root.join(runtime.python().trim_start_matches('/')).exists() {
                missing(&root);
            }
            // The script and the library are copied into the target's root.
            let inside = root.join("opt/otel-ctx-test");
            std::fs::create_dir_all(&inside).expect("create the folder in the chroot");
            std::fs::copy(&script, inside.join("service.py")).expect("copy service.py");
            let mut c = Command::new("chroot");
            c.arg(&root)
                .arg(runtime.python())
                .arg("/opt/otel-ctx-test/service.py");
            c
        }
    };
    match publisher {
        Publisher::Ffi => {
            let library = match runtime.root() {
                None => ffi_library().clone(),
                Some(root) => {
                    let inside = root.join("opt/otel-ctx-test/libotel_ctx_ffi.so");
                    std::fs::copy(ffi_library(), &inside).expect("copy the library");
                    PathBuf::from("/opt/otel-ctx-test/libotel_ctx_ffi.so")
                }
            };
            command.arg("ffi").arg(library);
        }
        Publisher::Nothing => {
            command.arg("none");
        }
        Publisher::Ddtrace => {
            assert_eq!(runtime.minor(), 11, "ddtrace is installed for 3.11");
            let site = targets_dir().join("py311");
            if !site.join("ddtrace").exists() {
                missing(&site);
            }
            command
                .arg("ddtrace")
                .env("PYTHONPATH", site)
                // No agent here: nothing sent, nothing logged about it.
                .env("DD_TRACE_ENABLED", "true")
                .env("DD_TRACE_AGENT_URL", "http://127.0.0.1:9")
                .env("DD_INSTRUMENTATION_TELEMETRY_ENABLED", "false")
                .env("DD_REMOTE_CONFIGURATION_ENABLED", "false")
                .env("DD_TRACE_STARTUP_LOGS", "false");
        }
    }
    let label = format!("{runtime:?} with {publisher:?}");
    let mut child = command
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = receiver
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{label} did not say it was ready"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let ids: Vec<u32> = words
        .iter()
        .skip(1)
        .take(4)
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        words.first() == Some(&"ready") && ids.len() == 4 && words.len() == 8,
        "{label} said {line:?}"
    );
    // The pid the script sees is its own namespace's: the same here (chroot only).
    let target = PythonTarget {
        pid: child.id(),
        child,
        stdin,
        workers: ids[1..].to_vec(),
        traces: words[5..].iter().map(|w| (*w).to_owned()).collect(),
        publisher,
        label,
    };
    assert_eq!(target.pid, ids[0], "{}: the script's pid", target.label);
    // The workers are in their loops by now; a moment for them to get going.
    std::thread::sleep(Duration::from_millis(200));
    target
}

/// The chain every worker runs, outermost first.
pub const CHAIN: [&str; 5] = ["Thread.run", "work", "serve", "py_mid_hot", "py_leaf_hot"];

/// The route of worker `n`.
pub const ROUTES: [&str; 3] = ["/checkout", "/search", "/cart"];

impl PythonTarget {
    /// Whether a sample of worker `n` has its labels: its request's trace id, and its
    /// route when the publisher names routes (ddtrace does not).
    pub fn labels_match(&self, n: usize, trace_id: Option<&str>, route: Option<&str>) -> bool {
        trace_id == Some(self.traces[n].as_str())
            && (self.publisher == Publisher::Ddtrace || route == Some(ROUTES[n]))
    }
}

/// Whether `names` (outermost first) ends with the chain, or with all of it but its leaf
/// (a sample in `py_mid_hot`'s own loop).
pub fn shows_chain(names: &[&str]) -> bool {
    let ends =
        |tail: &[&str]| names.len() >= tail.len() && names[names.len() - tail.len()..] == *tail;
    ends(&CHAIN) || ends(&CHAIN[..4])
}
