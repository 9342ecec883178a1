//! `otel-ctx check` as a user runs it: against good writers (ours in `otel-ctx
//! demo-service`, and libdatadog's process-context and thread-context writers), on a pid
//! and on a command it starts and stops, with its JSON shape and its exit statuses.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use otel_ctx_conformance::RuleId;
use serde_json::Value;

mod support;

use support::{bounded, helper, run, text};

/// The libdatadog helper, linked so that `otel_thread_ctx_v1` is in its `.dynsym` (a
/// Rust executable exports nothing there unless asked), into a copy of its own.
fn libdd_writer() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let built = helper(
            "otel-ctx-check-libdd",
            &[
                "-C",
                "link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1",
            ],
        );
        // Cargo rebuilds the helper without the link argument for a plain build: keep
        // the exported one apart.
        let copy = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("otel-ctx-check-libdd");
        std::fs::copy(&built, &copy).expect("copy the helper");
        copy
    })
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn status_of<'a>(doc: &'a Value, id: &str) -> (&'a str, &'a str) {
    let result = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no result {id}"));
    (
        result["status"].as_str().expect("status"),
        result["observed"].as_str().expect("observed"),
    )
}

fn assert_status(doc: &Value, id: &str, expected: &str) {
    let (status, observed) = status_of(doc, id);
    assert_eq!(status, expected, "{id}: {observed}");
}

fn failing(doc: &Value) -> Vec<String> {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == "fail")
        .map(|r| format!("{}: {}", r["id"], r["observed"]))
        .collect()
}

fn gone(pid: u64) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Rules a good writer that attaches contexts on threads and updates its process
/// context must pass, whatever its TLS model and symbol table.
const KEY_RULES: &[&str] = &[
    "pc.found",
    "pc.mapping.name",
    "pc.mapping.single",
    "pc.mapping.not_executable",
    "pc.mapping.private",
    "pc.mapping.dontfork",
    "pc.header.signature",
    "pc.header.version",
    "pc.header.timestamp",
    "pc.header.payload_size",
    "pc.update.timestamp_increases",
    "pc.payload.decodes",
    "pc.resource.unique_keys",
    "pc.resource.service_name",
    "tl.keys.placement",
    "tl.schema_version",
    "tl.key_map.shape",
    "tl.key_map.append_only",
    "tl.key_map.schema",
    "tl.reference_data",
    "tl.reference_data.schema",
    "tc.symbol.dynsym",
    "tc.symbol.type",
    "tc.symbol.size",
    "tc.symbol.binding",
    "tc.record.readable",
    "tc.record.valid",
    "tc.attrs.complete",
    "tc.attrs.key_index",
    "tc.attrs.utf8",
    "tc.record.ids",
];

#[test]
fn our_writer_passes() {
    let exe = support::traced_service()
        .to_str()
        .expect("utf-8 path")
        .to_owned();
    // The demo service updates its process context every second.
    let out = run(&["check", "--json", "--observe", "1500ms", "--", &exe]);
    let doc = json(&out);
    assert_eq!(failing(&doc), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for rule in KEY_RULES {
        assert_status(&doc, rule, "pass");
    }
    // The executable defines the slot: the linker relaxed TLSDESC to local exec, which
    // OTEP 4947 puts outside the writer's control.
    let (status, observed) = status_of(&doc, "tc.access_model");
    assert_eq!(status, "pass");
    assert!(
        observed.contains("local exec in the main executable"),
        "{observed}"
    );
    assert_eq!(doc["command"]["stopped"], "stdin_closed");
    assert_eq!(doc["command"]["exit_code"], 0);
}

#[test]
fn a_writer_that_attaches_without_attributes_passes() {
    // writer-linux/examples/attach_only.rs registers no key: the process context must
    // announce the thread contexts all the same (OTEP 4947 publication step 1).
    let exe = support::example("otel-ctx-writer", "attach_only");
    let exe = exe.to_str().expect("utf-8 path");
    let out = run(&["check", "--json", "--observe", "500ms", "--", exe]);
    let doc = json(&out);
    assert_eq!(failing(&doc), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_status(&doc, "tl.reference_data.schema", "pass");
    assert_status(&doc, "tc.record.valid", "pass");
}

#[test]
fn libdatadog_writers_pass() {
    let exe = libdd_writer().to_str().expect("utf-8 path").to_owned();
    let out = run(&["check", "--json", "--observe", "500ms", "--", &exe]);
    let doc = json(&out);
    assert_eq!(failing(&doc), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for rule in KEY_RULES {
        assert_status(&doc, rule, "pass");
    }
    // libdd-library-config updates in place with a greater timestamp, and the helper
    // registers a fourth key on its third update (150 ms after it is ready: usually, but
    // not always, after the checker's first read, so the key map grew or has 4 names).
    let (_, observed) = status_of(&doc, "tl.key_map.append_only");
    assert!(observed.contains(" 4 names"), "{observed}");
    // libdd-otel-thread-ctx writes TLSDESC code in global_asm!; in an executable the
    // linker relaxes it to local exec.
    let (status, observed) = status_of(&doc, "tc.access_model");
    assert_eq!(
        (
            status,
            observed.contains("local exec in the main executable")
        ),
        ("pass", true)
    );
}

/// A process publishing contexts, started by the test; stopped on drop.
struct Demo(Child);

impl Demo {
    fn start() -> Self {
        let child = Command::new(support::traced_service())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the demo service");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while otel_ctx_reader::process::read_process_context(pid).is_err() {
            assert!(
                Instant::now() < deadline,
                "the demo service never published"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_pid_in_text() {
    let demo = Demo::start();
    let pid = demo.0.id().to_string();
    let out = run(&["check", &pid, "--observe", "300ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // A heading, one line per rule in order, the counts.
    assert_eq!(lines.len(), RuleId::ALL.len() + 2, "{stdout}");
    assert!(lines[0].starts_with(&format!("otel-ctx check: process {pid} (traced_service)")));
    for (line, rule) in lines[1..].iter().zip(RuleId::ALL) {
        let mut words = line.split_whitespace();
        let status = words.next().expect("status");
        assert!(["PASS", "WARN", "SKIP"].contains(&status), "{line}");
        assert_eq!(words.next(), Some(rule.id()), "{line}");
        assert!(line.ends_with(&format!("[{}]", rule.reference())), "{line}");
    }
    assert!(lines[1].contains("/memfd:OTEL_CTX"), "{}", lines[1]);
    let counts = format!("{} rules: ", RuleId::ALL.len());
    assert!(
        lines.last().expect("counts").starts_with(&counts),
        "{stdout}"
    );
    // The checker did not stop the process it was given.
    assert!(!gone(u64::from(demo.0.id())));
}

#[test]
fn json_shape() {
    let demo = Demo::start();
    let pid = demo.0.id().to_string();
    let out = run(&["check", &pid, "--json", "--observe", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["pid"], u64::from(demo.0.id()));
    assert_eq!(doc["comm"], "traced_service");
    assert_eq!(doc["command"], Value::Null);
    assert_eq!(doc["passed"], true);
    let results = doc["results"].as_array().expect("results");
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let expected: Vec<&str> = RuleId::ALL.iter().map(|r| r.id()).collect();
    assert_eq!(ids, expected);
    for (result, rule) in results.iter().zip(RuleId::ALL) {
        let keys: BTreeSet<&str> = result
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from(["id", "status", "reference", "title", "observed"])
        );
        assert_eq!(result["reference"], rule.reference());
        assert_eq!(result["title"], rule.title());
        assert!(["pass", "warn", "fail", "skip"].contains(&result["status"].as_str().unwrap()));
    }
    for status in ["pass", "warn", "fail", "skip"] {
        let n = results.iter().filter(|r| r["status"] == status).count();
        assert_eq!(doc["summary"][status], n as u64, "{status}");
    }
    // Without an observation window, the rules about updates cannot apply.
    assert_status(&doc, "pc.update.timestamp_increases", "skip");
    assert_status(&doc, "tl.key_map.append_only", "skip");
    assert!(doc["observed_ms"].is_u64(), "{doc}");
}

#[test]
fn exit_statuses_and_usage() {
    // 2: bad usage, from the argument parser.
    for args in [
        &["check"][..],
        &["check", "1", "--", "true"],
        &["check", "--observe", "ten", "1"],
        &["check", "not-a-pid"],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // 2: the check cannot be made.
    let out = run(&["check", "4294967295"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no process has id 4294967295"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["check", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot start /nonexistent/program"));
    let out = run(&["check", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("before its process context could be checked"),
        "{}",
        text(&out.stderr)
    );
    // 1: a rule fails (nothing is published), with the report on stdout.
    let out = run(&["check", "--wait", "200ms", "--observe", "0", "--", "cat"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("FAIL  pc.found"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains(&format!("1 of {} rules FAIL", RuleId::ALL.len())),
        "{}",
        text(&out.stderr)
    );
    // 0 is covered by the good writers.
}

#[test]
fn a_started_program_is_always_stopped() {
    // Each program ignores more of the polite requests: closing stdin (cat exits),
    // SIGTERM (sleep exits), nothing (SIGKILL).
    for (argv, stopped) in [
        (&["cat"][..], "stdin_closed"),
        (&["sleep", "30"], "sigterm"),
        (&["sh", "-c", "trap '' TERM; exec sleep 30"], "sigkill"),
    ] {
        let mut args = vec!["check", "--json", "--wait", "200ms", "--observe", "0", "--"];
        args.extend_from_slice(argv);
        let out = run(&args);
        let doc = json(&out);
        assert_eq!(doc["command"]["stopped"], stopped, "{argv:?}");
        assert_eq!(doc["command"]["argv"][0], argv[0]);
        let pid = doc["pid"].as_u64().expect("pid");
        assert!(gone(pid), "{argv:?}: process {pid} left behind");
        match stopped {
            "stdin_closed" => assert_eq!(doc["command"]["exit_code"], 0),
            "sigterm" => assert_eq!(doc["command"]["signal"], 15),
            _ => assert_eq!(doc["command"]["signal"], 9),
        }
    }
}

#[test]
fn the_program_output_stays_off_stdout() {
    // The program writes to stdout; with --json, stdout must still be one document.
    let out = run(&[
        "check",
        "--json",
        "--wait",
        "200ms",
        "--observe",
        "0",
        "--",
        "sh",
        "-c",
        "echo program output; exec cat",
    ]);
    let doc = json(&out);
    assert_eq!(doc["passed"], false);
    assert!(text(&out.stderr).contains("program output"));
    let reader = BufReader::new(&out.stdout[..]);
    assert_eq!(reader.lines().count(), 1);
}

/// On a terminal, `check -- <program>` says what it waits for and how long, rewriting one
/// line of stderr; off a terminal it says nothing while it waits. The terminal is
/// util-linux's `script`, which runs the command on a pseudo-terminal and copies all it
/// writes.
#[test]
fn on_a_terminal_the_wait_is_said() {
    let command = format!(
        "{} check --wait 2s --observe 0 -- sleep 30",
        support::otel_ctx().display()
    );
    let out = bounded::output(
        Command::new("script")
            .args(["--quiet", "--return", "--command", &command, "/dev/null"])
            .stdin(Stdio::null()),
        bounded::DEADLINE,
    )
    .expect("run script (util-linux)");
    // `sleep` publishes nothing: pc.found fails, exit status 1.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let screen = text(&out.stdout);
    for said in [
        "otel-ctx check: waiting for sleep (pid ",
        ") to publish a process context: 0s of at most 2s (--wait)",
        ") to publish a process context: 1s of at most 2s (--wait)",
        "otel-ctx check: stopping sleep (its stdin closed, then SIGTERM after 1s, SIGKILL 2s later)",
    ] {
        assert!(screen.contains(said), "{said:?} not in:\n{screen}");
    }
    // Each line is cleared before the report.
    assert!(
        screen.contains("\r\x1b[Kotel-ctx check: process "),
        "{screen}"
    );

    let plain = run(&[
        "check",
        "--wait",
        "1s",
        "--observe",
        "0",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(plain.status.code(), Some(1));
    assert!(
        !text(&plain.stderr).contains("waiting for"),
        "{}",
        text(&plain.stderr)
    );
}
