//! Datadog's Java agent (dd-java-agent 1.68.1, `scripts/java-agent.sh`), the most widely
//! deployed writer of both specs: its tracer publishes the process context, its profiler
//! (`libjavaProfiler.so`, loaded with `DD_PROFILING_ENABLED=true`) keeps each thread's
//! context as an OTEP 4947 record. A Java service of three request threads, each in
//! `@Trace` spans of its route (`tests/fixtures/java/TracedService.java`), read as a user
//! would: `ps` and `show` find its resource and its request threads' trace and span ids
//! and attributes, `check` finds no rule broken, and `profile` puts its samples under
//! their traces and names its Java methods (`--java-perf-map`: the JVM asked for its perf
//! map, which nothing else does). A JVM that does not catch `SIGQUIT` (`-Xrs`) is never
//! signalled. Root (ptrace, BPF), a JDK, Maven's local repository.
#![cfg(feature = "ebpf")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::bounded::{self, Lines, DEADLINE};
use support::{read_folded, run, scratch, text, KillOnDrop};

/// A jar of Maven's local repository that `scripts/java-agent.sh` fetches.
fn jar(group: &str, name: &str, version: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let path = PathBuf::from(home)
        .join(".m2/repository")
        .join(group.replace('.', "/"))
        .join(name)
        .join(version)
        .join(format!("{name}-{version}.jar"));
    assert!(
        path.exists(),
        "{} is missing: bash scripts/java-agent.sh",
        path.display()
    );
    path
}

/// Compiles the service into `dir`, against `api` (dd-trace-api).
fn compile(api: &std::path::Path, dir: &std::path::Path) {
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/java/TracedService.java"
    );
    let compiled = bounded::output(
        Command::new("javac")
            .arg("-cp")
            .arg(api)
            .arg("-d")
            .arg(dir)
            .arg(source),
        DEADLINE,
    )
    .expect("run javac (a JDK: openjdk-17-jdk-headless)");
    assert!(compiled.status.success(), "{}", text(&compiled.stderr));
}

/// The service, compiled and started with the agent; its pid once it said it is ready.
fn start_service(dir: &std::path::Path) -> (KillOnDrop, u32) {
    let agent = jar("com.datadoghq", "dd-java-agent", "1.68.1");
    let mut java = Command::new("java");
    java.arg("-XX:+PreserveFramePointer")
        .arg(format!("-javaagent:{}", agent.display()))
        .env("DD_PROFILING_ENABLED", "true")
        .env("DD_SERVICE", "java-service")
        .env("DD_ENV", "test")
        .env("DD_VERSION", "1.2.3")
        // The agent's URL points nowhere: nothing leaves the host.
        .env("DD_TRACE_AGENT_URL", "http://127.0.0.1:9")
        .env("DD_INSTRUMENTATION_TELEMETRY_ENABLED", "false")
        .env("DD_REMOTE_CONFIGURATION_ENABLED", "false");
    run_service(java, dir)
}

/// The service compiled into `dir` and run by `java` (its options given); its pid once
/// it said it is ready.
fn run_service(mut java: Command, dir: &std::path::Path) -> (KillOnDrop, u32) {
    let api = jar("com.datadoghq", "dd-trace-api", "1.66.0");
    compile(&api, dir);
    let classpath = format!("{}:{}", api.display(), dir.display());
    let mut child = java
        .args(["-cp", &classpath, "TracedService"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start java");
    let stdout = child.stdout.take().expect("piped");
    let service = KillOnDrop(child);
    let line = Lines::new("TracedService", stdout).line("its ready line", DEADLINE);
    let pid: u32 = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    assert_eq!(pid, service.0.id());
    (service, pid)
}

/// `otel-ctx profile <pid> --java-perf-map --duration <duration> <args> -o <out>`, which
/// must succeed; its stderr.
fn java_profile(pid: &str, duration: &str, args: &[&str], out: &std::path::Path) -> String {
    let out = out.to_str().expect("a UTF-8 path");
    let fixed = [
        "profile",
        pid,
        "--java-perf-map",
        "--duration",
        duration,
        "-o",
        out,
    ];
    let profiled = run(&[&fixed[..], args].concat());
    let stderr = text(&profiled.stderr);
    assert!(profiled.status.success(), "{stderr}");
    stderr
}

/// `otel-ctx <args> --json`, parsed.
fn json(args: &[&str]) -> serde_json::Value {
    let out = run(&[args, &["--json"]].concat());
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Whether `ids` is `len` lowercase hex digits, not all zero.
fn hex_id(id: &serde_json::Value, len: usize) -> bool {
    id.as_str().is_some_and(|s| {
        s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit()) && s.bytes().any(|b| b != b'0')
    })
}

#[test]
fn datadogs_java_agent_read_checked_and_profiled() {
    let dir = scratch("java-agent");
    let (_service, pid) = start_service(&dir);
    let pid_arg = pid.to_string();
    let workers = ["w-checkout", "w-search", "w-cart"];

    // The agent starts its profiler some seconds after the JVM: wait for every request
    // thread to show a context.
    let deadline = Instant::now() + Duration::from_secs(90);
    let shown = loop {
        let shown = json(&["show", &pid_arg]);
        let ready = shown["threads"].as_array().is_some_and(|threads| {
            workers.iter().all(|w| {
                threads
                    .iter()
                    .any(|t| t["name"] == *w && hex_id(&t["context"]["trace_id"], 32))
            })
        });
        if ready {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "no context on every request thread after 90 s: {shown}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };

    // The process context: the resource Datadog's tracer builds, and its key map.
    let context = &shown["process_context"];
    assert_eq!(
        context["resource"]["service.name"], "java-service",
        "{context}"
    );
    assert_eq!(context["resource"]["deployment.environment.name"], "test");
    assert_eq!(context["resource"]["telemetry.sdk.name"], "dd-trace-java");
    assert_eq!(context["resource"]["telemetry.sdk.language"], "java");
    let key_map = &context["attributes"]["threadlocal.attribute_key_map"];
    assert!(
        key_map
            .as_array()
            .is_some_and(|k| k.iter().any(|n| n == "datadog.local_root_span_id")),
        "{context}"
    );
    let listed = json(&["ps"]);
    assert!(
        listed["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid && p["service.name"] == "java-service"),
        "{listed}"
    );
    // Each request thread: its span's trace and span ids, and the attributes the key map
    // names (the local root span id, which is this span's own: each request is a root).
    for worker in workers {
        let thread = shown["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == worker)
            .unwrap();
        let ctx = &thread["context"];
        assert!(hex_id(&ctx["span_id"], 16), "{thread}");
        assert_eq!(
            ctx["attributes"]["_dd.trace.operation"], "http.request",
            "{thread}"
        );
        assert_eq!(
            ctx["attributes"]["datadog.local_root_span_id"], ctx["span_id"],
            "{thread}"
        );
    }

    // check: no rule broken by Datadog's writer (what it does that the spec only allows
    // is a warning, such as its TLS access model).
    let checked = bounded::output(
        Command::new(support::otel_ctx()).args(["check", &pid_arg]),
        DEADLINE,
    )
    .expect("run check");
    let report = text(&checked.stdout);
    assert_eq!(
        checked.status.code(),
        Some(0),
        "{report}{}",
        text(&checked.stderr)
    );
    assert!(report.contains(" 0 FAIL"), "{report}");
    for rule in [
        "pc.payload.decodes",
        "tc.symbol.dynsym",
        "tc.record.valid",
        "tc.attrs.key_index",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("PASS") && l.contains(rule)),
            "{rule}: {report}"
        );
    }

    // Nothing so far touched the JVM: its attach listener never started.
    let socket = format!("/proc/{pid}/root/tmp/.java_pid{pid}");
    assert!(!std::path::Path::new(&socket).exists(), "{socket}");

    // profile --java-perf-map: the JVM writes its perf map when asked (at the start,
    // every 5 s, and at the end), the samples go under their traces, and the Java
    // methods are named.
    let out = dir.join("java.folded");
    let stderr = java_profile(&pid_arg, "6s", &["--by", "trace_id"], &out);
    let asked = stderr
        .lines()
        .find_map(|l| l.strip_prefix("java perf map: asked the JVM "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        asked.starts_with("3 times, written 3 times")
            || asked.starts_with("2 times, written 2 times"),
        "{asked}"
    );
    let folded = read_folded(&out);
    let total: u64 = folded.values().sum();
    // The request threads' samples are those with a context (no other thread of the
    // JVM has a record); those under a trace, and of those, the ones a Java method of the
    // service names.
    let mut traces = BTreeSet::new();
    let (mut requests, mut in_traces, mut named) = (0, 0, 0);
    let mut routes = BTreeSet::new();
    for (frames, n) in &folded {
        if frames[0] == "(no context)" {
            continue;
        }
        requests += n;
        if !hex_id(&serde_json::Value::from(frames[0].as_str()), 32) {
            continue;
        }
        traces.insert(frames[0].clone());
        in_traces += n;
        if frames.iter().any(|f| f.contains("TracedService.")) {
            named += n;
        }
        for route in ["checkout", "search", "cart"] {
            if frames
                .iter()
                .any(|f| f.contains(&format!("TracedService.{route}")))
            {
                routes.insert(route);
            }
        }
    }
    assert!(total >= 100, "{total} samples: {stderr}");
    // Three threads, each in a new 200 ms request: a dozen traces or more in 6 s.
    assert!(traces.len() >= 6, "{} traces: {stderr}", traces.len());
    assert!(
        in_traces * 2 >= requests,
        "{in_traces} of the request threads' {requests} samples under a trace"
    );
    assert!(
        named * 2 >= in_traces,
        "{named} of {in_traces} samples under a trace name a Java method of the service"
    );
    assert_eq!(routes.len(), 3, "{routes:?}: {stderr}");
    // With the flag, it was: its listener runs now.
    assert!(std::path::Path::new(&socket).exists(), "{socket}");
}

/// A JVM run with `-Xrs` does not catch `SIGQUIT`, which would end it: `--java-perf-map`
/// leaves it alone, says so, and profiles it all the same.
#[test]
fn a_jvm_that_does_not_catch_sigquit_is_not_signalled() {
    let dir = scratch("java-xrs");
    let mut java = Command::new("java");
    java.arg("-Xrs");
    let (mut service, pid) = run_service(java, &dir);
    let pid = pid.to_string();
    let out = dir.join("xrs.folded");
    let stderr = java_profile(&pid, "1s", &[], &out);
    assert!(
        stderr.contains(&format!(
            "java perf map: process {pid} not asked: the JVM does not catch SIGQUIT"
        )),
        "{stderr}"
    );
    assert!(
        service.0.try_wait().expect("wait").is_none(),
        "the JVM ended"
    );
}
