//! Publishes a process context with `otel-ctx-writer`, for the cross-process tests.
//!
//! `otel-ctx-publish serve`: publishes a fixed context (below), prints `ready`, and waits
//! until stdin closes.
//!
//! `otel-ctx-publish stress <updates>`: publishes version 0, prints `ready`, waits for a
//! line on stdin, then updates the context `<updates>` times as fast as it can (pausing
//! briefly every 16 updates so that readers also find it at rest), prints `done`, and
//! waits until stdin closes. Version `n` is self-checking: `n` is written in four
//! attributes of both fields, in three encodings, and the payload size varies with `n`,
//! so a reader that mixed two versions would see disagreeing copies.

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use otel_ctx_writer::process::{Attributes, OwnedKeyValue, OwnedValue, Publisher, Resource};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-publish: {what}: {e}");
    std::process::exit(1);
}

/// The resource of `serve`, which the CLI tests check field by field.
fn serve_resource() -> Resource {
    Resource::builder()
        .service_name("cli-test-service")
        .service_instance_id("6f1c1e0a-3a5e-4b8e-9c57-1d2f3a4b5c6d")
        .service_version("2.7.1")
        .deployment_environment_name("test")
        .attribute("test.int", -12345678901234_i64)
        .attribute("test.bool", true)
        .attribute("test.double", 0.5)
        .attribute(
            "test.bytes",
            OwnedValue::Bytes(vec![0, 1, 2, 253, 254, 255]),
        )
        .attribute(
            "test.array",
            OwnedValue::Array(vec![
                OwnedValue::from("a"),
                OwnedValue::Int(2),
                OwnedValue::Bool(false),
            ]),
        )
        .attribute(
            "test.kvlist",
            OwnedValue::KvList(vec![
                OwnedKeyValue::new("inner.key", "inner value"),
                OwnedKeyValue::new("inner.n", 7_i64),
            ]),
        )
        .build()
        .unwrap_or_else(|e| fail("resource", e))
}

/// Version `n` of the stress context.
fn stress_version(n: u64) -> (Resource, Attributes) {
    let resource = Resource::builder()
        .service_name("stress")
        .attribute("stress.counter", n as i64)
        .attribute("stress.counter.decimal", n.to_string())
        .attribute("stress.padding", "x".repeat((n % 97) as usize))
        .build()
        .unwrap_or_else(|e| fail("resource", e));
    let extra = Attributes::new()
        .with("stress.counter.hex", format!("{n:x}"))
        .with(
            "stress.counter.bytes",
            OwnedValue::Bytes(n.to_le_bytes().to_vec()),
        );
    (resource, extra)
}

fn wait_for_stdin_close() {
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
}

fn ready(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("serve") => {
            let publisher = Publisher::publish(
                serve_resource(),
                Attributes::new().with("test.extra", "extra value"),
            )
            .unwrap_or_else(|e| fail("publish", e));
            ready("ready");
            wait_for_stdin_close();
            publisher
                .unpublish()
                .unwrap_or_else(|e| fail("unpublish", e));
        }
        Some("stress") => {
            let updates: u64 = args
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| fail("usage", "otel-ctx-publish stress <updates>"));
            let (resource, extra) = stress_version(0);
            let mut publisher =
                Publisher::publish(resource, extra).unwrap_or_else(|e| fail("publish", e));
            ready("ready");
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            for n in 1..=updates {
                let (resource, extra) = stress_version(n);
                publisher
                    .update(resource, extra)
                    .unwrap_or_else(|e| fail("update", e));
                if n % 16 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            ready("done");
            wait_for_stdin_close();
            publisher
                .unpublish()
                .unwrap_or_else(|e| fail("unpublish", e));
        }
        _ => fail("usage", "otel-ctx-publish serve | stress <updates>"),
    }
}
