//! Each minimal service, started as a user would and judged as `otel-ctx check` judges
//! it: every rule passes (or is skipped), and its threads' records are read. Root (ptrace)
//! and gcc (the C service).
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use otel_ctx_conformance::{check, CheckOptions, RuleId, Status};

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

/// A running service; killed on drop.
struct Service(Child);

impl Service {
    fn start(program: &Path) -> Self {
        let child = Command::new(program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let service = Self(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while otel_ctx_reader::process::read_process_context(service.0.id()).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} never published",
                program.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        service
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn passes(program: &Path, service_name: &str) {
    let service = Service::start(program);
    let options = CheckOptions {
        observe: Duration::from_millis(500),
        ..CheckOptions::default()
    };
    let report = check(service.0.id(), &options).expect("the check ran");
    let failing: Vec<String> = report
        .results
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| format!("{}: {}", r.rule.id(), r.observed))
        .collect();
    assert!(failing.is_empty(), "{}: {failing:?}", program.display());
    let result = |rule| report.result(rule).expect("every rule is judged");
    assert_eq!(
        result(RuleId::TcRecordValid).status,
        Status::Pass,
        "records read"
    );
    assert_eq!(
        result(RuleId::TlReferenceData).status,
        Status::Pass,
        "key map"
    );
    let name = &result(RuleId::PcResourceServiceName).observed;
    assert!(name.contains(service_name), "{name}");
}

#[test]
fn the_tracing_layer_alone() {
    // No SDK: the layer publishes the resource the SDK would detect by default.
    passes(
        Path::new(env!("CARGO_BIN_EXE_tracing_service")),
        "unknown_service:tracing_service",
    );
}

#[test]
fn the_opentelemetry_sdk_with_the_observer() {
    passes(Path::new(env!("CARGO_BIN_EXE_otel_service")), "checkout");
}

#[test]
fn the_c_abi() {
    let lib = fixture::ffi_library();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-service");
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../ffi/include");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/c/service.c");
    let rpath = format!(
        "-Wl,-rpath,{}",
        lib.parent().expect("a directory").display()
    );
    fixture::gcc(&[
        "-std=c11",
        "-Wall",
        "-Werror",
        "-O2",
        "-I",
        include,
        "-o",
        out.to_str().expect("UTF-8 path"),
        source,
        lib.to_str().expect("UTF-8 path"),
        &rpath,
    ]);
    passes(&out, "checkout");
}
