//! Exports `otel_thread_ctx_v1` from the `otel-ctx` binary, whose demo service publishes
//! thread contexts: a reader finds the TLS slot through the executable's `.dynsym`, where
//! linkers put no symbol of an executable unless asked to.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!(
            "cargo:rustc-link-arg-bin=otel-ctx=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"
        );
        // The thread-reader test fixture publishes thread contexts too.
        println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
