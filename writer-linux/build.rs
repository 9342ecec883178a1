//! Exports `otel_thread_ctx_v1` from this package's examples, which attach thread
//! contexts for readers to find in `.dynsym` (where linkers put no symbol of an executable
//! unless asked to). Only the examples: the tests check what the linker does to the TLS
//! access sequence without it. A service exports the symbol from its own `build.rs` with
//! `otel-ctx-export`.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
