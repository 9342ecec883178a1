//! Thread context (OTEP 4947): the `otel_thread_ctx_v1` TLS slot and its records.
