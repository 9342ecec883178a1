//! The README's recipe as a new user follows it: the example services run until they are
//! stopped (Ctrl-C, SIGTERM), `otel-ctx ps` finds the service's pid, and a 10 s profile by
//! route shows its two routes, which do the same work, with even shares. And work in step
//! with the sampling rate (a cycle of exactly 1/99 s), which a sampler at a fixed 99 Hz
//! sees at one point of its cycle only: the ptrace sampler's random intervals see both
//! halves alike. A build with the eBPF sampler (the default sampler of the recipe); root
//! (ptrace, BPF) and gcc.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use fixture::{ffi_library, gcc, out_path, Fixture};
use support::{run, text};

/// The period of a 99 Hz sampler, in nanoseconds, as the tool computes it.
const PERIOD_99_HZ_NS: u64 = 1_000_000_000 / 99;

/// The services spin on a CPU each, and a sampler at a fixed period is found out best on
/// a quiet machine: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-recipe-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// A running example service; killed on drop.
struct Service(Child);

impl Service {
    fn start(bin: &str, service_name: &str) -> Self {
        let exe = support::binary("otel-ctx-examples", bin);
        // SIGINT's and SIGTERM's default action, as from a terminal: a test run started
        // from a shell that ignores them (a background job) passes that on.
        let child = Command::new("env")
            .arg("--default-signal=INT,TERM")
            .arg(&exe)
            .env("OTEL_SERVICE_NAME", service_name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        Self(child)
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the child this test started and has not reaped.
        let rc = unsafe { libc::kill(self.0.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill");
    }

    /// Sends `signal` and waits for the service to end by it, at most 5 s.
    fn stop_by(mut self, signal: libc::c_int) {
        use std::os::unix::process::ExitStatusExt;
        self.signal(signal);
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running 5 s after signal {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.signal(), Some(signal), "{status}");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pid `otel-ctx ps --json` lists for `service_name`, as the README finds it; waits
/// for the service to publish, at most 10 s.
fn pid_from_ps(service_name: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(&["ps", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ps --json");
        let found = doc["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .find(|p| p["service.name"] == service_name)
            .and_then(|p| p["pid"].as_u64());
        if let Some(pid) = found {
            return u32::try_from(pid).expect("a pid");
        }
        assert!(Instant::now() < deadline, "ps never listed {service_name}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Samples of /cart and of /checkout in folded stacks, whose first frame is the route.
fn routes(folded: &str) -> (u64, u64) {
    let mut counts = (0, 0);
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("`stack count`");
        let n: u64 = n.parse().expect("a count");
        match stack.split(';').next() {
            Some("/cart") => counts.0 += n,
            Some("/checkout") => counts.1 += n,
            _ => {}
        }
    }
    counts
}

/// Two routes of equal work come out within 40/60. (A binomial share of a few hundred
/// samples or more strays from half by 2 to 3 points; the profile that prompted this
/// test gave 27/72.)
fn assert_even(what: &str, (cart, checkout): (u64, u64)) {
    let all = cart + checkout;
    assert!(all >= 100, "{what}: {all} samples under the two routes");
    let share = cart as f64 * 100.0 / all as f64;
    assert!(
        (40.0..=60.0).contains(&share),
        "{what}: /cart {cart} and /checkout {checkout} samples ({share:.1}% /cart)"
    );
}

/// Runs `otel-ctx profile <pid> <args> -o <dir>/<name>.folded --by http.route`; the
/// samples of the two routes.
fn profile_routes(pid: u32, dir: &Path, name: &str, args: &[&str]) -> (u64, u64) {
    let path = dir.join(format!("{name}.folded"));
    let pid = pid.to_string();
    let mut all = vec!["profile", &pid, "-o", path.to_str().expect("UTF-8")];
    all.extend(["--by", "http.route"]);
    all.extend_from_slice(args);
    let out = run(&all);
    assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    routes(&std::fs::read_to_string(&path).expect("the folded profile"))
}

#[test]
fn the_tracing_service_runs_until_stopped_and_its_routes_come_out_even() {
    let _serial = serial();
    let name = format!("readme-checkout-{}", std::process::id());
    let mut service = Service::start("tracing_service", &name);
    let started = Instant::now();
    // Its pid, as the README finds it.
    let pid = pid_from_ps(&name);
    assert_eq!(pid, service.0.id());
    let dir = scratch("tracing");
    // The README's profile: the default sampler (eBPF: this test needs the feature), 10 s;
    // then ptrace.
    let default = profile_routes(pid, &dir, "default", &["--duration", "10s"]);
    assert_even("the default sampler", default);
    let ptrace = profile_routes(pid, &dir, "ptrace", &["--duration", "5s", "--ptrace"]);
    assert_even("ptrace", ptrace);
    // Still serving past the 30 s the example once stopped at; Ctrl-C ends it.
    let past = Duration::from_secs(32);
    if let Some(left) = past.checked_sub(started.elapsed()) {
        std::thread::sleep(left);
    }
    assert!(
        service.0.try_wait().expect("wait").is_none(),
        "the service stopped by itself within {:?}",
        started.elapsed()
    );
    service.stop_by(libc::SIGINT);
}

#[test]
fn the_sdk_service_runs_until_sigterm() {
    let _serial = serial();
    // Its service name is its Resource's: `checkout`, whatever the environment says.
    let service = Service::start("otel_service", "ignored");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = service.0.id().to_string();
    while !run(&["show", &pid]).status.success() {
        assert!(Instant::now() < deadline, "the SDK service never published");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    service.stop_by(libc::SIGTERM);
}

#[test]
fn work_in_step_with_the_rate_is_seen_evenly_by_the_ptrace_sampler() {
    let _serial = serial();
    let exe = out_path("in-step");
    let lib = ffi_library();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../ffi/include");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/in_step.c");
    let rpath = format!("-Wl,-rpath,{}", lib.parent().expect("a folder").display());
    gcc(&[
        "-std=c11",
        "-Wall",
        "-Werror",
        "-O2",
        "-pthread",
        "-I",
        include,
        "-o",
        exe.to_str().expect("UTF-8"),
        source,
        lib.to_str().expect("UTF-8"),
        &rpath,
    ]);
    let cycle = PERIOD_99_HZ_NS.to_string();
    let fixture = Fixture::start(&exe, &[Path::new(&cycle)]);
    let dir = scratch("in-step");
    let profiled = profile_routes(
        fixture.pid,
        &dir,
        "ptrace",
        &["--ptrace", "--hz", "99", "--duration", "5s"],
    );
    assert_even("profile --ptrace at 99 Hz", profiled);
    // `watch` samples on the same schedule.
    let out = run(&[
        "watch",
        &fixture.pid.to_string(),
        "--sampler",
        "ptrace",
        "--hz",
        "99",
        "--duration",
        "5s",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("watch --json");
    let count = |route: &str| {
        doc["counts"]
            .as_array()
            .expect("counts")
            .iter()
            .find(|c| c["value"] == route)
            .and_then(|c| c["samples"].as_u64())
            .unwrap_or(0)
    };
    assert_even("watch at 99 Hz", (count("/cart"), count("/checkout")));
    fixture.finish();
}
