//! The example service read from another process by the `otel-ctx` tool: every thread
//! context it shows is a request span the service printed, with that span's route; and
//! `otel-ctx check` finds nothing wrong. Reading threads uses ptrace: run as root.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

/// Runs `cargo build <args>` and returns the path of the executable it names.
fn build(args: &[&str], name: &str) -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .arg("build")
        .args(args)
        .args(["--quiet", "--message-format=json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cannot run cargo");
    assert!(out.status.success(), "building {name} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no {name} executable"))
}

fn service() -> PathBuf {
    build(
        &[
            "-p",
            "otel-ctx-tracing",
            "--features",
            "demo-service",
            "--example",
            "traced_service",
        ],
        "traced_service",
    )
}

fn otel_ctx() -> PathBuf {
    build(&["-p", "otel-ctx", "--bin", "otel-ctx"], "otel-ctx")
}

/// (trace id, span id) -> route of each context `otel-ctx show --json` printed.
fn shown_contexts(document: &serde_json::Value) -> Vec<((String, String), Option<String>)> {
    document["threads"]
        .as_array()
        .expect("threads is an array")
        .iter()
        .filter(|thread| !thread["context"].is_null())
        .map(|thread| {
            let context = &thread["context"];
            let ids = (
                context["trace_id"].as_str().unwrap().to_owned(),
                context["span_id"].as_str().unwrap().to_owned(),
            );
            let route = context["attributes"]["http.route"]
                .as_str()
                .map(str::to_owned);
            (ids, route)
        })
        .collect()
}

#[test]
fn every_thread_context_shown_is_a_printed_request_span_with_its_route() {
    let (service, otel_ctx) = (service(), otel_ctx());
    let mut child = Command::new(&service)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the example");
    // Read on a thread of its own, so that the service never blocks on a full pipe
    // while the tool samples it.
    let mut lines = bounded::Lines::new("traced_service", child.stdout.take().unwrap());
    let ready = lines.line("its `READY <pid>`", bounded::DEADLINE);
    let pid: u32 = ready
        .strip_prefix("READY ")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("first line {ready:?} is not READY <pid>"));
    assert_eq!(pid, child.id());

    let mut shown = Vec::new();
    for _ in 0..10 {
        let out = bounded::output(
            Command::new(&otel_ctx)
                .args(["show", "--json"])
                .arg(pid.to_string()),
            bounded::DEADLINE,
        )
        .unwrap();
        assert!(out.status.success(), "otel-ctx show failed: {out:?}");
        let document: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            document["process_context"]["attributes"]["threadlocal.attribute_key_map"],
            serde_json::json!(["http.route", "http.request.method", "user.tier"])
        );
        assert_eq!(
            document["thread_context"]["symbol_table"], "dynsym",
            "otel_thread_ctx_v1 is exported"
        );
        shown.extend(shown_contexts(&document));
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(child.stdin.take());
    let what = "traced_service, its stdin closed,";
    assert!(bounded::wait(&mut child, what, bounded::DEADLINE).success());
    let mut printed = Vec::new();
    while let Some(line) = lines.next_line("the rest of its output", bounded::DEADLINE) {
        printed.push(line);
    }

    let mut spans = HashMap::new();
    for line in printed {
        let span: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON line: {line:?}: {e}"));
        let trace_id = span["trace_id"].as_str().unwrap().to_owned();
        let span_id = span["span_id"].as_str().unwrap().to_owned();
        assert_eq!(trace_id.len(), 32);
        assert_eq!(span_id.len(), 16);
        let route = span["http.route"].as_str().unwrap().to_owned();
        spans.insert((trace_id, span_id), route);
    }
    assert!(!spans.is_empty(), "the service finished requests");
    assert!(
        !shown.is_empty(),
        "ten looks at four busy workers showed no context"
    );
    for (ids, route) in &shown {
        let printed = spans
            .get(ids)
            .unwrap_or_else(|| panic!("{ids:?} was shown but is no request span printed"));
        assert_eq!(route.as_deref(), Some(printed.as_str()), "{ids:?}");
    }
}

#[test]
fn otel_ctx_check_passes_the_service() {
    let (service, otel_ctx) = (service(), otel_ctx());
    let out = bounded::output(
        Command::new(&otel_ctx).arg("check").arg("--").arg(&service),
        bounded::DEADLINE,
    )
    .unwrap();
    assert!(
        out.status.success(),
        "otel-ctx check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
