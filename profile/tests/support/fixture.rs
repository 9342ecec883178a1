//! The C fixtures of the profile tests and running copies of them: `routes.c`, built
//! against the workspace's C ABI, `plt.c` (libc through the PLT), and the symbol
//! sources' `symbols.c` with its stripped libraries and a local debuginfod server. Shared by this crate's tests and the
//! `otel-ctx profile` tests (which include this file with `#[path]`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// A test that also includes the tool's tests' `support` has two copies of it.
#[allow(clippy::duplicate_mod)]
#[path = "../../../reader-linux/tests/support/bounded.rs"]
pub mod bounded;

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
    tool(Path::new("."), "gcc", args);
}

/// Builds `routes.c` with `flags` (such as `-fomit-frame-pointer`) as `name`.
pub fn build_routes(name: &str, flags: &[&str]) -> PathBuf {
    build_publisher("routes.c", name, flags)
}

/// Builds fixture `source`, a C program that publishes through the C API, with `flags`
/// as `name`.
pub fn build_publisher(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let out = out_path(name);
    let lib = ffi_library();
    let src = fixtures().join(source);
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

/// Builds `plt.c` (a thread calling libc's `rand_r` through the PLT) with `flags` as
/// `name`.
pub fn build_plt(name: &str, flags: &[&str]) -> PathBuf {
    let out = out_path(name);
    let src = fixtures().join("plt.c");
    let mut args = vec!["-std=c11", "-Wall", "-Werror", "-O2", "-pthread"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[
        "-o",
        out.to_str().expect("UTF-8 path"),
        src.to_str().expect("UTF-8 path"),
    ]);
    gcc(&args);
    out
}

/// A running fixture; killed when dropped.
pub struct Fixture {
    pub child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    stdout: bounded::Lines,
}

impl Fixture {
    /// Starts `program` with `args` and waits for its `ready` line.
    pub fn start(program: &Path, args: &[&Path]) -> Self {
        Self::start_with_env(program, args, &[])
    }

    /// Like [`start`](Self::start), with `env` added to its environment (such as
    /// `OTEL_SERVICE_NAME`).
    pub fn start_with_env(program: &Path, args: &[&Path], env: &[(&str, &str)]) -> Self {
        // The fixture's service name is its default unless a test sets one.
        let mut child = Command::new(program)
            .args(args)
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stdin = child.stdin.take();
        let piped = child.stdout.take().expect("piped stdout");
        let mut stdout = bounded::Lines::new(program.display().to_string(), piped);
        let line = stdout.line("its `ready <pid>`", bounded::DEADLINE);
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
        let what = format!("the answer {answer:?} to {command:?}");
        let line = self.stdout.line(&what, bounded::DEADLINE);
        assert_eq!(line.trim(), answer);
    }

    /// Closes stdin (the fixture stops its threads and exits) and waits for it, at
    /// most 30 seconds.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let what = "the fixture, its stdin closed,";
        let status = bounded::wait(&mut self.child, what, Duration::from_secs(30));
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

/// Runs `program` with `args` in `dir`, panicking with its output if it fails; its
/// standard output.
pub fn tool(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e} (install it: see .ci/run)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The fixture as built.
pub struct SymbolsBuild {
    /// The folder of the program and its libraries.
    pub dir: PathBuf,
    /// The program.
    pub exe: PathBuf,
    /// A folder holding only `libhidden.so`'s debug file: for a debuginfod server.
    pub debuginfod_dir: PathBuf,
    /// `libhidden.so`'s build id, lowercase hex.
    pub hidden_build_id: String,
}

/// The build id `readelf -n` shows for `file`.
pub fn build_id(file: &Path) -> Option<String> {
    let notes = tool(
        file.parent().expect("a folder"),
        "readelf",
        &["-n", file.to_str().expect("UTF-8 path")],
    );
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(|id| id.trim().to_owned())
}

/// Builds `symlib.c` as `lib<prefix>.so` in `dir`, with `link` flags.
fn library(dir: &Path, prefix: &str, link: &[&str]) -> PathBuf {
    let src = fixtures().join("symlib.c");
    let name = format!("lib{prefix}.so");
    let define = format!("-DPREFIX={prefix}");
    let mut args = vec![
        "-O2",
        "-g",
        "-fPIC",
        "-shared",
        &define,
        "-o",
        &name,
        src.to_str().expect("UTF-8 path"),
    ];
    args.extend_from_slice(link);
    tool(dir, "gcc", &args);
    dir.join(name)
}

/// Builds the fixture into `dir` (made anew):
/// - `libhidden.so`, stripped; its debug file only in [`SymbolsBuild::debuginfod_dir`];
/// - `libcrclink.so`, stripped, no build id, its `.gnu_debuglink` naming
///   `libcrclink.debug` beside it, which was changed after the link was made (its CRC
///   no longer matches);
/// - `libmini.so`, stripped, with `.gnu_debugdata` (MiniDebugInfo made as Fedora makes
///   it: the function symbols `.dynsym` lacks, xz-compressed);
/// - `symbols`, linked with all three.
pub fn build_symbols(dir: &Path) -> SymbolsBuild {
    let _ = std::fs::remove_dir_all(dir);
    let debuginfod_dir = dir.join("debuginfod");
    std::fs::create_dir_all(&debuginfod_dir).expect("a folder for the fixture");

    let hidden = library(dir, "hidden", &["-Wl,--build-id"]);
    tool(
        dir,
        "objcopy",
        &[
            "--only-keep-debug",
            "libhidden.so",
            "debuginfod/libhidden.debug",
        ],
    );
    tool(dir, "strip", &["--strip-all", "libhidden.so"]);
    let hidden_build_id = build_id(&hidden).expect("libhidden.so has a build id");

    library(dir, "crclink", &["-Wl,--build-id=none"]);
    tool(
        dir,
        "objcopy",
        &["--only-keep-debug", "libcrclink.so", "libcrclink.debug"],
    );
    tool(dir, "strip", &["--strip-all", "libcrclink.so"]);
    tool(
        dir,
        "objcopy",
        &["--add-gnu-debuglink=libcrclink.debug", "libcrclink.so"],
    );
    let mut debug = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("libcrclink.debug"))
        .expect("open libcrclink.debug");
    debug
        .write_all(b"another build")
        .expect("change libcrclink.debug");

    library(dir, "mini", &[]);
    let names = |args: &[&str]| -> Vec<String> {
        tool(dir, "nm", args)
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (name, kind) = (f.next()?, f.next()?);
                matches!(kind, "T" | "t").then(|| name.to_owned())
            })
            .collect()
    };
    let dynamic = names(&["-D", "--format=posix", "--defined-only", "libmini.so"]);
    let keep: Vec<String> = names(&["--format=posix", "--defined-only", "libmini.so"])
        .into_iter()
        .filter(|n| !dynamic.contains(n))
        .collect();
    std::fs::write(dir.join("mini.keep"), keep.join("\n") + "\n").expect("write mini.keep");
    tool(
        dir,
        "objcopy",
        &["--only-keep-debug", "libmini.so", "libmini.full"],
    );
    tool(
        dir,
        "objcopy",
        &[
            "-S",
            "--remove-section",
            ".gdb_index",
            "--remove-section",
            ".comment",
            "--keep-symbols=mini.keep",
            "libmini.full",
            "mini_debuginfo",
        ],
    );
    tool(dir, "xz", &["-f", "mini_debuginfo"]);
    tool(dir, "strip", &["--strip-all", "libmini.so"]);
    tool(
        dir,
        "objcopy",
        &[
            "--add-section",
            ".gnu_debugdata=mini_debuginfo.xz",
            "libmini.so",
        ],
    );

    let exe = dir.join("symbols");
    let src = fixtures().join("symbols.c");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    tool(
        dir,
        "gcc",
        &[
            "-std=c11",
            "-Wall",
            "-Werror",
            "-O2",
            "-g",
            "-pthread",
            "-o",
            "symbols",
            src.to_str().expect("UTF-8 path"),
            "-L.",
            "-lhidden",
            "-lcrclink",
            "-lmini",
            &rpath,
        ],
    );
    SymbolsBuild {
        dir: dir.to_owned(),
        exe,
        debuginfod_dir,
        hidden_build_id,
    }
}

/// A running fixture. It exits when its stdin closes: when this is dropped, or when
/// the test process exits.
pub struct SymbolsFixture {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its process id.
    pub pid: u32,
    /// Where its JIT thread's code is.
    pub jit: u64,
}

impl SymbolsFixture {
    /// Starts `exe` and waits for its `ready` line. It runs at a lower priority (nice
    /// 10): its six spinning threads must not starve the profiler that samples them.
    pub fn start(exe: &Path) -> Self {
        let mut child = Command::new("nice")
            .args(["-n", "10"])
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let line = bounded::Lines::new(exe.display().to_string(), stdout)
            .line("its `ready <pid> jit <address>`", bounded::DEADLINE);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, jit) = match fields[..] {
            ["ready", pid, "jit", jit] => (
                pid.parse().expect("a pid"),
                u64::from_str_radix(jit, 16).expect("an address"),
            ),
            _ => panic!("the fixture said {line:?}"),
        };
        Self {
            child,
            stdin,
            pid,
            jit,
        }
    }
}

impl Drop for SymbolsFixture {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1 (free when asked).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The status of `GET path` at 127.0.0.1:`port`, if it answers within 2 s.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Debian's debuginfod serving `dir` (`-F`), on a free port, its database and log in
/// `state` (a folder made anew). It stops when this is dropped or the test process
/// exits: a shell runs it, and stops it once its own stdin closes.
pub struct DebuginfodServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// How long it took to index `dir`.
    pub indexed_in: Duration,
}

/// `debuginfod`, if installed.
pub fn debuginfod_installed() -> bool {
    Command::new("debuginfod")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

impl DebuginfodServer {
    /// Starts it and waits until it serves `build_id`'s debug file (at most 120 s).
    pub fn start(dir: &Path, state: &Path, build_id: &str) -> Self {
        let _ = std::fs::remove_dir_all(state);
        std::fs::create_dir_all(state).expect("a folder for debuginfod");
        let log = state.join("debuginfod.log");
        let port = free_port();
        // The shell ends with the server; the server ends when the shell's stdin does
        // (read through fd 3: an asynchronous list's own stdin is /dev/null).
        let command = format!(
            "exec 3<&0; debuginfod -F -p {port} -d '{}' --disable-source-scan -t 0 -g 0 '{}' \
             >'{}' 2>&1 & server=$!; {{ cat <&3 >/dev/null; kill $server; }} & wait $server",
            state.join("db.sqlite").display(),
            dir.display(),
            log.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &command])
            .env_remove("DEBUGINFOD_URLS")
            .stdin(Stdio::piped())
            .spawn()
            .expect("start debuginfod");
        let stdin = child.stdin.take();
        let started = Instant::now();
        let path = format!("/buildid/{build_id}/debuginfo");
        while http_status(port, &path) != Some(200) {
            let log = || std::fs::read_to_string(&log).unwrap_or_default();
            if let Ok(Some(status)) = child.try_wait() {
                panic!("debuginfod exited ({status}):\n{}", log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "debuginfod did not serve {path} within 120 s:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            child,
            stdin,
            url: format!("http://127.0.0.1:{port}"),
            indexed_in: started.elapsed(),
        }
    }
}

impl Drop for DebuginfodServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        bounded::reap(&mut self.child, bounded::GRACE);
    }
}

/// A server that accepts connections and never answers: a debuginfod that hangs.
/// Counts the connections it accepts into `hits`. Runs until the test process exits.
pub fn silent_server(hits: std::sync::Arc<std::sync::atomic::AtomicU64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Kept open, never written to.
            held.push(stream);
        }
    });
    url
}

/// A server that answers every request `200 OK` with a body that never ends (no
/// length, the connection never closed while the client reads): as fast as it can, or
/// 1 KiB every `pause`. Runs until the test process exits; counts the bytes it sent
/// into `sent`.
pub fn endless_server(
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pause: Option<Duration>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let sent = sent.clone();
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let chunk = vec![0x42u8; if pause.is_some() { 1024 } else { 64 * 1024 }];
                while stream.write_all(&chunk).is_ok() {
                    sent.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    if let Some(pause) = pause {
                        std::thread::sleep(pause);
                    }
                }
            });
        }
    });
    url
}

/// A server of `files` (request path to body; anything else is 404), as a debuginfod
/// answers; counts the requests it gets into `hits`. Runs until the test process exits.
pub fn file_server(
    files: std::collections::HashMap<String, Vec<u8>>,
    hits: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let _ = match files.get(&path) {
                Some(body) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(body)),
                None => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    url
}

/// A process's perf map, `/tmp/perf-<pid>.map`, as a test writes it; removed on drop.
pub struct PerfMapFile(pub String);

impl PerfMapFile {
    /// The perf map of process `pid` (not written yet).
    pub fn new(pid: u32) -> Self {
        Self(format!("/tmp/perf-{pid}.map"))
    }

    /// A sparse file of `size` bytes whose only line, `line`, is at its very end.
    pub fn write_sparse(&self, size: u64, line: &str) {
        let tail = format!("\n{line}\n");
        let file = std::fs::File::create(&self.0).expect("create the perf map");
        file.set_len(size - tail.len() as u64).expect("size it");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.0)
            .and_then(|mut f| f.write_all(tail.as_bytes()))
            .expect("end it");
    }

    /// A FIFO in its place.
    pub fn make_fifo(&self) {
        let _ = std::fs::remove_file(&self.0);
        tool(Path::new("/"), "mkfifo", &[&self.0]);
    }
}

impl Drop for PerfMapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
