//! `otel-ctx watch --ebpf` against a C writer of the TLS matrix whose threads spin (the
//! reader's `ebpf_fixtures/busy_main.c`): the eBPF sampler's table has the same buckets
//! as the ptrace sampler's, and where the kernel refuses BPF the command says why.
//! Needs root and gcc; built with the `ebpf` feature (the last test checks the message
//! of a build without it).

use std::process::Command;
#[cfg(feature = "ebpf")]
use std::{
    path::PathBuf,
    process::{Child, Output, Stdio},
};

#[cfg(feature = "ebpf")]
use serde_json::Value;

mod support;

#[cfg(feature = "ebpf")]
use support::DEMO_ROUTES;
use support::{bounded, otel_ctx, text};

#[cfg(feature = "ebpf")]
const TLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../reader-linux/tests");
#[cfg(feature = "ebpf")]
const EBPF_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sampler-linux/tests");

#[cfg(feature = "ebpf")]
struct Busy(Child);

#[cfg(feature = "ebpf")]
impl Drop for Busy {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(feature = "ebpf")]
/// Builds and starts the spinning C writer (local exec, glibc); returns once its threads
/// have attached their records.
fn busy() -> Busy {
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("watch-ebpf-busy");
    let status = Command::new("gcc")
        .args(["-O1", "-pthread", "-rdynamic", "-o"])
        .arg(&exe)
        .arg(format!("{EBPF_FIXTURES}/ebpf_fixtures/busy_main.c"))
        .arg(format!("{TLS}/fixtures/tls/writer.c"))
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed");
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let stdout = child.stdout.take().expect("piped stdout");
    bounded::Lines::new(exe.display().to_string(), stdout).until(
        "its threads and `ready`",
        bounded::DEADLINE,
        |l| l == "ready",
    );
    Busy(child)
}

#[cfg(feature = "ebpf")]
fn watch(pid: u32, extra: &[&str]) -> Output {
    bounded::output(
        Command::new(otel_ctx())
            .args(["watch", &pid.to_string(), "--duration", "1s", "--hz", "499"])
            .args(["--raw-keys", "--by", "#0", "--json"])
            .args(extra),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx")
}

#[cfg(feature = "ebpf")]
/// The buckets of a `watch --json` document.
fn buckets(out: &Output) -> Vec<String> {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut values: Vec<String> = doc["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|c| c["value"].as_str().expect("value").to_owned())
        .collect();
    values.sort();
    values
}

#[cfg(feature = "ebpf")]
#[test]
fn ebpf_and_ptrace_see_the_same_buckets() {
    let target = busy();
    let pid = target.0.id();
    let ebpf = watch(pid, &["--ebpf"]);
    let doc: Value = serde_json::from_slice(&ebpf.stdout).expect("JSON");
    assert_eq!(doc["rounds"], 0, "{doc}");
    let samples = doc["samples"].as_u64().expect("samples");
    assert!(samples > 0, "{doc}");
    assert!(
        doc["ebpf"]["ticks"].as_u64().expect("ticks") >= samples,
        "{doc}"
    );
    let expected = ["(no context)", "/cart", "/checkout", "/search"];
    assert_eq!(buckets(&ebpf), expected, "{doc}");
    assert_eq!(buckets(&watch(pid, &["--sampler", "ptrace"])), expected);

    // The text view names the sampler.
    let out = bounded::output(
        Command::new(otel_ctx())
            .args(["watch", &pid.to_string(), "--duration", "300ms", "--ebpf"])
            .args(["--raw-keys", "--by", "#0"]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    // The heading and the closing line on stderr, the table alone on stdout.
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("(local-exec, glibc); eBPF sampling of"),
        "{stderr}"
    );
    assert!(stderr.contains("samples from eBPF"), "{stderr}");
    assert!(
        text(&out.stdout).starts_with("  #0 "),
        "{}",
        text(&out.stdout)
    );

    // `show --ebpf`: each thread it lists has the context `show` (ptrace) reads.
    let show = |extra: &[&str]| -> Value {
        let out = bounded::output(
            Command::new(otel_ctx())
                .args(["show", &pid.to_string(), "--raw-keys", "--json"])
                .args(extra),
            bounded::DEADLINE,
        )
        .expect("run otel-ctx");
        // The C writer publishes no process context: exit status 1, the document anyway.
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let ebpf = show(&["--ebpf"]);
    let ptrace = show(&[]);
    let listed = ebpf["threads"].as_array().expect("threads");
    assert!(listed.len() >= 4, "{ebpf}");
    for thread in listed {
        let same = ptrace["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["tid"] == thread["tid"])
            .unwrap_or_else(|| panic!("{thread} not in {ptrace}"));
        assert_eq!(thread, same);
    }
    assert_eq!(ebpf["thread_context"], ptrace["thread_context"]);
}

#[cfg(feature = "ebpf")]
#[test]
fn without_the_capabilities_ebpf_says_why_and_ptrace_still_works() {
    let target = busy();
    let pid = target.0.id().to_string();
    // Root without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN: BPF is refused, ptrace is not.
    let dropped = |extra: &[&str]| {
        bounded::output(
            Command::new("setpriv")
                .arg("--bounding-set=-bpf,-perfmon,-sys_admin")
                .arg(otel_ctx())
                .args(["watch", &pid])
                .args(["--duration", "300ms", "--raw-keys", "--by", "#0"])
                .args(extra),
            bounded::DEADLINE,
        )
        .expect("run setpriv (util-linux)")
    };
    let out = dropped(&["--ebpf"]);
    // The sampler could not start: exit status 2, as for a process that cannot be read.
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the eBPF sampler needs root, or CAP_BPF and CAP_PERFMON")
            && stderr.contains("with ptrace instead (--sampler ptrace)"),
        "{stderr}"
    );
    let out = dropped(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("samples in"));
}

#[cfg(not(feature = "ebpf"))]
#[test]
fn a_build_without_the_feature_says_how_to_get_it() {
    let out = bounded::output(
        Command::new(otel_ctx()).args(["watch", &std::process::id().to_string(), "--ebpf"]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    assert_eq!(out.status.code(), Some(2), "bad usage for this build");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--features ebpf"), "{stderr}");
}

#[cfg(feature = "ebpf")]
#[test]
fn the_demo_service_sampled_by_ebpf() {
    let demo = support::DemoService::start();
    let pid = demo.pid();

    // Its workers spin inside request spans: the ticks that land there name a route.
    let out = bounded::output(
        Command::new(otel_ctx()).args([
            "watch",
            &pid,
            "--ebpf",
            "--hz",
            "999",
            "--duration",
            "1s",
            "--json",
        ]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut routes = 0;
    for c in doc["counts"].as_array().expect("counts") {
        let value = c["value"].as_str().expect("value");
        if DEMO_ROUTES.contains(&value) {
            routes += 1;
        } else {
            assert_eq!(value, "(no context)", "unexpected bucket in {doc}");
        }
    }
    assert!(routes >= 2, "{doc}");

    // `show --ebpf`: every context it lists is a request's.
    let out = bounded::output(
        Command::new(otel_ctx()).args(["show", &pid, "--ebpf", "--json"]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for thread in doc["threads"].as_array().expect("threads") {
        let context = &thread["context"];
        if context.is_null() {
            assert!(thread.get("error").is_none(), "{thread}");
            continue;
        }
        let route = context["attributes"]["http.route"]
            .as_str()
            .expect("a route");
        assert!(DEMO_ROUTES.contains(&route), "{thread}");
        assert_eq!(context["trace_id"].as_str().expect("trace id").len(), 32);
    }
}

/// `otel-ctx demo --ebpf`: the live view of the demo service, sampled by eBPF; its final
/// table (printed when the output is not a terminal) names the service's routes.
#[cfg(all(feature = "ebpf", feature = "demo"))]
#[test]
fn the_demo_view_from_ebpf_samples() {
    let out = bounded::output(
        Command::new(otel_ctx())
            .args(["demo", "--ebpf", "--duration", "3s"])
            .stdin(Stdio::null()),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx demo");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("eBPF sampling of"),
        "the view does not say it samples by eBPF:\n{stderr}"
    );
    let routes = DEMO_ROUTES
        .iter()
        .filter(|route| stdout.lines().any(|l| l.trim_start().starts_with(*route)))
        .count();
    assert!(routes >= 2, "fewer than 2 routes in the table:\n{stdout}");
    let samples: u64 = stderr
        .lines()
        .find_map(|l| l.split("took ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the closing line counts the samples");
    assert!(samples > 0, "{stderr}");
}

#[cfg(all(not(feature = "ebpf"), feature = "demo"))]
#[test]
fn a_build_without_the_feature_refuses_demo_ebpf() {
    let out = bounded::output(
        Command::new(otel_ctx()).args(["demo", "--ebpf", "--duration", "1s"]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    assert_eq!(out.status.code(), Some(2), "bad usage for this build");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--features ebpf"), "{stderr}");
}
