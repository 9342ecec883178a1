//! Exports `otel_thread_ctx_v1` from the shared library (a version script, linked with
//! `rust-lld`) and from this package's test executables, so that readers find the TLS slot
//! in `.dynsym`. A C program linked with the static library exports it itself: see the
//! README's "C ABI" section.
//!
//! On GNU/Linux targets it also compiles `benches/c/calls.c` into an archive linked into
//! the benchmarks only (never into the libraries), so that `benches/c_calls.rs` measures
//! calls made from C.

use std::env;
use std::path::PathBuf;

fn main() {
    otel_ctx_export::export_tls_symbol();
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        bench_calls();
    }
}

/// `libotel_ctx_bench_calls.a` in `OUT_DIR`, passed to the benchmarks' link only.
fn bench_calls() {
    println!("cargo:rerun-if-changed=benches/c/calls.c");
    println!("cargo:rerun-if-changed=include/otel_ctx.h");
    cc::Build::new()
        .file("benches/c/calls.c")
        .include("include")
        .opt_level(2)
        .warnings_into_errors(true)
        // No `cargo:rustc-link-lib`: that would link the archive into the libraries.
        .cargo_metadata(false)
        .compile("otel_ctx_bench_calls");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!(
        "cargo:rustc-link-arg-benches={}",
        out.join("libotel_ctx_bench_calls.a").display()
    );
}
