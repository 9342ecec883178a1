//! A service traced with `tracing` and `tracing-opentelemetry` over the OpenTelemetry SDK,
//! whose thread contexts follow its request spans across the worker threads of a tokio
//! runtime, for a profiler (or `otel-ctx show`) to read: `otel_ctx_tracing::demo`, the
//! service `otel-ctx demo` runs too (feature `demo-service`).
//!
//! It prints first `READY <pid>`, then one JSON line per request span the SDK exported:
//! `{"trace_id":"<32 hex>","span_id":"<16 hex>","http.route":"..."}`. It runs until its
//! stdin closes, or for `--duration <seconds>` (`10` or `10s`).
//!
//! ```sh
//! cargo run -p otel-ctx-tracing --features demo-service --example traced_service -- --duration 30 &
//! otel-ctx show --json <the pid it prints>
//! ```

use otel_ctx_tracing::demo::{self, Options};

fn main() {
    let options = match Options::parse_duration(std::env::args().skip(1)) {
        Ok(options) => Options {
            print: true,
            ..options
        },
        Err(e) => {
            eprintln!("traced_service: {e}; usage: traced_service [--duration <seconds>]");
            std::process::exit(2);
        }
    };
    if let Err(e) = demo::run(options) {
        eprintln!("traced_service: {e}");
        std::process::exit(1);
    }
}
