//! What `ThreadContextLayer` adds to a span's enter and exit, beside a bare writer attach
//! and detach.
//!
//! Rows (one enter + exit, or one attach + detach, per iteration; the span and its record
//! exist before the loop):
//! - `writer_attach_detach`: `ThreadContext::attach`, then `swap` back (the writer alone).
//! - `registry_enter_exit`: a span of a bare `tracing_subscriber::Registry`.
//! - `layer_enter_exit`: the same span with the layer over the registry.
//!
//! - `otel_enter_exit` (feature `opentelemetry`): a span with `tracing-opentelemetry`'s
//!   layer over the registry, its tracer an SDK one with no exporter (the OpenTelemetry
//!   context is activated on enter).
//! - `otel_layer_enter_exit` (feature `opentelemetry`): the same with this layer above it.
//!
//! The layer's own cost is `layer_enter_exit - registry_enter_exit`, and beside
//! `tracing-opentelemetry` `otel_layer_enter_exit - otel_enter_exit`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use otel_ctx_tracing::ThreadContextLayer;
use otel_ctx_writer::thread::{self, Attached, ThreadContext};
use tracing::{dispatcher, Dispatch};
use tracing_subscriber::prelude::*;

#[path = "../../../writer-linux/benches/criterion_config.rs"]
mod criterion_config;

fn enter_exit(c: &mut Criterion) {
    let mut group = c.benchmark_group("enter_exit");

    let mut held = Some(Attached::Context(
        ThreadContext::new([1; 16], [2; 8], 1, &[]).unwrap(),
    ));
    group.bench_function("writer_attach_detach", |b| {
        b.iter(|| {
            let previous = thread::swap(black_box(held.take()));
            held = thread::swap(black_box(previous));
        })
    });

    let registry = Dispatch::new(tracing_subscriber::registry());
    dispatcher::with_default(&registry, || {
        let span = tracing::info_span!("request", http.route = "/cart");
        group.bench_function("registry_enter_exit", |b| {
            b.iter(|| drop(black_box(&span).enter()))
        });
    });

    let layer = ThreadContextLayer::new()
        .with_attribute("http.route")
        .unwrap();
    let layered = Dispatch::new(tracing_subscriber::registry().with(layer));
    dispatcher::with_default(&layered, || {
        let span = tracing::info_span!("request", http.route = "/cart");
        group.bench_function("layer_enter_exit", |b| {
            b.iter(|| drop(black_box(&span).enter()))
        });
    });
    #[cfg(feature = "opentelemetry")]
    with_opentelemetry(&mut group);
    group.finish();
}

#[cfg(feature = "opentelemetry")]
fn with_opentelemetry(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    let provider = SdkTracerProvider::builder().build();
    let otel = Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    dispatcher::with_default(&otel, || {
        let span = tracing::info_span!("request", http.route = "/cart");
        group.bench_function("otel_enter_exit", |b| {
            b.iter(|| drop(black_box(&span).enter()))
        });
    });

    let layer = ThreadContextLayer::new()
        .with_attribute("http.route")
        .unwrap();
    let both = Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")))
            .with(layer),
    );
    dispatcher::with_default(&both, || {
        let span = tracing::info_span!("request", http.route = "/cart");
        group.bench_function("otel_layer_enter_exit", |b| {
            b.iter(|| drop(black_box(&span).enter()))
        });
    });
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = enter_exit
}
criterion_main!(benches);
