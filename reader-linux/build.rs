//! Exports `otel_thread_ctx_v1` from the examples and tests that publish thread contexts
//! with the writer (a dev-dependency) for the tests to read: a reader finds the TLS slot
//! through the executable's `.dynsym`, where linkers put no symbol of an executable unless
//! asked to. The library itself defines no such symbol.

fn main() {
    otel_ctx_export::export_tls_symbol();
}
