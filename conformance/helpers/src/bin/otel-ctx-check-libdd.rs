//! A process written only with libdatadog's writers, for the `otel-ctx check` tests: its
//! process context comes from `libdd-library-config` and its thread contexts from
//! `libdd-otel-thread-ctx`.
//!
//! It publishes a process context with the thread-context reference data (libdatadog puts
//! the local root span id at key index 0), starts three threads that each attach a record
//! and keep it, prints `ready`, then updates the process context every 50 ms (a new
//! `service.version` each time, and once a new key) until stdin closes.
//!
//! `otel_thread_ctx_v1` is defined by `libdd-otel-thread-ctx` in `global_asm!`, but a
//! Rust executable exports no symbol in `.dynsym` unless the link asks for it: the tests
//! build this binary with `-C link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1`.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use libdd_library_config::otel_process_ctx;
use libdd_otel_thread_ctx::linux::OwnedThreadContext;
use libdd_trace_protobuf::opentelemetry::proto::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, ProcessContext,
};
use libdd_trace_protobuf::opentelemetry::proto::resource::v1::Resource;

/// The key map: index 0 is where libdatadog writes the local root span id.
const KEYS: [&str; 3] = ["local_root_span_id", "http.route", "http.request.method"];
/// A key registered later, as an SDK does when it meets a new attribute name.
const LATE_KEY: &str = "user.tier";

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        key_ref: 0,
    }
}

fn string(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.to_owned())
}

fn context(generation: u32, late_key: bool) -> ProcessContext {
    let mut names: Vec<&str> = KEYS.to_vec();
    if late_key {
        names.push(LATE_KEY);
    }
    ProcessContext {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", string("libdd-check")),
                kv("service.version", string(&format!("1.0.{generation}"))),
                kv("telemetry.sdk.language", string("rust")),
                kv("telemetry.sdk.name", string("libdatadog")),
            ],
            dropped_attributes_count: 0,
            entity_refs: vec![],
        }),
        extra_attributes: vec![
            kv("threadlocal.schema_version", string("tlsdesc_v1_dev")),
            kv(
                "threadlocal.attribute_key_map",
                any_value::Value::ArrayValue(ArrayValue {
                    values: names
                        .iter()
                        .map(|name| AnyValue {
                            value: Some(string(name)),
                        })
                        .collect(),
                }),
            ),
        ],
    }
}

fn main() {
    if let Err(e) = otel_process_ctx::publish(&context(0, false)) {
        eprintln!("otel-ctx-check-libdd: publish: {e}");
        std::process::exit(1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let attached = Arc::new(Barrier::new(4));
    let routes = ["/cart", "/checkout", "/search"];
    let workers: Vec<_> = (0u8..3)
        .map(|n| {
            let (stop, attached) = (stop.clone(), attached.clone());
            std::thread::Builder::new()
                .name(format!("libdd-worker-{n}"))
                .spawn(move || {
                    let trace_id = [0x10 + n; 16];
                    let span_id = [0x20 + n; 8];
                    let root = [0x30 + n; 8];
                    let attrs = [(1, routes[usize::from(n)]), (2, "GET")];
                    let previous =
                        OwnedThreadContext::new(trace_id, span_id, 1, root, &attrs).attach();
                    drop(previous);
                    attached.wait();
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    drop(OwnedThreadContext::detach());
                })
                .expect("start a worker thread")
        })
        .collect();
    attached.wait();
    println!("ready");
    let _ = std::io::stdout().flush();

    // Updates run while the main thread waits for stdin to close.
    let updater = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut generation = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                generation += 1;
                if let Err(e) = otel_process_ctx::publish(&context(generation, generation >= 3)) {
                    eprintln!("otel-ctx-check-libdd: update: {e}");
                    std::process::exit(1);
                }
            }
        })
    };
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    stop.store(true, Ordering::Relaxed);
    let _ = updater.join();
    for worker in workers {
        let _ = worker.join();
    }
    let _ = otel_process_ctx::unpublish();
}
