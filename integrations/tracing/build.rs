//! Exports `otel_thread_ctx_v1` from the `traced_service` example: readers find the TLS
//! slot in the executable's `.dynsym`.

fn main() {
    otel_ctx_export::export_tls_symbol();
}
