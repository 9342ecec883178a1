//! Thread-context writes of this crate: attach+detach, swap, in-place update with 0, 2 and
//! 8 attributes (`update`), and the same updates writing exactly the bytes libdd writes
//! (`update_same_bytes`: libdd always adds a local-root-span-id entry). `thread_writes_libdd.rs` measures the same operations with
//! `libdd-otel-thread-ctx` 2.0.1 (a separate binary: both crates define the
//! `otel_thread_ctx_v1` symbol, so they cannot link into one). Run both with
//! `cargo bench -p otel-ctx-writer --bench thread_writes --bench thread_writes_libdd`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use otel_ctx_writer::thread::{self, Key, ThreadContext};

#[path = "thread_inputs.rs"]
mod inputs;

const NAME: &str = "otel-ctx-writer";

fn attach_detach(c: &mut Criterion) {
    let mut held = Some(ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[]).unwrap());
    c.benchmark_group("attach_detach")
        .bench_function(NAME, |b| {
            b.iter(|| {
                let previous = black_box(held.take()).map(ThreadContext::attach);
                black_box(previous);
                held = thread::detach();
            })
        });
}

fn swap(c: &mut Criterion) {
    let a = ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[]).unwrap();
    let b = ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[]).unwrap();
    a.attach();
    let mut held = Some(b);
    c.benchmark_group("swap").bench_function(NAME, |bench| {
        bench.iter(|| {
            // Attach the held one; the one it replaces is held for the next iteration.
            held = black_box(held.take()).and_then(ThreadContext::attach);
        })
    });
    drop(thread::detach());
}

fn update(c: &mut Criterion) {
    let keys: Vec<Key> = (0..=8).map(Key::from_index).collect();
    ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[])
        .unwrap()
        .attach();
    // N attributes, as a caller of this crate writes them.
    let mut group = c.benchmark_group("update");
    for count in inputs::COUNTS {
        let mut attrs = [(keys[0], ""); 8];
        for (i, value) in inputs::VALUES[..count].iter().enumerate() {
            attrs[i] = (keys[i + 1], *value);
        }
        group.bench_function(format!("{NAME}/{count}"), |b| {
            b.iter(|| {
                thread::update(
                    black_box(inputs::TRACE_ID),
                    black_box(inputs::SPAN_ID),
                    1,
                    black_box(&attrs[..count]),
                )
                .unwrap();
            })
        });
    }
    group.finish();
    // The bytes libdd writes for N attributes: its local-root-span-id entry (16 hex
    // digits, key 0, encoded on every update) and then the N attributes.
    let mut group = c.benchmark_group("update_same_bytes");
    for count in inputs::COUNTS {
        let mut root = [0u8; 16];
        let mut attrs = [(keys[0], inputs::hex(inputs::LOCAL_ROOT_SPAN_ID, &mut root)); 9];
        for (i, value) in inputs::VALUES[..count].iter().enumerate() {
            attrs[i + 1] = (keys[i + 1], *value);
        }
        group.bench_function(format!("{NAME}/{count}"), |b| {
            b.iter(|| {
                // Encode the id as libdd does on every update (into a buffer equal to the
                // one `attrs[0]` points at).
                let mut hex = [0u8; 16];
                black_box(inputs::hex(black_box(inputs::LOCAL_ROOT_SPAN_ID), &mut hex));
                thread::update(
                    black_box(inputs::TRACE_ID),
                    black_box(inputs::SPAN_ID),
                    1,
                    black_box(&attrs[..=count]),
                )
                .unwrap();
            })
        });
    }
    group.finish();
    drop(thread::detach());
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
