//! Shared helpers of the conformance tests: loading the language-neutral vectors of
//! `spec-vectors/` and turning what the codec decodes into the same JSON shapes, so that
//! a test compares like with like and names the vector that disagrees.
//!
//! - [`vectors`]: the common envelope of a vector (name, description, spec, hex, inputs,
//!   `expected` or `error`) and the loader.
//! - [`header`], [`payload`], [`record`]: the `expected` shape of each file and the
//!   function that runs one vector through the codec.
//! - [`text_format`]: enough of protobuf text format to read what `protoc --decode`
//!   prints, for the cross-check against protoc.
//! - [`hex`]: the lowercase hex used by the vectors.
#![warn(missing_docs)]

pub mod header;
pub mod hex;
pub mod payload;
pub mod record;
pub mod text_format;
pub mod vectors;

pub use vectors::{check, spec_vectors_dir, Inputs, LoadError, Outcome, Vector};

/// The `otel-ctx` binary, built once through cargo: it belongs to another package, which
/// cargo does not build for this package's tests.
pub fn otel_ctx_binary() -> &'static std::path::PathBuf {
    use std::process::{Command, Stdio};
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "otel-ctx-reader",
                "--bin",
                "otel-ctx",
                "--message-format=json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo");
        assert!(out.status.success(), "building otel-ctx failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find_map(|msg| msg["executable"].as_str().map(std::path::PathBuf::from))
            .expect("cargo named no otel-ctx executable")
    })
}
