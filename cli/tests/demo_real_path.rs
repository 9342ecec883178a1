//! `otel-ctx demo`'s service is a `tracing` + `tracing-opentelemetry` + OpenTelemetry SDK
//! service: read from another process, its process context is the SDK's `Resource`, its
//! worker threads carry the request spans' contexts with `http.route`, the threads outside
//! any span carry none, and `otel-ctx check` passes it. Reading threads uses ptrace: run as
//! root.

use std::time::Duration;

use serde_json::Value;

mod support;

use support::{run, text, DemoService};

const ROUTES: [&str; 5] = [
    "/api/cart",
    "/api/cart/items",
    "/api/products/:id",
    "/api/checkout",
    "/healthz",
];

#[test]
fn the_service_is_read_as_an_sdk_resource_and_request_spans() {
    let service = DemoService::start();
    let pid = service.pid();
    let mut contexts = 0;
    for _ in 0..50 {
        let out = run(&["show", &pid, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let process = &doc["process_context"];
        // The SDK's Resource: the service's attributes and the SDK's own.
        assert_eq!(
            process["resource"]["service.name"], "demo-checkout",
            "{process}"
        );
        assert_eq!(process["resource"]["telemetry.sdk.language"], "rust");
        assert_eq!(process["resource"]["telemetry.sdk.name"], "opentelemetry");
        assert_eq!(
            process["attributes"]["threadlocal.attribute_key_map"],
            serde_json::json!(["http.route", "http.request.method", "user.tier"])
        );
        let threads = doc["threads"].as_array().unwrap();
        let workers = threads
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with("demo-worker-"))
            .count();
        assert_eq!(workers, 4, "{threads:?}");
        for thread in threads {
            let context = &thread["context"];
            if context.is_null() {
                continue;
            }
            let name = thread["name"].as_str().unwrap();
            assert!(
                name.starts_with("demo-worker-"),
                "{name} is outside any span but has {context}"
            );
            contexts += 1;
            assert_eq!(context["trace_id"].as_str().unwrap().len(), 32, "{context}");
            assert_eq!(context["span_id"].as_str().unwrap().len(), 16, "{context}");
            assert_eq!(context["trace_flags"], 1, "sampled by the SDK: {context}");
            let route = context["attributes"]["http.route"].as_str().unwrap();
            assert!(ROUTES.contains(&route), "{route}");
            let method = context["attributes"]["http.request.method"]
                .as_str()
                .unwrap();
            assert!(["GET", "POST"].contains(&method), "{method}");
            if let Some(tier) = context["attributes"]["user.tier"].as_str() {
                assert!(["free", "pro", "enterprise"].contains(&tier), "{tier}");
            }
        }
        if contexts >= 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        contexts >= 5,
        "only {contexts} contexts in 50 looks at four busy workers"
    );

    let out = run(&["check", &pid, "--json", "--observe", "1s"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc}\n{}", text(&out.stderr));
    assert_eq!(doc["passed"], true);
    for rule in ["tc.record.valid", "tc.record.ids", "tc.attrs.key_index"] {
        let result = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == rule)
            .unwrap_or_else(|| panic!("no {rule} in {doc}"));
        assert_eq!(result["status"], "pass", "{result}");
    }
}

#[cfg(feature = "demo")]
#[test]
fn the_demo_view_counts_samples_per_route() {
    let out = run(&["demo", "--duration", "2500ms"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("telemetry.sdk.name"), "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("thread samples per http.route"), "{stderr}");
    let table = stdout
        .split("  HTTP.ROUTE ")
        .nth(1)
        .unwrap_or_else(|| panic!("no sample table in:\n{stdout}"));
    let routes = ROUTES.iter().filter(|r| table.contains(*r)).count();
    assert!(routes >= 2, "{routes} routes in:\n{table}");
    assert!(
        stderr.contains("demo service stopped (exit status: 0)"),
        "{stderr}"
    );
}
