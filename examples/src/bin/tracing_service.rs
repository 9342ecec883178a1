//! A service traced with `tracing` alone, set up as the README's "Rust, with `tracing`"
//! section says: the thread-context layer keeps each thread's record on its span, and
//! publishes the process context.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use tracing_subscriber::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Each thread's context follows the span it is in; `http.route` becomes an attribute.
    // With no process context published yet, the layer publishes one (OTEL_SERVICE_NAME,
    // OTEL_RESOURCE_ATTRIBUTES) when it is installed.
    let layer = otel_ctx_tracing::ThreadContextLayer::new().with_attribute("http.route")?;
    tracing_subscriber::registry().with(layer).init();

    // A stand-in for the service's work, until it is stopped (Ctrl-C): requests of two
    // routes, the same work for each, of a random length from 1 to 9 ms (work of one fixed
    // length would repeat in step with a profiler's fixed sampling rate).
    let random = RandomState::new();
    loop {
        let work = Duration::from_millis(1 + random.hash_one(Instant::now()) % 9);
        for route in ["/cart", "/checkout"] {
            let span = tracing::info_span!("request", http.route = route);
            let _entered = span.enter();
            let started = Instant::now();
            while started.elapsed() < work {
                std::hint::spin_loop();
            }
        }
    }
}
