//! What the tests share: the libraries and the `otel-ctx` tool, built through cargo.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// What cargo built: the shared library, the static library, and `otel-ctx`.
pub struct Built {
    /// `libotel_ctx_ffi.so`.
    pub shared: PathBuf,
    /// `libotel_ctx_ffi.a`.
    pub archive: PathBuf,
    /// The `otel-ctx` tool.
    pub otel_ctx: PathBuf,
}

/// Builds this package's libraries and the `otel-ctx` tool once, through cargo.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "-p", "otel-ctx-ffi", "-p", "otel-ctx"])
            .args(["--quiet", "--message-format=json"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo");
        assert!(out.status.success(), "cargo build failed");
        let mut files = Vec::new();
        let mut otel_ctx = None;
        for msg in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        {
            if msg["target"]["name"] == "otel-ctx" {
                if let Some(exe) = msg["executable"].as_str() {
                    otel_ctx = Some(PathBuf::from(exe));
                }
            }
            if msg["target"]["name"] == "otel_ctx_ffi" {
                for file in msg["filenames"].as_array().into_iter().flatten() {
                    files.push(PathBuf::from(file.as_str().expect("a path")));
                }
            }
        }
        let find = |ext: &str| {
            files
                .iter()
                .find(|f| f.extension().is_some_and(|e| e == ext))
                .unwrap_or_else(|| panic!("cargo built no libotel_ctx_ffi.{ext}: {files:?}"))
                .clone()
        };
        Built {
            shared: find("so"),
            archive: find("a"),
            otel_ctx: otel_ctx.expect("cargo named no otel-ctx executable"),
        }
    })
}
