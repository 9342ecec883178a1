//! `otel-ctx profile --all --otlp`: every publishing process on the host profiled by one
//! eBPF sampler and sent, as OTLP profiles over HTTP, to a receiver on 127.0.0.1 that
//! these tests run; the requests decoded by OpenTelemetry's own Python bindings (the
//! `opentelemetry-proto` package from PyPI, installed on first use when CI has not).
//! Root (BPF), tracefs (the publication hook), gcc, python3 with pip.
#![cfg(feature = "ebpf")]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;
// Only its certificate authority is used here.
#[allow(dead_code)]
#[path = "../../profile/tests/support/tls.rs"]
mod tls;

use fixture::{build_routes, Fixture, ROUTES};
use support::{bounded, number_before, otel_ctx, KillOnDrop};

/// The fixture's threads spin on both CPUs: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The `opentelemetry-proto` the requests are decoded with.
const OTLP_PYTHON: &str = "opentelemetry-proto==1.45.2";

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fleet-otlp-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Where the Python decoder's packages are: `$OTEL_CTX_TEST_PYTHONPATH` (CI installs
/// them there), else installed with pip under the tests' temporary directory.
fn python_path() -> String {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let probe = |path: &str| {
            Command::new("python3")
                .args([
                    "-c",
                    "import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
                ])
                .env("PYTHONPATH", path)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if let Ok(path) = std::env::var("OTEL_CTX_TEST_PYTHONPATH") {
            if probe(&path) {
                return path;
            }
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-otlp");
        let path = dir.to_str().expect("UTF-8 path").to_owned();
        if !probe(&path) {
            let status = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .arg("--root-user-action=ignore")
                .arg("--target")
                .arg(&dir)
                .arg(OTLP_PYTHON)
                .status()
                .expect("run pip");
            assert!(status.success(), "pip install {OTLP_PYTHON} failed");
            assert!(probe(&path), "{OTLP_PYTHON} installed but not importable");
        }
        path
    })
    .clone()
}

/// Every request in `dir` (`*.pb`), decoded by the Python bindings: one JSON object per
/// profile.
fn decode(dir: &Path) -> Vec<serde_json::Value> {
    decode_with(dir, &[])
}

/// [`decode`] with the decoder's `args` (`--forwarded`: requests a Collector passed on).
fn decode_with(dir: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/otlp/decode.py");
    let out = bounded::output(
        Command::new("python3")
            .arg(script)
            .arg(dir)
            .args(args)
            .env("PYTHONPATH", python_path()),
        bounded::DEADLINE,
    )
    .expect("run python3");
    assert!(
        out.status.success(),
        "the Python decoder refused a request:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    doc.as_array().expect("a list").clone()
}

/// What the receiver got: each request's body, un-gzipped, and when.
#[derive(Default)]
struct Inbox {
    requests: Vec<(Instant, Vec<u8>)>,
    bad: Vec<String>,
    /// Answer 400 (a request not worth retrying) to every request after this many.
    refuse_after: Option<usize>,
}

/// An OTLP/HTTP receiver on `listener`: answers 200 to every well-formed
/// `POST /v1development/profiles` with a gzipped protobuf body (400 once the inbox's
/// `refuse_after` requests came), and records it.
fn serve(listener: TcpListener, inbox: Arc<Mutex<Inbox>>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let inbox = inbox.clone();
            std::thread::spawn(move || handle(stream, &inbox));
        }
    });
}

fn handle(stream: TcpStream, inbox: &Mutex<Inbox>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push(line.trim_end().to_owned()),
            }
        }
        let header = |name: &str| {
            head.iter().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut inbox = inbox.lock().unwrap();
        let request_line = head.first().cloned().unwrap_or_default();
        if request_line != "POST /v1development/profiles HTTP/1.1"
            || header("content-type").as_deref() != Some("application/x-protobuf")
            || header("content-encoding").as_deref() != Some("gzip")
        {
            inbox.bad.push(format!("{head:?}"));
        }
        let mut raw = Vec::new();
        let status = match inbox.refuse_after {
            Some(n) if inbox.requests.len() >= n => "400 Bad Request",
            _ => "200 OK",
        };
        match flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut raw) {
            Ok(_) => inbox.requests.push((Instant::now(), raw)),
            Err(e) => inbox.bad.push(format!("not gzip: {e}")),
        }
        drop(inbox);
        let mut stream = reader.get_ref();
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        );
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Writes the requests received to `dir` as `NNN.pb`.
fn store(inbox: &Inbox, dir: &Path) {
    for (n, (_, body)) in inbox.requests.iter().enumerate() {
        std::fs::write(dir.join(format!("{n:03}.pb")), body).expect("write a request");
    }
}

/// `otel-ctx profile <args>`, its stdout and stderr going to files.
struct Tool {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Tool {
    /// `otel-ctx profile --all <args>`.
    fn start(args: &[&str], dir: &Path) -> Self {
        Self::profile(&[&["--all"], args].concat(), dir)
    }

    /// `otel-ctx profile --all <url>` until SIGTERM, exporting every second into a
    /// queue of 4 KiB (about four requests of one fixture), each attempt at most 2 s.
    fn queued(url: &str, dir: &Path) -> Self {
        let args = ["--export-interval", "1s", "--otlp-queue", "4KiB"];
        Self::start(
            &[
                &[url],
                &args[..],
                &["--otlp-timeout", "2s", "--duration", "0"],
            ]
            .concat(),
            dir,
        )
    }

    fn profile(args: &[&str], dir: &Path) -> Self {
        let stdout = dir.join("stdout.txt");
        let stderr = dir.join("stderr.txt");
        let child = Command::new(otel_ctx())
            .arg("profile")
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start otel-ctx");
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits at most `within` for it to exit; its exit code, stdout and stderr.
    fn wait(mut self, within: Duration) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let stdout = std::fs::read_to_string(&self.stdout).unwrap_or_default();
                return (status.code(), stdout, self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "otel-ctx still running after {within:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the child this test started and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Stops it with SIGTERM; it must exit with `code` within `within`. Its stderr.
    fn stop(self, within: Duration, code: i32) -> String {
        self.signal(libc::SIGTERM);
        let (status, stdout, stderr) = self.wait(within);
        assert_eq!(status, Some(code), "otel-ctx exited {status:?}:\n{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        stderr
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `done` holds (checked every 100 ms), at most `within`.
fn wait_for(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn routes_fixture() -> PathBuf {
    build_routes("fleet-routes", &["-fno-omit-frame-pointer"])
}

/// The decoded profiles of process `pid`.
fn of_pid(profiles: &[serde_json::Value], pid: u32) -> Vec<&serde_json::Value> {
    profiles
        .iter()
        .filter(|p| p["resource"]["process.pid"].as_i64() == Some(i64::from(pid)))
        .collect()
}

#[test]
fn every_publisher_to_a_collector() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("collector");
    let exe = routes_fixture();
    let first = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "fleet-first")]);
    // A process context without thread contexts (libdatadog's writer): stacks only.
    let libdd = Command::new(support::helper("otel-ctx-libdd-publish", &[]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the libdd publisher");
    let mut libdd = KillOnDrop(libdd);
    let stdout = libdd.0.stdout.take().expect("piped");
    let line = bounded::Lines::new("otel-ctx-libdd-publish", stdout)
        .line("its `ready`", bounded::DEADLINE);
    assert_eq!(line.trim(), "ready");

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("--otlp=http://{}", listener.local_addr().unwrap());
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    serve(listener, inbox.clone());
    let tool = Tool::start(&[&url, "--export-interval", "1s", "--duration", "0"], &dir);
    // Started after the tool: the publication hook (or the next scan) finds it.
    std::thread::sleep(Duration::from_millis(1500));
    let second = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "fleet-second")]);
    let second_started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let received = || inbox.lock().unwrap().requests.len();
    let before = received();
    // Three exports after the second started, so that it had time to be found.
    wait_for(
        Duration::from_secs(20),
        "three requests after the second",
        || received() >= before + 3,
    );
    tool.signal(libc::SIGUSR1);
    let libdd_pid = libdd.0.id();
    wait_for(Duration::from_secs(5), "the summary on SIGUSR1", || {
        tool.stderr().contains("otel-ctx profile:")
    });
    let asked = tool.stderr();
    let stderr = tool.stop(Duration::from_secs(15), 0);
    let inbox = inbox.lock().unwrap();
    assert!(inbox.bad.is_empty(), "{:?}", inbox.bad);
    store(&inbox, &dir);
    let profiles = decode(&dir);

    // The stacks-only publisher is followed, and said to be.
    assert!(
        asked.contains(&format!("  {libdd_pid} ")) && asked.contains("stacks only"),
        "{asked}"
    );
    for (fixture, service) in [(&first, "fleet-first"), (&second, "fleet-second")] {
        let mine = of_pid(&profiles, fixture.pid);
        assert!(
            !mine.is_empty(),
            "no profile of {service} ({})",
            fixture.pid
        );
        let mut by_route: BTreeMap<String, u64> = BTreeMap::new();
        let mut traces: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut leaves: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for profile in &mine {
            assert_eq!(profile["resource"]["service.name"], service);
            assert_eq!(profile["scope"][0], "otel-ctx");
            assert_eq!(profile["period_type"][0], "cpu");
            for sample in profile["samples"].as_array().unwrap() {
                let Some(route) = sample["attributes"]["http.route"].as_str() else {
                    continue;
                };
                *by_route.entry(route.to_owned()).or_default() +=
                    sample["values"][0].as_u64().unwrap();
                traces
                    .entry(route.to_owned())
                    .or_default()
                    .insert(sample["trace_id"].as_str().unwrap().to_owned());
                if let Some(leaf) = sample["functions"][0].as_str() {
                    leaves
                        .entry(route.to_owned())
                        .or_default()
                        .insert(leaf.to_owned());
                }
                assert!(sample["attributes"]["thread.id"].is_i64(), "{sample}");
            }
        }
        // Each route's samples link to its thread's trace (routes.c: 0x11 times the
        // route's index plus one, in every byte) and unwind to its leaf.
        for (n, (route, prefix)) in ROUTES.iter().enumerate() {
            let samples = by_route.get(*route).copied().unwrap_or(0);
            assert!(samples >= 5, "{service}: {samples} samples of {route}");
            let trace = format!("{:02x}", 0x11 * (n + 1)).repeat(16);
            assert_eq!(traces[*route], BTreeSet::from([trace]), "{service} {route}");
            assert!(
                leaves[*route].contains(&format!("{prefix}_leaf")),
                "{service} {route}: leaves {:?}",
                leaves[*route]
            );
        }
    }
    // The second's profiles start after it did.
    for profile in of_pid(&profiles, second.pid) {
        let end = profile["time_unix_nano"].as_u64().unwrap()
            + profile["duration_nano"].as_u64().unwrap();
        assert!(end >= second_started, "{profile}");
    }
    // Each request has one ResourceProfiles per process: never two of one process.
    let mut per_file: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for p in &profiles {
        per_file
            .entry(p["file"].as_str().unwrap().to_owned())
            .or_default()
            .push(p["resource"]["process.pid"].as_i64().unwrap());
    }
    for (file, pids) in &per_file {
        let distinct: BTreeSet<_> = pids.iter().collect();
        assert_eq!(distinct.len(), pids.len(), "{file}: {pids:?}");
    }
    assert!(stderr.contains("otlp to http://"), "{stderr}");
    assert!(stderr.contains(" 0 dropped"), "{stderr}");
    drop(libdd.0.stdin.take());
    bounded::wait(
        &mut libdd.0,
        "otel-ctx-libdd-publish, its stdin closed,",
        bounded::DEADLINE,
    );
}

/// `peak 7.9 KiB` in the summary, in bytes.
fn queue_peak(stderr: &str) -> f64 {
    let at = stderr.rfind("peak ").expect("a queue peak") + 5;
    let mut words = stderr[at..].split_whitespace();
    let number: f64 = words.next().unwrap().parse().unwrap();
    let unit = words
        .next()
        .unwrap()
        .trim_end_matches(|c: char| !c.is_alphabetic());
    number
        * match unit {
            "B" => 1.0,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            other => panic!("unit {other}"),
        }
}

#[test]
fn the_collector_down_for_ten_seconds_then_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("down");
    let exe = routes_fixture();
    let fixture = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "fleet-down")]);
    // A port nothing listens on yet.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("--otlp=http://127.0.0.1:{port}");
    // A request of one interval is about 1 KiB here: ten seconds down fill this.
    let queue = 4 * 1024;
    let tool = Tool::queued(&url, &dir);
    let down_from = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the port again");
    let up_at = Instant::now();
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    serve(listener, inbox.clone());
    // The queue goes out (the backoff is at most 30 s, but a new request comes every
    // second and the first attempt after the last failure waits at most that long).
    wait_for(
        Duration::from_secs(40),
        "requests once the collector is up",
        || inbox.lock().unwrap().requests.len() >= 3,
    );
    // Part of the profiles was dropped: said, with how much, and exit status 4.
    let stderr = tool.stop(Duration::from_secs(15), 4);
    assert!(
        stderr.contains("part of the profiles was not delivered to http://127.0.0.1:"),
        "{stderr}"
    );
    let inbox = inbox.lock().unwrap();
    assert!(inbox.bad.is_empty(), "{:?}", inbox.bad);
    store(&inbox, &dir);
    let profiles = decode(&dir);
    let mine = of_pid(&profiles, fixture.pid);
    assert!(!mine.is_empty(), "no profile of the fixture");
    // Sampling went on while the collector was down: delivered profiles cover that time.
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let down_ns = now_ns - down_from.elapsed().as_nanos() as u64;
    let up_ns = now_ns - up_at.elapsed().as_nanos() as u64;
    assert!(
        mine.iter().any(|p| {
            let start = p["time_unix_nano"].as_u64().unwrap();
            start >= down_ns && start < up_ns
        }),
        "no profile taken while the collector was down was delivered"
    );
    // The queue kept its bound, the oldest were dropped and counted, nothing crashed.
    assert!(queue_peak(&stderr) <= queue as f64, "{stderr}");
    assert!(number_before(&stderr, "dropped (") > 0, "{stderr}");
    assert!(number_before(&stderr, "retries") > 0, "{stderr}");
    let samples = number_before(&stderr, "samples, ");
    assert!(samples >= 200, "{samples} samples: {stderr}");
    drop(fixture);
}

/// A port of 127.0.0.1 that was bound, then closed: nothing listens there.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The lines of the tool's stderr, each checked to come from where it should: the first
/// failure when it happens (before the summary), the summary, then the exit status's
/// reason, last.
fn failure_then_summary(stderr: &str, url: &str, reason: &str, last: &str) {
    let failure = format!("otel-ctx: cannot deliver to {url}/v1development/profiles: ");
    let said = stderr.find(&failure).unwrap_or_else(|| panic!("{stderr}"));
    assert!(stderr[said..].contains(reason), "{stderr}");
    let summary = stderr.find("otel-ctx profile: ").expect("the summary");
    assert!(said < summary, "the failure after the summary:\n{stderr}");
    let end = stderr.trim_end().lines().last().unwrap_or("");
    assert!(end.starts_with(last), "{end}\n{stderr}");
}

/// A Collector that is down is no success: the first failure is said when it happens,
/// with the endpoint and the reason, and a run that delivered nothing exits 3, whether
/// it ran for a set time or until SIGTERM.
#[test]
fn a_collector_that_is_down_is_said_at_once_and_exits_3() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("closed");
    let fixture =
        Fixture::start_with_env(&routes_fixture(), &[], &[("OTEL_SERVICE_NAME", "closed")]);
    let pid = fixture.pid.to_string();
    let url = format!("http://127.0.0.1:{}", closed_port());
    let otlp = format!("--otlp={url}");
    // A set time: the request is made at the end, refused, tried for --otlp-timeout.
    let tool = Tool::profile(
        &[&pid, &otlp, "--duration", "2s", "--otlp-timeout", "1s"],
        &dir,
    );
    let (code, stdout, stderr) = tool.wait(Duration::from_secs(30));
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    failure_then_summary(
        &stderr,
        &url,
        "Connection refused",
        &format!("otel-ctx: nothing was delivered to {url}/v1development/profiles: 1 of 1 requests not delivered ("),
    );
    assert!(stderr.contains(" 0 sent "), "{stderr}");

    // Until SIGTERM: the failure is said while it runs, at the first export.
    let tool = Tool::profile(
        &[
            &pid,
            &otlp,
            "--duration",
            "0",
            "--export-interval",
            "1s",
            "--otlp-timeout",
            "1s",
        ],
        &dir,
    );
    wait_for(Duration::from_secs(20), "the first failure said", || {
        tool.stderr().contains("otel-ctx: cannot deliver to")
    });
    assert!(
        !tool.stderr().contains("otel-ctx profile: "),
        "{}",
        tool.stderr()
    );
    let stderr = tool.stop(Duration::from_secs(15), 3);
    failure_then_summary(
        &stderr,
        &url,
        "Connection refused",
        &format!("otel-ctx: nothing was delivered to {url}/v1development/profiles: "),
    );
    assert!(number_before(&stderr, "dropped (") >= 1, "{stderr}");
    drop(fixture);
}

/// A Collector that takes the first request and refuses the rest (400, not worth
/// retrying): part was delivered, the rest is said with how much, and the exit status is
/// 4.
#[test]
fn a_run_that_lost_part_of_its_profiles_says_how_much_and_exits_4() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("part");
    let fixture = Fixture::start_with_env(&routes_fixture(), &[], &[("OTEL_SERVICE_NAME", "part")]);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let inbox = Arc::new(Mutex::new(Inbox {
        refuse_after: Some(1),
        ..Inbox::default()
    }));
    serve(listener, inbox.clone());
    let tool = Tool::profile(
        &[
            &fixture.pid.to_string(),
            &format!("--otlp={url}"),
            "--duration",
            "3500ms",
            "--export-interval",
            "1s",
        ],
        &dir,
    );
    let (code, stdout, stderr) = tool.wait(Duration::from_secs(30));
    assert_eq!(code, Some(4), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let requests = inbox.lock().unwrap().requests.len() as u64;
    assert!(requests >= 2, "{requests} requests:\n{stderr}");
    failure_then_summary(
        &stderr,
        &url,
        "the collector answered 400",
        &format!(
            "otel-ctx: part of the profiles was not delivered to {url}/v1development/profiles: {} of {requests} requests not delivered (",
            requests - 1
        ),
    );
    assert!(
        stderr.contains("that request is not sent again"),
        "{stderr}"
    );
    let lost = number_before(stderr.trim_end().lines().last().unwrap(), "samples)");
    assert!(lost > 0, "{stderr}");
    drop(fixture);
}

/// The Collector `scripts/collector.sh` builds (ocb, the OTLP receiver and the OTLP/HTTP
/// exporter, pinned), where `target/collector.path` says it is.
fn collector_binary() -> PathBuf {
    let named = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/collector.path");
    let path = std::fs::read_to_string(&named)
        .map(|p| PathBuf::from(p.trim()))
        .unwrap_or_default();
    assert!(
        path.is_file(),
        "no Collector ({} names {path:?}): bash scripts/collector.sh",
        named.display()
    );
    path
}

/// An OpenTelemetry Collector that takes OTLP/HTTP on 127.0.0.1:`port` and passes every
/// profile on to `forward` (OTLP/HTTP, gzip), its log in `dir`; killed when dropped.
struct Collector {
    child: KillOnDrop,
    log: PathBuf,
}

impl Collector {
    fn start(dir: &Path, port: u16, forward: &str) -> Self {
        Self::start_with_tls(dir, port, forward, None)
    }

    /// [`start`](Self::start), its receiver behind TLS with `certificate` and its key
    /// (PEM files) when given.
    fn start_with_tls(
        dir: &Path,
        port: u16,
        forward: &str,
        certificate: Option<(&Path, &Path)>,
    ) -> Self {
        let config = dir.join("collector.yaml");
        let tls = certificate.map_or(String::new(), |(cert, key)| {
            format!(
                "        tls:\n          cert_file: {}\n          key_file: {}\n",
                cert.display(),
                key.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n{tls}\
                 exporters:\n  otlp_http:\n    endpoint: {forward}\n    compression: gzip\n\
                 service:\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [otlp_http]\n\
                 \x20 telemetry:\n    metrics:\n      level: none\n"
            ),
        )
        .expect("write the Collector's configuration");
        let log = dir.join(format!("collector-{port}.log"));
        let child = Command::new(collector_binary())
            .arg(format!("--config=file:{}", config.display()))
            .arg("--feature-gates=service.profilesSupport")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the Collector's log"))
            .spawn()
            .expect("start the Collector");
        let collector = Self {
            child: KillOnDrop(child),
            log,
        };
        // Ready once it says so (a connection to probe its port would be logged as a
        // broken handshake behind TLS).
        wait_for(Duration::from_secs(30), "the Collector ready", || {
            collector.log().contains("Everything is ready")
        });
        collector
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it with SIGTERM and waits for it; its log.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on the child this test started and has not reaped.
        let rc = unsafe { libc::kill(self.child.0.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill");
        bounded::wait(&mut self.child.0, "the Collector", bounded::DEADLINE);
        self.log()
    }
}

/// Where a test's Collector listens, and where it passes profiles on to.
struct Relay {
    port: u16,
    downstream: String,
}

impl Relay {
    /// The tool's flag that sends to the Collector.
    fn flag(&self) -> String {
        format!("--otlp=http://127.0.0.1:{}", self.port)
    }

    /// A new Collector on the same port, to the same receiver.
    fn restart(&self, dir: &Path) -> Collector {
        Collector::start(dir, self.port, &self.downstream)
    }
}

/// A Collector on a free port that passes profiles on to a receiver of the test's: the
/// Collector, the receiver's inbox, and where they are.
fn relay(dir: &Path) -> (Collector, Arc<Mutex<Inbox>>, Relay) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let downstream = format!("http://{}", listener.local_addr().unwrap());
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    serve(listener, inbox.clone());
    let relay = Relay {
        port: closed_port(),
        downstream,
    };
    (relay.restart(dir), inbox, relay)
}

/// The lines of a Collector's log at level error or warn.
fn complaints(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("\terror\t") || l.contains("\twarn\t"))
        .collect()
}

/// The samples of decoded `profiles`, each counted by its value.
fn samples_in(profiles: &[serde_json::Value]) -> u64 {
    profiles
        .iter()
        .flat_map(|p| p["samples"].as_array().unwrap().iter())
        .map(|s| s["values"][0].as_u64().unwrap())
        .sum()
}

/// `N samples` in the summary's `sent (...)`.
fn samples_sent(stderr: &str) -> u64 {
    let sent = stderr.rfind(" sent (").expect("the export summary");
    number_before(&stderr[sent..], " samples,")
}

/// Two publishing fixtures profiled with `--all --otlp` through a real OpenTelemetry
/// Collector: what it passes on holds each service's resource, its routes as sample
/// attributes, its trace ids as links, and as many samples as the summary says were
/// sent; the Collector logs no error or warning about the requests.
#[test]
fn every_publisher_through_a_real_collector() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("real-collector");
    let exe = routes_fixture();
    let services = ["collector-first", "collector-second"];
    let fixtures: Vec<Fixture> = services
        .iter()
        .map(|s| Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", s)]))
        .collect();
    let (collector, inbox, relay) = relay(&dir);
    let url = relay.flag();
    let tool = Tool::start(&[&url, "--export-interval", "1s", "--duration", "4s"], &dir);
    let (code, stdout, stderr) = tool.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let sent = samples_sent(&stderr);
    // The Collector passes the last request on within a few seconds.
    let received = || -> u64 {
        let inbox = inbox.lock().unwrap();
        let dir = scratch("real-collector-decoded");
        store(&inbox, &dir);
        samples_in(&decode_with(&dir, &["--forwarded"]))
    };
    wait_for(Duration::from_secs(20), "every sample passed on", || {
        received() >= sent
    });
    let log = collector.stop();
    assert_eq!(received(), sent, "{stderr}");
    assert!(complaints(&log).is_empty(), "{log}");
    let inbox = inbox.lock().unwrap();
    assert!(inbox.bad.is_empty(), "{:?}", inbox.bad);
    store(&inbox, &dir);
    let profiles = decode_with(&dir, &["--forwarded"]);
    for (fixture, service) in fixtures.iter().zip(services) {
        let mine = of_pid(&profiles, fixture.pid);
        assert!(!mine.is_empty(), "no profile of {service}: {stderr}");
        let mut traces: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for profile in &mine {
            assert_eq!(profile["resource"]["service.name"], service);
            for sample in profile["samples"].as_array().unwrap() {
                if let Some(route) = sample["attributes"]["http.route"].as_str() {
                    traces
                        .entry(route.to_owned())
                        .or_default()
                        .insert(sample["trace_id"].as_str().unwrap().to_owned());
                }
            }
        }
        // Each route's samples link to its thread's trace (routes.c: 0x11 times the
        // route's index plus one, in every byte).
        for (n, (route, _)) in ROUTES.iter().enumerate() {
            let trace = format!("{:02x}", 0x11 * (n + 1)).repeat(16);
            assert_eq!(
                traces.get(*route),
                Some(&BTreeSet::from([trace])),
                "{service} {route}"
            );
        }
    }
}

/// A real Collector stopped for 10 s, then started again on its port: what the tool
/// queued meanwhile arrives through it, what its 4 KiB queue could not hold is dropped,
/// counted and said (exit status 4), and every sample the tool says it sent comes out of
/// the Collector.
#[test]
fn a_real_collector_down_for_ten_seconds_then_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("real-collector-down");
    let fixture = Fixture::start_with_env(
        &routes_fixture(),
        &[],
        &[("OTEL_SERVICE_NAME", "collector-down")],
    );
    let (collector, inbox, relay) = relay(&dir);
    let url = relay.flag();
    let tool = Tool::queued(&url, &dir);
    let received = || inbox.lock().unwrap().requests.len();
    wait_for(
        Duration::from_secs(20),
        "a request through the Collector",
        || received() >= 1,
    );
    let first_log = collector.stop();
    let down_from = SystemTime::now();
    std::thread::sleep(Duration::from_secs(10));
    let up_at = SystemTime::now();
    let collector = relay.restart(&dir);
    let before = received();
    wait_for(
        Duration::from_secs(40),
        "requests once the Collector is up",
        || received() >= before + 3,
    );
    let stderr = tool.stop(Duration::from_secs(15), 4);
    // What the tool sent before it stopped reaches the Collector's downstream.
    let sent = samples_sent(&stderr);
    let passed_on = || -> (u64, Vec<serde_json::Value>) {
        let dir = scratch("real-collector-down-decoded");
        store(&inbox.lock().unwrap(), &dir);
        let profiles = decode_with(&dir, &["--forwarded"]);
        (samples_in(&profiles), profiles)
    };
    wait_for(
        Duration::from_secs(20),
        "every sample sent passed on",
        || passed_on().0 >= sent,
    );
    let second_log = collector.stop();
    let (samples, profiles) = passed_on();
    assert_eq!(samples, sent, "{stderr}");
    for log in [&first_log, &second_log] {
        assert!(complaints(log).is_empty(), "{log}");
    }
    assert!(
        stderr.contains("part of the profiles was not delivered to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(number_before(&stderr, "dropped (") > 0, "{stderr}");
    // Sampling went on while the Collector was down: what was queued then arrived.
    let ns = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mine = of_pid(&profiles, fixture.pid);
    assert!(
        mine.iter().any(|p| {
            let start = p["time_unix_nano"].as_u64().unwrap();
            start >= ns(down_from) && start < ns(up_at)
        }),
        "no profile taken while the Collector was down came through it"
    );
    drop(fixture);
}

/// The Collector configuration the project ships (`cli/deploy/collector.yaml`) is one the
/// Collector accepts with profiles turned on (it refused the batch processor in the
/// profiles pipeline).
#[test]
fn the_shipped_collector_configuration_is_valid() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/collector.yaml");
    let out = bounded::output(
        Command::new(collector_binary())
            .arg("validate")
            .arg(format!("--config=file:{config}"))
            .arg("--feature-gates=service.profilesSupport"),
        bounded::DEADLINE,
    )
    .expect("run the Collector");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Collector's receiver behind TLS, with a certificate a CA of the test's own signs:
/// `--otlp https://` reaches it trusting the CA through `--otlp-ca`, and through
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`; without either, nothing is delivered (exit 3), and
/// the reason is said.
#[test]
fn a_collector_behind_tls() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("tls-collector");
    let fixture = Fixture::start_with_env(
        &routes_fixture(),
        &[],
        &[("OTEL_SERVICE_NAME", "collector-tls")],
    );
    let pki = tls::Pki::new("collector");
    let server = pki.leaf(
        "collector",
        &["127.0.0.1"],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let downstream = format!("http://{}", listener.local_addr().unwrap());
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    serve(listener, inbox.clone());
    let port = closed_port();
    let collector = Collector::start_with_tls(
        &dir,
        port,
        &downstream,
        Some((&server.cert_path, &server.key_path)),
    );
    let url = format!("https://127.0.0.1:{port}");
    let ca = pki.ca_path();
    let pid = fixture.pid.to_string();
    let run = |args: &[&str], env: &[(&str, &Path)]| {
        let mut command = Command::new(otel_ctx());
        command
            .args([
                "profile",
                &pid,
                &format!("--otlp={url}"),
                "--duration",
                "2s",
            ])
            .args(["--otlp-timeout", "2s"])
            .args(args)
            .env_remove("OTEL_EXPORTER_OTLP_CERTIFICATE")
            .envs(env.iter().copied());
        let out = bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let delivered = || inbox.lock().unwrap().requests.len();

    let (code, stderr) = run(&["--otlp-ca", ca.to_str().unwrap()], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    wait_for(Duration::from_secs(20), "the request passed on", || {
        delivered() >= 1
    });
    let (code, stderr) = run(&[], &[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca)]);
    assert_eq!(code, Some(0), "{stderr}");
    wait_for(Duration::from_secs(20), "the second passed on", || {
        delivered() >= 2
    });
    let trusted_log = collector.log();
    assert!(complaints(&trusted_log).is_empty(), "{trusted_log}");
    let (code, stderr) = run(&[], &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");
    let log = collector.stop();
    // The handshakes the tool broke off are the Collector's to log; nothing else is.
    let refused = &log[trusted_log.len()..];
    let others: Vec<&str> = complaints(refused)
        .into_iter()
        .filter(|l| !l.contains("TLS handshake error"))
        .collect();
    assert!(others.is_empty(), "{log}");
    store(&inbox.lock().unwrap(), &dir);
    let profiles = decode_with(&dir, &["--forwarded"]);
    assert!(
        of_pid(&profiles, fixture.pid)
            .iter()
            .all(|p| p["resource"]["service.name"] == "collector-tls"),
        "{profiles:?}"
    );
    assert!(of_pid(&profiles, fixture.pid).len() >= 2, "{profiles:?}");
    drop(fixture);
}

/// The Collector configuration of the README's "Sending profiles to an OpenTelemetry
/// Collector" is one the Collector accepts.
#[test]
fn the_readmes_collector_configuration_is_valid() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the README");
    let section = readme
        .split("### Sending profiles to an OpenTelemetry Collector")
        .nth(1)
        .expect("the section");
    let block = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its yaml block");
    let dir = scratch("readme-collector");
    let config = dir.join("collector.yaml");
    std::fs::write(&config, block).expect("write the configuration");
    let out = bounded::output(
        Command::new(collector_binary())
            .arg("validate")
            .arg(format!("--config=file:{}", config.display()))
            .arg("--feature-gates=service.profilesSupport"),
        bounded::DEADLINE,
    )
    .expect("run the Collector");
    assert!(
        out.status.success(),
        "{block}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--off-cpu` over OTLP: each process has two profiles, one sample type each (CPU time,
/// then off-CPU time), the waits under their routes and their functions.
#[test]
fn off_cpu_time_is_a_second_profile() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("off-cpu");
    let exe = fixture::build_publisher("off_cpu.c", "fleet-off-cpu", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("--otlp=http://{}", listener.local_addr().unwrap());
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    serve(listener, inbox.clone());
    let pid = fixture.pid.to_string();
    let args = [
        "profile",
        &pid,
        "--off-cpu",
        &url,
        "--export-interval",
        "1s",
        "--duration",
        "4s",
    ];
    let run = support::run(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let inbox = inbox.lock().unwrap();
    assert!(inbox.bad.is_empty(), "{:?}", inbox.bad);
    store(&inbox, &dir);
    let profiles = decode(&dir);
    let mine = of_pid(&profiles, fixture.pid);
    let kind = |p: &serde_json::Value| p["sample_type"][0].as_str().unwrap_or("").to_owned();
    let kinds: BTreeSet<String> = mine.iter().map(|p| kind(p)).collect();
    assert_eq!(
        kinds,
        ["cpu", "off_cpu"].map(str::to_owned).into(),
        "{mine:?}"
    );
    // Each request holds both, in that order.
    for pair in mine.chunks(2) {
        assert_eq!(
            (kind(pair[0]), kind(pair[1])),
            ("cpu".into(), "off_cpu".into())
        );
    }
    // Off-CPU nanoseconds per route, and the route's function in their stacks.
    let mut off = BTreeMap::<String, (i64, i64)>::new();
    for p in mine.iter().filter(|p| kind(p) == "off_cpu") {
        for s in p["samples"].as_array().expect("samples") {
            let Some(route) = s["attributes"]["http.route"].as_str() else {
                continue;
            };
            let ns = s["values"][0].as_i64().expect("a value");
            let functions = s["functions"].as_array().expect("functions");
            let own = format!("{}_route", route.trim_start_matches('/'));
            let entry = off.entry(route.to_owned()).or_default();
            entry.0 += ns;
            if functions.iter().any(|f| f.as_str() == Some(&own)) {
                entry.1 += ns;
            }
        }
    }
    for route in ["/sleep", "/pipe", "/lock"] {
        let (all, through) = off.get(route).copied().unwrap_or_default();
        assert!(
            all >= 2_000_000_000,
            "{route}: {all} ns off a CPU in 4 s: {off:?}"
        );
        assert!(
            through * 10 >= all * 8,
            "{route}: {through} of {all} ns through its function"
        );
    }
    assert!(
        off.get("/cpu").map_or(0, |t| t.0) < 1_000_000_000,
        "{off:?}"
    );
    fixture.finish();
}
