//! One complete minimal service per integration, as the README sets each up:
//! `src/bin/tracing_service.rs` (the `tracing` layer alone), `src/bin/otel_service.rs`
//! (the OpenTelemetry SDK with the context observer) and `c/service.c` (the C ABI). The
//! tests run each and judge it as `otel-ctx check` does; `scripts/readme-blocks.py`
//! checks that the README's code blocks are these files' code.
