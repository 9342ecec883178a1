//! `otel-ctx check` against deliberately broken writers: a C program
//! (`cli/tests/fixtures/check/writer.c`) whose options each break one rule, built
//! in several variants of its TLS slot. Every rule that can fail is made to fail by some
//! case, and each case must fail exactly the rules it breaks; every rule that can only
//! warn is made to warn by a case that warns exactly that rule and fails none; the same
//! program without defects, its slot in a TLSDESC library, must pass.
//!
//! The checker stops threads with ptrace and compiles nothing itself: the tests need gcc
//! (x86_64 only, like the other ptrace tests).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use otel_ctx_conformance::RuleId;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/check");

mod support;

use support::{bounded, otel_ctx};

/// The fixture's build variants: where `otel_thread_ctx_v1` comes from.
#[derive(Clone, Copy, Debug)]
enum Build {
    /// A `__thread` pointer in the executable, exported in `.dynsym`.
    Exported,
    /// The same GLOBAL `__thread` pointer, linked without exporting it: `.symtab` only.
    Unexported,
    /// No such symbol.
    NoSlot,
    /// An ordinary 16-byte global.
    NotTls,
    /// A static `__thread` variable (LOCAL, `.symtab` only).
    Static,
    /// In a shared library reached through TLSDESC.
    TlsDescLibrary,
    /// In a shared library reached only through the local-dynamic model.
    LocalDynamicLibrary,
    /// In the TLSDESC library, loaded with `dlopen` (option `--dlopen`).
    Dlopen,
    /// In a shared library reached through legacy general dynamic (`-mtls-dialect=gnu`).
    GeneralDynamicLibrary,
    /// In a shared library compiled `-ftls-model=initial-exec`.
    InitialExecLibrary,
}

fn compile(out: &Path, args: &[&str]) {
    let status = Command::new("gcc")
        .args(["-O1", "-Wall", "-pthread"])
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("run gcc: {e} (install gcc)"));
    assert!(status.success(), "gcc {args:?} failed");
}

/// Builds every variant once; returns the directory holding them.
fn fixtures() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("check-fixtures");
        std::fs::create_dir_all(&dir).expect("fixture dir");
        let writer = format!("{FIXTURES}/writer.c");
        let slot = format!("{FIXTURES}/slot.c");
        let export = "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1";
        let path = |name: &str| dir.join(name).to_str().expect("utf-8 path").to_owned();
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(&dir.join("writer"), &[&writer, export]);
        compile(&dir.join("writer-unexported"), &[&writer]);
        compile(&dir.join("writer-no-slot"), &["-DNO_SLOT", &writer]);
        compile(
            &dir.join("writer-not-tls"),
            &["-DSLOT_NOT_TLS", &writer, export],
        );
        compile(&dir.join("writer-static"), &["-DSLOT_STATIC", &writer]);
        compile(
            &dir.join("libslot-desc.so"),
            &["-shared", "-fPIC", "-mtls-dialect=gnu2", &slot],
        );
        compile(
            &dir.join("libslot-ld.so"),
            &[
                "-shared",
                "-fPIC",
                "-ftls-model=local-dynamic",
                "-DLOCAL_DYNAMIC",
                &slot,
            ],
        );
        compile(
            &dir.join("libslot-gd.so"),
            &["-shared", "-fPIC", "-mtls-dialect=gnu", &slot],
        );
        compile(
            &dir.join("libslot-ie.so"),
            &["-shared", "-fPIC", "-ftls-model=initial-exec", &slot],
        );
        compile(
            &dir.join("writer-dlopen"),
            &["-DSLOT_DLOPEN", &writer, "-ldl"],
        );
        for (exe, lib) in [
            ("writer-desc", "libslot-desc.so"),
            ("writer-ld", "libslot-ld.so"),
            ("writer-gd", "libslot-gd.so"),
            ("writer-ie", "libslot-ie.so"),
        ] {
            compile(
                &dir.join(exe),
                &["-DSLOT_LIBRARY", &writer, &path(lib), &rpath],
            );
        }
        dir
    })
}

fn executable(build: Build) -> PathBuf {
    fixtures().join(match build {
        Build::Exported => "writer",
        Build::Unexported => "writer-unexported",
        Build::NoSlot => "writer-no-slot",
        Build::NotTls => "writer-not-tls",
        Build::Static => "writer-static",
        Build::TlsDescLibrary => "writer-desc",
        Build::LocalDynamicLibrary => "writer-ld",
        Build::Dlopen => "writer-dlopen",
        Build::GeneralDynamicLibrary => "writer-gd",
        Build::InitialExecLibrary => "writer-ie",
    })
}

/// Runs `otel-ctx check --json -- <fixture> <args>`; returns the document and exit code.
fn check(build: Build, args: &[&str]) -> (Value, i32) {
    check_with_env(build, args, &[])
}

/// [`check`], with environment variables for the checker and the fixture it starts.
fn check_with_env(build: Build, args: &[&str], env: &[(&str, &str)]) -> (Value, i32) {
    let mut command = Command::new(otel_ctx());
    command
        .envs(env.iter().copied())
        .args([
            "check",
            "--json",
            "--wait",
            "5s",
            "--observe",
            "300ms",
            "--",
        ])
        .arg(executable(build))
        .args(args);
    let out = bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{build:?} {args:?}: not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, out.status.code().unwrap_or(-1))
}

fn with_status<'a>(doc: &'a Value, status: &str) -> BTreeSet<&'a str> {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == status)
        .map(|r| r["id"].as_str().expect("id"))
        .collect()
}

fn status<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["id"] == id)
        .and_then(|r| r["status"].as_str())
        .unwrap_or_else(|| panic!("no result {id}"))
}

fn observed<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["id"] == id)
        .and_then(|r| r["observed"].as_str())
        .unwrap_or_else(|| panic!("no result {id}"))
}

/// Asserts that exactly `fails` fail (and that each `warns` warns); returns the document.
fn expect(build: Build, args: &[&str], fails: &[&str], warns: &[&str]) -> Value {
    expect_with_env(build, args, &[], fails, warns)
}

fn expect_with_env(
    build: Build,
    args: &[&str],
    env: &[(&str, &str)],
    fails: &[&str],
    warns: &[&str],
) -> Value {
    let (doc, code) = check_with_env(build, args, env);
    let failed = with_status(&doc, "fail");
    let expected: BTreeSet<&str> = fails.iter().copied().collect();
    let details: Vec<String> = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] != "pass")
        .map(|r| format!("{} {}: {}", r["status"], r["id"], r["observed"]))
        .collect();
    assert_eq!(
        failed,
        expected,
        "{build:?} {args:?}: rules failing\n{}",
        details.join("\n")
    );
    let warned = with_status(&doc, "warn");
    for warn in warns {
        assert!(
            warned.contains(warn),
            "{build:?} {args:?}: {warn} should warn\n{}",
            details.join("\n")
        );
    }
    assert_eq!(code, if fails.is_empty() { 0 } else { 1 }, "exit status");
    doc
}

/// The cases, with the rules each must fail: together they fail every rule that can fail.
const CASES: &[(Build, &[&str], &[&str])] = &[
    (Build::NoSlot, &["--none"], &["pc.found"]),
    // Without prctl, so that a kernel that names mappings keeps the memfd's name.
    (
        Build::Exported,
        &["--name", "otel_ctx", "--no-prctl"],
        &["pc.mapping.name"],
    ),
    (
        Build::Exported,
        &["--anon", "--no-prctl"],
        &["pc.mapping.name"],
    ),
    (
        Build::Exported,
        &["--signature", "OTEL_XXX", "--version", "3"],
        &["pc.header.signature", "pc.header.version"],
    ),
    (
        Build::Exported,
        &["--exec", "--no-dontfork"],
        &["pc.mapping.not_executable", "pc.mapping.dontfork"],
    ),
    (
        Build::Exported,
        &["--twice", "--no-service-name"],
        &["pc.mapping.single"],
    ),
    (
        Build::Exported,
        &["--timestamp", "future"],
        &["pc.header.timestamp"],
    ),
    (
        Build::Exported,
        &["--timestamp", "zero"],
        &["pc.header.timestamp"],
    ),
    (
        Build::Exported,
        &["--timestamp", "early"],
        &["pc.header.timestamp"],
    ),
    (
        Build::Exported,
        &["--payload-size", "0"],
        &["pc.header.payload_size"],
    ),
    (Build::Exported, &["--garbage"], &["pc.payload.decodes"]),
    (
        Build::NoSlot,
        &["--dup-key", "--tl-in-resource"],
        &["pc.resource.unique_keys", "tl.keys.placement"],
    ),
    (
        Build::Exported,
        &["--update-every", "20", "--backwards"],
        &["pc.update.timestamp_increases"],
    ),
    (
        Build::Exported,
        &["--update-every", "20", "--same-timestamp"],
        &["pc.update.timestamp_increases"],
    ),
    (
        Build::Exported,
        &["--update-every", "20", "--shrink", "--keys", "3"],
        &["tl.key_map.append_only"],
    ),
    (
        Build::Exported,
        &["--schema-int", "--keys", "300"],
        &["tl.schema_version", "tl.key_map.shape"],
    ),
    (
        Build::Exported,
        &["--schema", "tls_v9", "--key-map-int"],
        &["tl.key_map.shape"],
    ),
    (
        Build::Exported,
        &["--no-reference-data"],
        &["tl.reference_data"],
    ),
    (Build::NoSlot, &[], &["tc.symbol.dynsym"]),
    // Only in .symtab: readers that follow OTEP 4947 look in .dynsym only.
    (
        Build::Unexported,
        &["--record", "good"],
        &["tc.symbol.dynsym"],
    ),
    (Build::NotTls, &[], &["tc.symbol.type", "tc.symbol.size"]),
    (
        Build::Static,
        &["--record", "good"],
        &["tc.symbol.dynsym", "tc.symbol.binding"],
    ),
    (
        Build::LocalDynamicLibrary,
        &["--record", "good"],
        &["tc.access_model"],
    ),
    (
        Build::Exported,
        &[
            "--record",
            "valid2",
            "--record",
            "misaligned",
            "--record",
            "incomplete",
            "--record",
            "key-index",
            "--record",
            "utf8",
            "--record",
            "one-id",
            "--record",
            "flags-no-ids",
            "--record",
            "unmapped",
            "--record",
            "large",
            "--record",
            "good",
            "--record",
            "invalid0",
        ],
        &[
            "tc.record.readable",
            "tc.record.aligned",
            "tc.record.valid",
            "tc.attrs.complete",
            "tc.attrs.key_index",
            "tc.attrs.utf8",
            "tc.record.ids",
            "tc.record.trace_flags",
        ],
    ),
];

/// Warnings some cases must also give.
fn warns_of(args: &[&str]) -> Vec<&'static str> {
    let mut warns = Vec::new();
    if args.contains(&"--no-service-name") {
        warns.push("pc.resource.service_name");
    }
    if args.contains(&"tls_v9") {
        warns.push("tl.schema_version");
    }
    if args.contains(&"large") {
        warns.push("tc.record.size");
    }
    warns
}

/// Cases that must fail no rule and warn exactly the rules listed: every rule that can only
/// warn, and the warnings of rules that can fail, where the specification allows what the
/// case does. The slot is in the TLSDESC library (no access-model warning) unless the case
/// needs another build.
const WARN_CASES: &[(Build, &[&str], &[&str])] = &[
    // OTEP 4947: TLSDESC is what writers should use; legacy general dynamic is allowed.
    (
        Build::GeneralDynamicLibrary,
        &["--record", "good"],
        &["tc.access_model"],
    ),
    // Initial exec compiled into a shared object: the writer's choice, not a relaxation.
    (
        Build::InitialExecLibrary,
        &["--record", "good"],
        &["tc.access_model"],
    ),
    (
        Build::TlsDescLibrary,
        &["--no-service-name"],
        &["pc.resource.service_name"],
    ),
    // OTEP 4719's publish steps (MAP_PRIVATE) are a "should".
    (
        Build::TlsDescLibrary,
        &["--shared"],
        &["pc.mapping.private"],
    ),
    // OTEP 4719: "1 may be used for development".
    (
        Build::TlsDescLibrary,
        &["--version", "1"],
        &["pc.header.version"],
    ),
    // OTEP 4719 reading step 1 takes names that start with /memfd:OTEL_CTX (without
    // prctl, so that a kernel that names mappings keeps the memfd's name).
    (
        Build::TlsDescLibrary,
        &["--name", "OTEL_CTX_v2", "--no-prctl"],
        &["pc.mapping.name"],
    ),
    (
        Build::TlsDescLibrary,
        &["--schema", "tls_v9"],
        &["tl.schema_version"],
    ),
    // A Go-style schema, but with the key map of the TLS schema.
    (
        Build::NoSlot,
        &["--schema", "go_pprof_labels_v1"],
        &["tl.key_map.schema"],
    ),
    // The TLS symbol, but a schema that sends readers to pprof labels.
    (
        Build::TlsDescLibrary,
        &["--schema", "go_pprof_labels_v1", "--keys", "0"],
        &["tl.reference_data.schema"],
    ),
    (
        Build::TlsDescLibrary,
        &["--record", "large"],
        &["tc.record.size"],
    ),
];

fn run_cases(filter: impl Fn(&[&str]) -> bool) {
    for (build, args, fails) in CASES.iter().filter(|(_, _, fails)| filter(fails)) {
        expect(*build, args, fails, &warns_of(args));
    }
}

#[test]
fn every_rule_that_can_fail_has_a_case() {
    let covered: BTreeSet<&str> = CASES
        .iter()
        .flat_map(|(_, _, f)| f.iter().copied())
        .collect();
    let can_fail: BTreeSet<&str> = RuleId::ALL
        .iter()
        .filter(|r| r.can_fail())
        .map(|r| r.id())
        .collect();
    assert_eq!(covered, can_fail);
}

#[test]
fn every_rule_that_can_only_warn_has_a_warn_case() {
    let covered: BTreeSet<&str> = WARN_CASES
        .iter()
        .flat_map(|(_, _, w)| w.iter().copied())
        .collect();
    for rule in RuleId::ALL.iter().filter(|r| !r.can_fail()) {
        assert!(covered.contains(rule.id()), "{rule} has no warn case");
    }
}

#[test]
fn warnings_without_failures() {
    for (build, args, warns) in WARN_CASES {
        let doc = expect(*build, args, &[], warns);
        let expected: BTreeSet<&str> = warns.iter().copied().collect();
        assert_eq!(
            with_status(&doc, "warn"),
            expected,
            "{build:?} {args:?}: rules warning"
        );
    }
}

#[test]
fn broken_mappings() {
    run_cases(|fails| {
        fails
            .iter()
            .any(|f| f.starts_with("pc.mapping") || *f == "pc.found")
    });
}

#[test]
fn broken_headers() {
    run_cases(|fails| fails.iter().any(|f| f.starts_with("pc.header")));
}

#[test]
fn broken_payloads_and_updates() {
    run_cases(|fails| {
        fails.iter().any(|f| {
            f.starts_with("pc.payload")
                || f.starts_with("pc.resource")
                || f.starts_with("pc.update")
        })
    });
}

#[test]
fn broken_reference_data() {
    run_cases(|fails| fails.iter().any(|f| f.starts_with("tl.")));
}

#[test]
fn broken_symbols() {
    run_cases(|fails| {
        fails
            .iter()
            .any(|f| f.starts_with("tc.symbol") || *f == "tc.access_model")
    });
}

#[test]
fn broken_records() {
    run_cases(|fails| {
        fails
            .iter()
            .any(|f| f.starts_with("tc.record") || f.starts_with("tc.attrs"))
    });
    // The messages name the defect.
    let (doc, _) = check(
        Build::Exported,
        &["--record", "valid2", "--record", "one-id"],
    );
    assert!(observed(&doc, "tc.record.valid").contains("valid = 2"));
    assert!(observed(&doc, "tc.record.ids").contains("span_id is all zero"));
}

#[test]
fn a_correct_c_writer_passes() {
    let doc = expect(
        Build::TlsDescLibrary,
        &[
            "--update-every",
            "20",
            "--record",
            "good",
            "--record",
            "invalid0",
        ],
        &[],
        &[],
    );
    // Only the trace_flags rule has nothing to judge: every record has ids.
    assert_eq!(
        with_status(&doc, "skip"),
        BTreeSet::from(["tc.record.trace_flags"])
    );
    assert!(with_status(&doc, "warn").is_empty(), "{doc}");
    assert!(observed(&doc, "tc.access_model").contains("tlsdesc-static"));
    assert!(observed(&doc, "pc.update.timestamp_increases").contains("update"));
    assert!(observed(&doc, "tc.record.valid").contains("records"));
}

#[test]
fn a_publication_in_progress_is_not_blamed() {
    // The mapping shows in maps 60 ms before its header, flags and timestamp are written:
    // the checker must judge the finished publication, not its first look at it.
    expect(
        Build::TlsDescLibrary,
        &["--publish-delay", "60", "--record", "good"],
        &[],
        &[],
    );
}

#[test]
fn access_models_the_writer_chose_warn_and_relaxations_pass() {
    for (build, says) in [
        (
            Build::GeneralDynamicLibrary,
            "general dynamic (the legacy GNU dialect)",
        ),
        (
            Build::InitialExecLibrary,
            "initial exec compiled into the shared object",
        ),
        (Build::TlsDescLibrary, "TLSDESC"),
        (Build::Exported, "local exec in the main executable"),
    ] {
        let doc = expect(build, &["--record", "good"], &[], &[]);
        let said = observed(&doc, "tc.access_model");
        assert!(said.contains(says), "{build:?}: {said}");
    }
}

#[test]
fn a_library_loaded_after_publishing_is_found() {
    let lib = fixtures().join("libslot-desc.so");
    let lib = lib.to_str().expect("utf-8 path");
    let args = ["--dlopen", lib, "--late-records", "50", "--record", "good"];
    // glibc puts the library in spare static TLS; without spare static TLS, TLSDESC
    // goes through the dynamic resolver and each thread's DTV.
    for (env, model) in [
        (&[][..], "tlsdesc-static"),
        (
            &[("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=0")][..],
            "tlsdesc-dynamic",
        ),
    ] {
        let doc = expect_with_env(Build::Dlopen, &args, env, &[], &[]);
        assert!(observed(&doc, "tc.symbol.dynsym").contains("libslot-desc.so"));
        assert!(observed(&doc, "tc.access_model").contains(model), "{doc}");
        assert_eq!(status(&doc, "tc.record.valid"), "pass");
    }
}

#[test]
fn a_process_whose_main_thread_exited_is_read_through_a_live_thread() {
    // The kernel shows an empty /proc/<pid>/maps (and the leader as a zombie) once the
    // main thread has called pthread_exit, while the other threads run on.
    let args = ["--main-exits", "--update-every", "20", "--record", "good"];
    let doc = expect(Build::TlsDescLibrary, &args, &[], &[]);
    assert_eq!(status(&doc, "tc.record.valid"), "pass", "{doc}");

    let mut child = Command::new(executable(Build::TlsDescLibrary))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the writer");
    let stdout = child.stdout.take().expect("stdout");
    let line =
        bounded::Lines::new("the TLSDESC writer", stdout).line("its `ready`", bounded::DEADLINE);
    assert_eq!(line.trim(), "ready");
    let pid = child.id();
    // `ready` comes just before pthread_exit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut maps = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
    while !maps.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
        maps = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
    }
    let mut show = Command::new(otel_ctx());
    show.args(["show", "--json", &pid.to_string()]);
    let out = bounded::output(&mut show, bounded::DEADLINE).expect("run otel-ctx show");
    drop(child.stdin.take());
    bounded::wait(
        &mut child,
        "the writer, its stdin closed,",
        bounded::DEADLINE,
    );
    assert!(maps.is_empty(), "the main thread has not exited yet");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        doc["process_context"]["resource"]["service.name"], "check-fixture",
        "{doc}"
    );
    let with_context: Vec<&Value> = doc["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["context"].is_object())
        .collect();
    assert_eq!(with_context.len(), 1, "{doc}");
    assert_eq!(
        with_context[0]["context"]["attributes"]["http.route"], "/checkout",
        "{doc}"
    );
}
