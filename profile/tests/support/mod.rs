//! What the tests share: the C fixture built against the workspace's C ABI, a running
//! copy of it, samples taken from it with the reader, and replaying them into a
//! profiler.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use otel_ctx_profile::{Attributes, Profile, ProfileOptions, Profiler, Sample, SampleContext};
use otel_ctx_reader::{
    ProcessContextReader, ProcessMaps, RecordBuffer, Snapshot, StackBuffer, ThreadReader,
    UserRegisters,
};

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

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Where a test puts what it builds, named after the test binary (two may build at
/// once).
pub fn out_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}", env!("CARGO_CRATE_NAME")))
}

/// Runs `gcc` with `args`, panicking with its output if it fails.
fn gcc(args: &[&str]) {
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
        let mut child = Command::new(program)
            .args(args)
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

/// A thread context as sampled, owned.
#[derive(Clone, Debug)]
pub struct OwnedContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub trace_flags: u8,
    pub attributes: Vec<(String, Vec<u8>)>,
}

/// One sample, owned, to replay into profilers with different options.
#[derive(Clone, Debug)]
pub struct Captured {
    pub tid: u32,
    pub thread_name: String,
    pub registers: UserRegisters,
    pub stack: Vec<u8>,
    pub context: Option<OwnedContext>,
}

/// What was captured of a fixture: its maps, its process context, its samples.
pub struct Capture {
    pub pid: u32,
    pub maps: ProcessMaps,
    pub snapshot: Option<Snapshot>,
    pub samples: Vec<Captured>,
}

/// Samples every thread of `pid` `rounds` times, a millisecond apart.
pub fn capture(pid: u32, rounds: usize) -> Capture {
    let maps = ProcessMaps::read(pid).expect("read the maps");
    let snapshot = ProcessContextReader::open(pid)
        .and_then(|mut r| r.read())
        .ok();
    let mut reader = ThreadReader::open(pid).expect("open the thread reader");
    let tids = reader.tids().expect("list the threads");
    let names: Vec<String> = tids
        .iter()
        .map(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_default()
        })
        .collect();
    let mut record = RecordBuffer::new();
    let mut stack = StackBuffer::default();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        for (tid, name) in tids.iter().zip(&names) {
            let Ok((registers, context)) =
                reader.sample_with_stack_into(*tid, &mut record, &mut stack)
            else {
                continue;
            };
            let context = context.map(|c| OwnedContext {
                trace_id: c.trace_id(),
                span_id: c.span_id(),
                trace_flags: c.trace_flags(),
                attributes: c
                    .attributes()
                    .map(|(k, v)| (k.to_owned(), v.to_vec()))
                    .collect(),
            });
            samples.push(Captured {
                tid: *tid,
                thread_name: name.clone(),
                registers,
                stack: stack.bytes().to_vec(),
                context,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Capture {
        pid,
        maps,
        snapshot,
        samples,
    }
}

/// A deterministic generator of garbage (xorshift64): the same garbage every run.
pub fn garbage(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// CPU time this thread has used: unlike wall time, not stretched by other threads
/// that share the cores (the fixtures' spinning ones).
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Adds `captured` to `profiler`; returns the longest (CPU) time one sample took.
pub fn replay(profiler: &mut Profiler, captured: &[Captured]) -> Duration {
    let mut slowest = Duration::ZERO;
    for c in captured {
        let attrs: Vec<(&str, &[u8])> = c
            .context
            .iter()
            .flat_map(|ctx| ctx.attributes.iter())
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        let context = c.context.as_ref().map(|ctx| SampleContext {
            trace_id: ctx.trace_id,
            span_id: ctx.span_id,
            trace_flags: ctx.trace_flags,
            attributes: Attributes::List(&attrs),
        });
        let sample = Sample::new(c.tid, &c.thread_name, c.registers, &c.stack)
            .with_context(context)
            .with_weight_ns(1_000_000);
        let started = thread_cpu_time();
        profiler.add(&sample);
        slowest = slowest.max(thread_cpu_time() - started);
    }
    slowest
}

/// Samples a running fixture and makes a profile of the samples with each of
/// `options`, while it still runs (its modules are read from the running process).
pub fn profiles(
    fixture: Fixture,
    rounds: usize,
    options: &[ProfileOptions],
) -> (Capture, Vec<Profile>) {
    let captured = capture(fixture.pid, rounds);
    let made = options
        .iter()
        .map(|o| profile_of(&captured, o.clone()).0)
        .collect();
    fixture.finish();
    (captured, made)
}

/// A profile of `capture` made with `options`.
pub fn profile_of(capture: &Capture, options: ProfileOptions) -> (Profile, Duration) {
    let mut profiler = Profiler::new(capture.pid, options);
    profiler.update_maps(&capture.maps);
    profiler.set_process_context(capture.snapshot.as_ref());
    let slowest = replay(&mut profiler, &capture.samples);
    (profiler.profile(), slowest)
}

/// For each route: samples labeled with it, and those whose three innermost locations
/// are in its leaf, middle and top functions.
pub fn route_accuracy(profile: &Profile) -> Vec<(&'static str, u64, u64)> {
    ROUTES
        .iter()
        .map(|&(route, prefix)| {
            let expected = [
                format!("{prefix}_leaf"),
                format!("{prefix}_mid"),
                format!("{prefix}_top"),
            ];
            let mut labeled = 0;
            let mut right = 0;
            for entry in &profile.entries {
                let labels = &profile.label_sets[entry.labels];
                if labels.get("http.route") != Some(route) {
                    continue;
                }
                labeled += entry.samples;
                let Some(stack) = entry.stack.map(|s| &profile.stacks[s]) else {
                    continue;
                };
                let names: Vec<&str> = stack
                    .iter()
                    .take(3)
                    .map(|&at| profile.locations[at].function_name())
                    .collect();
                if names == expected {
                    right += entry.samples;
                }
            }
            (route, labeled, right)
        })
        .collect()
}

/// The folded lines of `profile` grouped by `http.route`, for failure messages.
pub fn folded_text(profile: &Profile) -> String {
    let mut out = Vec::new();
    profile
        .write_folded(&otel_ctx_profile::FoldedOptions::default(), &mut out)
        .expect("write folded");
    let mut text = String::from_utf8(out).expect("UTF-8");
    for m in &profile.mappings {
        text.push_str(&format!(
            "mapping {} symbolized {} debug info {} {}\n",
            m.path,
            m.symbolized,
            m.debug_info,
            m.note.as_deref().unwrap_or("")
        ));
    }
    text
}
