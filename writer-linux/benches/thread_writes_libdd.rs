//! The operations of `thread_writes.rs`, with `libdd-otel-thread-ctx` 2.0.1. Its update
//! always writes a local-root-span-id entry before the N attributes, so its `update/N` rows
//! write the bytes of `thread_writes.rs`'s `update_same_bytes/N` rows. Like those, every
//! update builds its attribute list on each call.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use libdd_otel_thread_ctx::linux::OwnedThreadContext;

#[path = "criterion_config.rs"]
mod criterion_config;
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

/// `update/N`: libdd writes its local-root-span-id entry (16 hex digits, key 0, encoded on
/// every update), then the N attributes.
fn update_n<const N: usize>(group: &mut BenchmarkGroup<'_, WallTime>) {
    let template: [(u8, &str); 8] = core::array::from_fn(|i| (i as u8 + 1, inputs::VALUES[i]));
    group.bench_function(format!("{NAME}/{N}"), |b| {
        b.iter(|| {
            let attrs: [(u8, &str); N] = inputs::first(black_box(&template));
            OwnedThreadContext::update(
                black_box(inputs::TRACE_ID),
                black_box(inputs::SPAN_ID),
                1,
                black_box(inputs::LOCAL_ROOT_SPAN_ID),
                black_box(&attrs[..]),
            );
        })
    });
}

fn update(c: &mut Criterion) {
    new_context().attach();
    let mut group = c.benchmark_group("update");
    update_n::<0>(&mut group);
    update_n::<2>(&mut group);
    update_n::<8>(&mut group);
    group.finish();
    drop(OwnedThreadContext::detach());
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = attach_detach, swap, update
}
criterion_main!(benches);
