//! Exports `otel_thread_ctx_v1` from the `otel-ctx` binary, whose demo service publishes
//! thread contexts: a reader finds the TLS slot through the executable's `.dynsym`, where
//! linkers put no symbol of an executable unless asked to.

fn main() {
    otel_ctx_export::export_tls_symbol();
}
