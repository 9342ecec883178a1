//! Exports `otel_thread_ctx_v1` from the shared library (a version script, linked with
//! `rust-lld`) and from this package's test executables, so that readers find the TLS slot
//! in `.dynsym`. A C program linked with the static library exports it itself: see
//! `LINKING.md`.
//!
//! The C benchmark, which needs a C compiler, is the package `ffi/bench-c/`.

fn main() {
    otel_ctx_export::export_tls_symbol();
    println!("cargo:rerun-if-changed=build.rs");
}
