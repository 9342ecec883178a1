//! What the `otel-ctx` tests share: the tool itself, and the helper processes of the
//! conformance helpers package that publish contexts for it to read.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `otel-ctx` binary cargo built for these tests.
pub fn otel_ctx() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_otel-ctx"))
}

/// Builds `example` of `package` through cargo and returns its path.
pub fn example(package: &str, example: &str) -> PathBuf {
    build(&["build", "-p", package, "--example", example], example)
}

/// Builds `bin` of `otel-ctx-conformance-helpers` (publishers and writers the tests read)
/// through cargo, and returns its path. Those helpers depend on the writer and on
/// libdatadog, which the tool itself must not: they live in a package of their own,
/// which cargo does not build for this package's tests. `extra` goes to rustc for that
/// binary only.
pub fn helper(bin: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        if extra.is_empty() { "build" } else { "rustc" },
        "-p",
        "otel-ctx-conformance-helpers",
        "--bin",
        bin,
    ];
    if !extra.is_empty() {
        args.push("--");
        args.extend_from_slice(extra);
    }
    build(&args, bin)
}

/// Runs `cargo <args>` (a build) and returns the path of the executable it names.
fn build(args: &[&str], name: &str) -> PathBuf {
    let (before, after) = match args.iter().position(|&a| a == "--") {
        Some(at) => args.split_at(at),
        None => (args, &[][..]),
    };
    let out = Command::new(env!("CARGO"))
        .args(before)
        .args(["--quiet", "--message-format=json"])
        .args(after)
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

/// The C test writer `tests/fixtures/check/writer.c`, compiled once into `name` under the
/// tests' temporary directory with `otel_thread_ctx_v1` exported (needs gcc).
pub fn c_writer(name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/check/writer.c");
    let status = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .args([source, "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"])
        .status()
        .unwrap_or_else(|e| panic!("run gcc: {e} (install gcc)"));
    assert!(status.success(), "gcc {source} failed");
    out
}
