//! `Export::lines` reads cargo's build-script variables and writes the version script.
//!
//! The only test of this binary, because it sets environment variables, which no other
//! thread of the process may read meanwhile.

use std::env;
use std::fs;
use std::path::PathBuf;

use otel_ctx_export::{Export, VERSION_SCRIPT};

#[test]
fn reads_the_environment_and_writes_the_version_script() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("from-cargo");
    let out_dir = dir.join("out");
    fs::create_dir_all(&out_dir).expect("creates the fake OUT_DIR");
    fs::write(dir.join("Cargo.toml"), "[lib]\ncrate-type = [\"cdylib\"]\n")
        .expect("writes the fake manifest");
    let script = out_dir.join("otel_thread_ctx_v1.ver");
    let _ = fs::remove_file(&script);

    // A cdylib package for aarch64 musl; no rustc at this path, so no rust-lld arguments
    // (and no warning: the toolchain could not be asked).
    env::set_var("CARGO_CFG_TARGET_OS", "linux");
    env::set_var("CARGO_CFG_TARGET_ENV", "musl");
    env::set_var("CARGO_CFG_TARGET_FEATURE", "crt-static,neon");
    env::remove_var("CARGO_ENCODED_RUSTFLAGS");
    env::set_var("CARGO_MANIFEST_DIR", &dir);
    env::set_var("OUT_DIR", &out_dir);
    env::set_var("HOST", "x86_64-unknown-linux-gnu");
    env::set_var("RUSTC", dir.join("no-such-rustc"));

    let lines = Export::new().lines();
    assert_eq!(
        lines,
        [
            String::from("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"),
            format!(
                "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
                script.display()
            ),
            String::from("cargo:rerun-if-env-changed=RUSTC"),
            String::from("cargo:rerun-if-changed=Cargo.toml"),
        ]
    );
    assert_eq!(
        fs::read_to_string(&script).expect("the version script is written"),
        VERSION_SCRIPT
    );

    // The same package built for macOS: nothing.
    env::set_var("CARGO_CFG_TARGET_OS", "macos");
    env::set_var("CARGO_CFG_TARGET_ENV", "");
    assert!(Export::new().lines().is_empty());
}
