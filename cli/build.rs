//! With the `demo` feature, exports `otel_thread_ctx_v1` from the `otel-ctx` binary, whose
//! demo service publishes thread contexts: a reader finds the TLS slot through the
//! executable's `.dynsym`, where linkers put no symbol of an executable unless asked to.
//! The default build defines no such symbol: it only reads.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_DEMO").is_some() {
        otel_ctx_export::export_tls_symbol();
    }
}
