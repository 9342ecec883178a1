//! Exports `otel_thread_ctx_v1` from each service: readers find the TLS slot in the
//! executable's `.dynsym`, where linkers put no symbol of an executable unless asked to.

fn main() {
    otel_ctx_export::export_tls_symbol();
}
