//! A service traced with the OpenTelemetry SDK, set up as the README's "Rust, with the
//! OpenTelemetry SDK" section says: the context observer and the provider's `Resource`.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use otel_ctx_opentelemetry::{ProcessContextProcessor, ThreadAttributesExt, ThreadContextObserver};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every attached Context puts its span's ids (and the attributes it carries) in the
    // thread's record; the provider's Resource becomes the process context.
    ThreadContextObserver::builder().build().install()?;
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name("checkout").build())
        .with_span_processor(ProcessContextProcessor::new())
        .build();
    let tracer = provider.tracer("checkout");
    let route = otel_ctx_opentelemetry::register("http.route")?;

    // A stand-in for the service's work, until it is stopped (Ctrl-C): requests of two
    // routes, the same work for each, of a random length from 1 to 9 ms.
    let random = RandomState::new();
    loop {
        let work = Duration::from_millis(1 + random.hash_one(Instant::now()) % 9);
        for path in ["/cart", "/checkout"] {
            let mut span = tracer.start("request");
            span.set_attribute(KeyValue::new("http.route", path));
            let cx = Context::current_with_span(span).with_thread_attribute(route, path);
            let _attached = cx.attach();
            let started = Instant::now();
            while started.elapsed() < work {
                std::hint::spin_loop();
            }
        }
    }
}
