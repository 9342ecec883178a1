//! A service traced with `tracing` alone, set up as the README's "Rust, with `tracing`"
//! section says: the thread-context layer keeps each thread's record on its span, and
//! publishes the process context.

use std::time::{Duration, Instant};

use tracing_subscriber::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Each thread's context follows the span it is in; `http.route` becomes an attribute.
    // With no process context published yet, the layer publishes one (OTEL_SERVICE_NAME,
    // OTEL_RESOURCE_ATTRIBUTES) when it is installed.
    let layer = otel_ctx_tracing::ThreadContextLayer::new().with_attribute("http.route")?;
    tracing_subscriber::registry().with(layer).init();

    // A stand-in for the service's work: requests of two routes, for 30 seconds.
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        for route in ["/cart", "/checkout"] {
            let span = tracing::info_span!("request", http.route = route);
            let _entered = span.enter();
            let started = Instant::now();
            while started.elapsed() < Duration::from_millis(5) {
                std::hint::spin_loop();
            }
        }
    }
    Ok(())
}
