//! The `otel-ctx` tool against live processes: `ps`, `show`, their JSON, `demo`, and the
//! exit statuses.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};

mod support;

use support::{bounded, otel_ctx, run, text, DemoService, DEMO_ROUTES};

/// The `otel-ctx-publish` helper, built once.
fn publish_helper() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::helper("otel-ctx-publish", &[]))
}

/// A process publishing the `serve` context of `otel-ctx-publish`; reaped on drop.
struct Publisher(Child);

impl Publisher {
    fn start() -> Self {
        let mut child = Command::new(publish_helper())
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let line = bounded::Lines::new("otel-ctx-publish serve", stdout)
            .line("its `ready`", bounded::DEADLINE);
        assert_eq!(line.trim(), "ready");
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const INSTANCE_ID: &str = "6f1c1e0a-3a5e-4b8e-9c57-1d2f3a4b5c6d";
const MAPPING_NAMES: [&str; 6] = [
    "[anon_shmem:OTEL_CTX]",
    "[anon_shmem:OTEL_CTX] (deleted)",
    "[anon:OTEL_CTX]",
    "[anon:OTEL_CTX] (deleted)",
    "/memfd:OTEL_CTX",
    "/memfd:OTEL_CTX (deleted)",
];

#[test]
fn ps_lists_a_live_publisher() {
    let publisher = Publisher::start();
    let out = run(&["ps"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "PID",
            "COMMAND",
            "SERVICE.NAME",
            "SERVICE.INSTANCE.ID",
            "SERVICE.VERSION",
            "PUBLISHED",
            "THREAD.SCHEMA"
        ]
    );
    let pid = publisher.pid().to_string();
    let row: Vec<&str> = lines
        .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .unwrap_or_else(|| panic!("pid {pid} missing from:\n{stdout}"))
        .split_whitespace()
        .collect();
    // comm is cut to 15 bytes by the kernel.
    assert_eq!(row[1], "otel-ctx-publis");
    assert_eq!(row[2], "cli-test-service");
    assert_eq!(row[3], INSTANCE_ID);
    assert_eq!(row[4], "2.7.1");
    assert!(row[5].ends_with('s'), "published {:?}", row[5]);
    assert_eq!(row[6], "ago");
    assert_eq!(row[7], "-");
    // Columns are aligned: each header starts where its cells start.
    let header_line = stdout.lines().next().unwrap();
    let row_line = stdout.lines().find(|l| l.starts_with(&pid)).unwrap();
    for column in ["SERVICE.NAME", "SERVICE.INSTANCE.ID", "SERVICE.VERSION"] {
        let at = header_line.find(column).unwrap();
        assert_ne!(
            row_line.as_bytes()[at],
            b' ',
            "{column} misaligned:\n{stdout}"
        );
        assert_eq!(
            row_line.as_bytes()[at - 1],
            b' ',
            "{column} misaligned:\n{stdout}"
        );
    }
}

#[test]
fn ps_json_fields() {
    let publisher = Publisher::start();
    let out = run(&["ps", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["denied"].is_array());
    let entry = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == json!(publisher.pid()))
        .unwrap_or_else(|| panic!("pid missing from {doc}"));
    assert_eq!(entry["comm"], "otel-ctx-publis");
    assert_eq!(entry["service.name"], "cli-test-service");
    assert_eq!(entry["service.instance.id"], INSTANCE_ID);
    assert_eq!(entry["service.version"], "2.7.1");
    assert!(entry["monotonic_published_at_ns"].as_u64().unwrap() > 0);
    assert!(entry["age_ns"].is_u64());
    assert_eq!(entry["threadlocal.schema_version"], Value::Null);
    assert_eq!(entry["error"], Value::Null);
}

#[test]
fn show_text_every_attribute_with_its_type() {
    let publisher = Publisher::start();
    let out = run(&["show", &publisher.pid().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let field = |name: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"))
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        field("pid"),
        [publisher.pid().to_string(), "(otel-ctx-publis)".to_owned()]
    );
    assert!(field("mapping").join(" ").contains("OTEL_CTX"));
    assert_eq!(field("version"), ["2"]);
    assert!(field("published")
        .join(" ")
        .contains("monotonic_published_at_ns"));
    assert_eq!(field("payload")[1], "bytes");
    let expected = [
        ("service.name", "string", "cli-test-service"),
        ("service.instance.id", "string", INSTANCE_ID),
        ("service.version", "string", "2.7.1"),
        ("deployment.environment.name", "string", "test"),
        ("test.int", "int", "-12345678901234"),
        ("test.bool", "bool", "true"),
        ("test.double", "double", "0.5"),
        ("test.bytes", "bytes", "0x000102fdfeff"),
        ("test.array", "array", "[\"a\", 2, false]"),
        (
            "test.kvlist",
            "kvlist",
            "{inner.key: \"inner value\", inner.n: 7}",
        ),
        ("test.extra", "string", "extra value"),
    ];
    for (key, kind, value) in expected {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} in:\n{stdout}"));
        let rest: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(rest[1], kind, "{line}");
        assert_eq!(rest[2..].join(" "), value, "{line}");
    }
    assert!(stdout.contains("resource ("), "{stdout}");
    assert!(stdout.contains("attributes (1)"), "{stdout}");
}

#[test]
fn show_json_fields() {
    let publisher = Publisher::start();
    let out = run(&["show", &publisher.pid().to_string(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["pid"], json!(publisher.pid()));
    assert_eq!(doc["threads"], json!([]));
    let ctx = &doc["process_context"];
    let mapping = ctx["mapping"].as_str().unwrap();
    assert!(MAPPING_NAMES.contains(&mapping), "{mapping}");
    assert_eq!(ctx["version"], 2);
    assert!(ctx["monotonic_published_at_ns"].as_u64().unwrap() > 0);
    assert!(ctx["payload_size"].as_u64().unwrap() > 0);
    let resource = &ctx["resource"];
    assert_eq!(resource["service.name"], "cli-test-service");
    assert_eq!(resource["service.instance.id"], INSTANCE_ID);
    assert_eq!(resource["service.version"], "2.7.1");
    assert_eq!(resource["deployment.environment.name"], "test");
    assert_eq!(resource["telemetry.sdk.language"], "rust");
    assert_eq!(resource["test.int"], json!(-12345678901234_i64));
    assert_eq!(resource["test.bool"], json!(true));
    assert_eq!(resource["test.double"], json!(0.5));
    assert_eq!(resource["test.bytes"], json!({"bytes": "AAEC/f7/"}));
    assert_eq!(resource["test.array"], json!(["a", 2, false]));
    assert_eq!(
        resource["test.kvlist"],
        json!({"inner.key": "inner value", "inner.n": 7})
    );
    assert_eq!(ctx["attributes"], json!({"test.extra": "extra value"}));
}

#[test]
fn show_a_process_without_context_exits_1() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let out = run(&["show", &pid]);
    let json_out = run(&["show", &pid, "--json"]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();

    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("otel-ctx: "), "{stderr}");
    assert!(stderr.contains("publishes no process context"), "{stderr}");

    assert_eq!(json_out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        doc,
        json!({"pid": sleeper.id(), "process_context": null, "thread_context": null,
               "threads": [], "skipped_modules": []})
    );
}

#[test]
fn a_process_that_cannot_be_read_exits_2() {
    // Never existed: not "has exited".
    for command in ["show", "watch", "check"] {
        let out = run(&[command, "4294967295"]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            text(&out.stderr).contains("no process has id 4294967295"),
            "{command}: {}",
            text(&out.stderr)
        );
    }
    // A zombie has exited.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id().to_string();
    let mut out = run(&["show", &pid]);
    for _ in 0..100 {
        if text(&out.stderr).contains("has exited") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        out = run(&["show", &pid]);
    }
    bounded::wait(&mut child, "true", bounded::DEADLINE);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(&format!("process {pid} has exited")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_closed_output_pipe_ends_quietly() {
    let service = DemoService::start();
    let pid = service.pid();
    for args in [
        &["show", &pid][..],
        &["show", &pid, "--json"],
        &["ps"],
        &["check", &pid, "--observe", "0"],
        &["watch", &pid, "--duration", "300ms"],
    ] {
        // The reading end is closed before the tool writes: every write fails with EPIPE.
        let mut child = Command::new(otel_ctx())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out =
            bounded::wait_with_output(child, &format!("otel-ctx {args:?}"), bounded::DEADLINE);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["frobnicate"][..],
        &["show"],
        &["show", "not-a-pid"],
        &["ps", "--yaml"],
        &["demo", "--duration", "soon"],
        &[],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    for command in ["ps", "show", "demo"] {
        assert!(text(&help.stdout).contains(command));
    }
    assert!(
        !text(&help.stdout).contains("demo-service"),
        "the service stays hidden"
    );
}

/// The tool as another user runs it: a copy in a folder anyone may enter (the build's own
/// folder may not be, e.g. under a `mktemp -d` checkout). The folder and the copy.
fn copy_for_every_user(test: &str) -> (PathBuf, PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("otel-ctx-as-nobody-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder for the copy");
    let tool = dir.join("otel-ctx");
    std::fs::copy(otel_ctx(), &tool).expect("copy otel-ctx");
    for path in [&dir, &tool] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .expect("make it reachable by every user");
    }
    (dir, tool)
}

/// Processes the kernel will not show (here, as uid 65534, every other user's: pid 1 at
/// least) are counted in one line on stderr, not listed on every run; `-v` lists them.
#[test]
fn ps_counts_the_processes_it_may_not_read_and_lists_them_with_v() {
    if !rustix::process::geteuid().is_root() {
        println!("not root: cannot drop to another uid, so this case is not exercised here");
        return;
    }
    let (dir, tool) = copy_for_every_user("ps");
    let ps = |extra: &[&str]| {
        let mut command = Command::new(&tool);
        command.arg("ps").args(extra).uid(65534).gid(65534);
        bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx ps as uid 65534")
    };
    let (quiet, verbose) = (ps(&[]), ps(&["-v"]));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(quiet.status.success() && verbose.status.success());
    let stderr = text(&quiet.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("otel-ctx: ")
            && lines[0].ends_with(
                "not checked (the kernel refused to show their maps; -v says which and why)"
            ),
        "{stderr}"
    );
    let refused = support::number_before(lines[0], "processes not checked");
    assert!(refused >= 1, "{stderr}");
    // The table is the same either way.
    assert_eq!(
        text(&quiet.stdout).lines().next(),
        text(&verbose.stdout).lines().next()
    );

    let listed = text(&verbose.stderr);
    let mut lines = listed.lines();
    let heading = lines.next().expect("a heading");
    assert!(
        heading.ends_with("(the kernel refused to show their maps):"),
        "{listed}"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(
        rows.iter()
            .any(|row| row.starts_with("  1 (") && row.contains("belongs to another user")),
        "pid 1 with what refused it:\n{listed}"
    );
}

#[test]
fn permission_denied_names_what_is_needed() {
    if !rustix::process::geteuid().is_root() {
        println!("not root: cannot drop to another uid, so this case is not exercised here");
        return;
    }
    let (dir, tool) = copy_for_every_user("show");
    let publisher = Publisher::start();
    let mut command = Command::new(&tool);
    command
        .args(["show", &publisher.pid().to_string()])
        .uid(65534)
        .gid(65534);
    let out = bounded::output(&mut command, bounded::DEADLINE);
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("run otel-ctx as uid 65534");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    // What refuses, found out: another user's process, without CAP_SYS_PTRACE.
    assert!(stderr.contains("belongs to another user"), "{stderr}");
    assert!(stderr.contains("CAP_SYS_PTRACE"), "{stderr}");
}

#[cfg(feature = "demo")]
#[test]
fn demo_profiles_its_service_by_route() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo-profile.folded");
    let _ = std::fs::remove_file(&path);
    let out = run(&[
        "demo",
        "--duration",
        "2500ms",
        "--profile",
        path.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The profile's summary, on stderr.
    assert!(text(&out.stderr).contains("folded stacks written to"));
    let folded = std::fs::read_to_string(&path).expect("the profile");
    let routes: std::collections::BTreeSet<&str> = folded
        .lines()
        .filter_map(|l| l.split(';').next())
        .filter(|root| DEMO_ROUTES.contains(root))
        .collect();
    assert!(routes.len() >= 2, "{folded}");
}

#[cfg(feature = "demo")]
#[test]
fn demo_runs_and_stops_its_service() {
    let out = run(&["demo", "--duration", "1500ms"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let service_pid: u32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("demo service started: pid "))
        .and_then(|rest| rest.split(';').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no service pid in:\n{stderr}"));
    assert!(stdout.contains("demo-checkout"), "{stdout}");
    assert!(
        stdout.contains("deployment.environment.name  string  demo"),
        "{stdout}"
    );
    assert!(stdout.contains("published: "), "{stdout}");
    assert!(
        stdout.contains("updated (monotonic_published_at_ns"),
        "{stdout}"
    );
    assert!(stdout.contains("demo.requests_served"), "{stdout}");
    assert!(
        stderr.contains("demo service stopped (exit status: 0)"),
        "{stderr}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{service_pid}")).exists(),
        "the demo service {service_pid} is still running"
    );
}

#[cfg(feature = "demo")]
#[test]
fn a_second_reader_beside_the_demo_waits_for_its_sampler() {
    // The demo samples its service with ptrace at 99 Hz: each of its samples holds a
    // thread for a moment, and a second reader's PTRACE_SEIZE meets that tracer.
    let mut demo = Command::new(otel_ctx())
        .args(["demo", "--duration", "4s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read to its end on a thread of its own: the demo never waits for a full pipe.
    let mut stderr = bounded::Lines::new("otel-ctx demo", demo.stderr.take().unwrap());
    let started = "demo service started: pid ";
    let said = stderr.until("its service's pid", bounded::DEADLINE, |l| {
        l.starts_with(started)
    });
    let service_pid = said
        .last()
        .and_then(|l| {
            l.strip_prefix(started)?
                .split(';')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .expect("the demo's service pid");
    // Until the demo samples: it opens its sampler once the service has published.
    std::thread::sleep(std::time::Duration::from_millis(700));
    for _ in 0..10 {
        let out = run(&["show", &service_pid.to_string()]);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        // Never blamed on a missing capability: the reader is root; the demo's sampler
        // is named when it keeps a thread through the retries.
        assert!(!stdout.contains("CAP_SYS_PTRACE"), "{stdout}");
        for line in stdout.lines().filter(|l| l.contains("(unreadable")) {
            assert!(line.len() < 120, "a reason inside the table: {line}");
        }
        for line in stdout.lines().filter(|l| l.trim_start().starts_with("[1]")) {
            assert!(line.contains("another tracer"), "{line}");
        }
    }
    // It samples for 4 s.
    bounded::wait(&mut demo, "otel-ctx demo", bounded::DEADLINE);
}

/// The default build is a reader only: `demo` says how to get it, and the tool exports no
/// TLS slot of its own.
#[cfg(not(feature = "demo"))]
#[test]
fn a_build_without_the_demo_says_how_to_get_it() {
    let out = run(&["demo", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--features demo"), "{stderr}");
    let symbols = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(otel_ctx())
        .output()
        .expect("run nm (binutils)");
    assert!(
        !text(&symbols.stdout).contains("otel_thread_ctx_v1"),
        "the read-side tool defines the TLS slot"
    );
}

#[test]
fn show_json_threads() {
    let service = DemoService::start();
    let pid = service.pid();
    // Workers attach and detach all the time: look until a sample shows contexts.
    let mut seen_context = false;
    for _ in 0..50 {
        let out = run(&["show", &pid, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let tc = &doc["thread_context"];
        assert_eq!(tc["access_model"], "local-exec", "{tc}");
        assert_eq!(tc["symbol_table"], "dynsym");
        assert!(tc["defining_module"]
            .as_str()
            .unwrap()
            .ends_with("traced_service"));
        let threads = doc["threads"].as_array().unwrap();
        let workers: Vec<&Value> = threads
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with("demo-worker-"))
            .collect();
        assert_eq!(workers.len(), 4, "{threads:?}");
        for t in threads {
            assert!(t["tid"].as_u64().unwrap() > 0);
            let c = &t["context"];
            if c.is_null() {
                continue;
            }
            seen_context = true;
            let trace = c["trace_id"].as_str().unwrap();
            let span = c["span_id"].as_str().unwrap();
            assert_eq!(trace.len(), 32, "{c}");
            assert_eq!(span.len(), 16, "{c}");
            assert!(trace
                .chars()
                .all(|ch| ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase()));
            assert_eq!(c["trace_flags"], 1);
            let route = c["attributes"]["http.route"].as_str().unwrap();
            assert!(DEMO_ROUTES.contains(&route), "{route}");
            let method = c["attributes"]["http.request.method"].as_str().unwrap();
            assert!(
                ["GET", "POST", "PUT", "DELETE"].contains(&method),
                "{method}"
            );
        }
        if seen_context {
            break;
        }
    }
    assert!(seen_context, "no worker had a context in 50 looks");

    let out = run(&["show", &pid]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("through otel_thread_ctx_v1 in"), "{stdout}");
    assert!(stdout.contains("local-exec, dynsym"), "{stdout}");
    assert!(stdout.contains("demo-worker-0"), "{stdout}");
}

#[test]
fn watch_counts_samples_per_route() {
    let service = DemoService::start();
    let pid = service.pid();
    let out = run(&["watch", &pid, "--duration", "1s", "--hz", "50", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["by"], "http.route");
    assert_eq!(doc["hz"], 50);
    let rounds = doc["rounds"].as_u64().unwrap();
    // The intervals are drawn between half and one and a half periods: 50 of them sum
    // to 1 s give or take about 40 ms (two rounds), so a few more than 51 can fit.
    assert!(
        (20..=60).contains(&rounds),
        "{rounds} rounds in 1 s at 50 Hz"
    );
    let samples = doc["samples"].as_u64().unwrap();
    let counts = doc["counts"].as_array().unwrap();
    let total: u64 = counts.iter().map(|c| c["samples"].as_u64().unwrap()).sum();
    assert_eq!(total, samples);
    // Six threads (main, the publisher loop, four workers) per round.
    assert!(
        samples >= rounds * 5,
        "{samples} samples in {rounds} rounds"
    );
    let mut routes_seen = 0;
    for c in counts {
        let value = c["value"].as_str().unwrap();
        if DEMO_ROUTES.contains(&value) {
            routes_seen += 1;
        } else {
            assert_eq!(value, "(no context)", "unexpected bucket {value}");
        }
    }
    assert!(routes_seen >= 2, "{counts:?}");

    let out = run(&[
        "watch",
        &pid,
        "--duration",
        "300ms",
        "--by",
        "http.request.method",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("HTTP.REQUEST.METHOD"), "{stdout}");
    assert!(text(&out.stderr).contains("samples in"), "{stdout}");
    // Bad usage is 2, and says what to do.
    let zero = run(&["watch", &pid, "--hz", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(text(&zero.stderr).contains("between 1 and 10000"));
    let negative = run(&["watch", &pid, "--duration", "-1"]);
    assert_eq!(negative.status.code(), Some(2));
    let stderr = text(&negative.stderr);
    assert!(stderr.contains("negative"), "{stderr}");
    assert!(!stderr.contains("'-- -1'"), "{stderr}");
    // A grouping key the process does not have is said, with the keys it has.
    let out = run(&[
        "watch",
        &pid,
        "--duration",
        "200ms",
        "--by",
        "nosuch.key",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "nosuch.key is not in the key map; its keys are: http.route, http.request.method"
        ),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["key_note"].as_str().unwrap().contains("its keys are"),
        "{doc}"
    );
}
