//! The operations of `thread_writes.rs`, with `libdd-otel-thread-ctx` 2.0.1. Its update
//! always writes a local-root-span-id entry before the N attributes, so its `update/N` rows
//! write the bytes of `thread_writes.rs`'s `update_same_bytes/N` rows.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use libdd_otel_thread_ctx::linux::OwnedThreadContext;

#[path = "thread_inputs.rs"]
mod inputs;

const NAME: &str = "libdd-otel-thread-ctx";

fn new_context() -> OwnedThreadContext {
    OwnedThreadContext::new(
        inputs::TRACE_ID,
        inputs::SPAN_ID,
        1,
        inputs::LOCAL_ROOT_SPAN_ID,
        &[],
    )
}

fn attach_detach(c: &mut Criterion) {
    let mut held = Some(new_context());
    c.benchmark_group("attach_detach")
        .bench_function(NAME, |b| {
            b.iter(|| {
                let previous = black_box(held.take()).map(OwnedThreadContext::attach);
                black_box(previous);
                held = OwnedThreadContext::detach();
            })
        });
}

fn swap(c: &mut Criterion) {
    new_context().attach();
    let mut held = Some(new_context());
    c.benchmark_group("swap").bench_function(NAME, |bench| {
        bench.iter(|| {
            held = black_box(held.take()).and_then(OwnedThreadContext::attach);
        })
    });
    drop(OwnedThreadContext::detach());
}

fn update(c: &mut Criterion) {
    new_context().attach();
    let mut group = c.benchmark_group("update");
    for count in inputs::COUNTS {
        let mut attrs = [(0u8, ""); 8];
        for (i, value) in inputs::VALUES[..count].iter().enumerate() {
            attrs[i] = ((i + 1) as u8, *value);
        }
        group.bench_function(format!("{NAME}/{count}"), |b| {
            b.iter(|| {
                // libdd writes the local root span id (hex, key 0) itself.
                OwnedThreadContext::update(
                    black_box(inputs::TRACE_ID),
                    black_box(inputs::SPAN_ID),
                    1,
                    black_box(inputs::LOCAL_ROOT_SPAN_ID),
                    black_box(&attrs[..count]),
                );
            })
        });
    }
    group.finish();
    drop(OwnedThreadContext::detach());
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = attach_detach, swap, update
}
criterion_main!(benches);
