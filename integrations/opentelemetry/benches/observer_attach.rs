//! What the thread context adds to `Context::attach` and the drop of its guard.
//!
//! Rows (one attach + drop per iteration; the context, with a valid span, exists before
//! the loop). They run in this order, because installing the observer is process-wide and
//! cannot be undone:
//! - `writer_attach_detach`: `ThreadContext::attach`, then `swap` back (the writer alone).
//! - `context_attach_drop/no_observer`: `Context::attach` + drop, no observer installed
//!   (the API built with `experimental_context_observer`, as this bench is).
//! - `guard_attach_drop`: the plain guard API, `otel_ctx_opentelemetry::attach(&cx)` +
//!   drop, beside the context's own attach: it builds a record each time.
//! - `context_attach_drop/observer`: `Context::attach` + drop with `ThreadContextObserver`
//!   installed, for a context made after it (its record exists).
//!
//! The observer's own cost is `context_attach_drop/observer - context_attach_drop/no_observer`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use otel_ctx_opentelemetry::ThreadContextObserver;
use otel_ctx_writer::thread::{self, Attached, ThreadContext};

#[path = "../../../writer-linux/benches/criterion_config.rs"]
mod criterion_config;

fn span_cx() -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes([1; 16]),
        SpanId::from_bytes([2; 8]),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

fn attach_drop(c: &mut Criterion) {
    let mut group = c.benchmark_group("attach_drop");

    let mut held = Some(Attached::Context(
        ThreadContext::new([1; 16], [2; 8], 1, &[]).unwrap(),
    ));
    group.bench_function("writer_attach_detach", |b| {
        b.iter(|| {
            let previous = thread::swap(black_box(held.take()));
            held = thread::swap(black_box(previous));
        })
    });

    let cx = span_cx();
    group.bench_function("context_attach_drop/no_observer", |b| {
        b.iter(|| drop(black_box(&cx).clone().attach()))
    });
    group.bench_function("guard_attach_drop", |b| {
        b.iter(|| drop(otel_ctx_opentelemetry::attach(black_box(&cx))))
    });

    ThreadContextObserver::new()
        .install()
        .expect("the first observer of the process");
    let cx = span_cx();
    assert!(cx.observer_view().is_some());
    group.bench_function("context_attach_drop/observer", |b| {
        b.iter(|| drop(black_box(&cx).clone().attach()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = attach_drop
}
criterion_main!(benches);
