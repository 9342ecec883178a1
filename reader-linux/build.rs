//! Exports `otel_thread_ctx_v1` from the examples, which publish thread contexts with the
//! writer (a dev-dependency) for the tests to read: a reader finds the TLS slot through
//! the executable's `.dynsym`, where linkers put no symbol of an executable unless asked
//! to. Only the examples: the in-process self-check expects the test binary's symbol in
//! `.symtab` alone, as a binary that forgot the export has it. The library itself defines
//! no such symbol.

fn main() {
    // A packaged crate carries no examples.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::path::Path::new("examples").is_dir()
    {
        println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
