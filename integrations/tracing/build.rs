fn main() {
    otel_ctx_export::export_tls_symbol();
}
