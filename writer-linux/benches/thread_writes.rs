//! Thread-context writes of this crate, side by side with `thread_writes_libdd.rs`
//! (`libdd-otel-thread-ctx` 2.0.1) and `thread_writes_custom_labels.rs` (`custom-labels`
//! 0.4.6), each in its own binary: libdd and this crate both define the
//! `otel_thread_ctx_v1` symbol, so they cannot link into one. `scripts/bench.sh` runs them
//! all and prints the ratios.
//!
//! Rows:
//! - `attach_detach`, `swap`: moving an owned context in and out of the slot.
//! - `update/N`: in-place update with N attributes, as a caller of this crate writes them.
//!   libdd's `update/N` writes N attributes plus its local-root-span-id entry, which it
//!   cannot leave out.
//! - `update_same_bytes/N`: the bytes libdd's `update/N` writes, from the same input: the
//!   caller hex-encodes the 8-byte local root span id on every update (with
//!   [`inputs::hex_wide`]) and passes it as attribute 0, then the N attributes.
//! - `update_same_bytes_hex_table/N`: the same, hex-encoding with libdd's algorithm (one
//!   table look-up and one byte store per digit).
//! - `with_labels_2`: this crate's operations closest to custom-labels' `with_labels` of 2
//!   labels (set 2 labels for the duration of a closure, then restore what was there).
//!   `append`: the 2 attributes appended to the thread's current context and truncated
//!   away after the closure, in place, as custom-labels changes the thread's current label
//!   set in place (the closest). `new`: a 2-attribute context allocated and attached for
//!   the closure (`ThreadContext::new`, `attach_scoped`, drop), as custom-labels allocates
//!   copies of its labels on every call. `reuse`: the same with a context kept from the
//!   previous call and updated, instead of allocated.
//!
//! Every update row builds its attribute list on each call, from inputs the optimizer
//! cannot see through, as a caller does (the libdd rows do the same).

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use otel_ctx_writer::thread::{self, Attached, Key, ThreadContext};

#[path = "criterion_config.rs"]
mod criterion_config;
#[path = "thread_inputs.rs"]
mod inputs;

const NAME: &str = "otel-ctx-writer";

/// Key of the local root span id in the `update_same_bytes` rows, as in libdd.
const ROOT_KEY: Key = Key::from_index(0);

/// Attribute 0 (the local root span id, filled in on each call) and keys 1..=8 with the
/// values of the inputs.
fn template() -> [(Key, &'static str); 9] {
    core::array::from_fn(|i| match i {
        0 => (ROOT_KEY, ""),
        _ => (Key::from_index(i as u8), inputs::VALUES[i - 1]),
    })
}

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
    let mut held = Some(Attached::Context(b));
    c.benchmark_group("swap").bench_function(NAME, |bench| {
        bench.iter(|| {
            // Attach the held one; the one it replaces is held for the next iteration.
            held = black_box(held.take()).and_then(Attached::attach);
        })
    });
    drop(thread::detach());
}

/// `update/N`: N attributes.
fn update_n<const N: usize>(group: &mut BenchmarkGroup<'_, WallTime>) {
    let template = template();
    group.bench_function(format!("{NAME}/{N}"), |b| {
        b.iter(|| {
            let attrs: [(Key, &str); N] = inputs::first(&black_box(&template)[1..]);
            thread::update(
                black_box(inputs::TRACE_ID),
                black_box(inputs::SPAN_ID),
                1,
                black_box(&attrs[..]),
            )
            .unwrap();
        })
    });
}

/// `update_same_bytes/N` (`LEN = N + 1`): the local root span id, hex-encoded by `hex`,
/// then N attributes.
fn update_same_bytes_n<const LEN: usize>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    hex: impl for<'a> Fn([u8; 8], &'a mut [u8; 16]) -> &'a str,
) {
    let template = template();
    group.bench_function(format!("{NAME}/{}", LEN - 1), |b| {
        b.iter(|| {
            let mut digits = [0; 16];
            let root = hex(black_box(inputs::LOCAL_ROOT_SPAN_ID), &mut digits);
            let mut attrs: [(Key, &str); LEN] = inputs::first(black_box(&template));
            attrs[0].1 = root;
            thread::update(
                black_box(inputs::TRACE_ID),
                black_box(inputs::SPAN_ID),
                1,
                black_box(&attrs[..]),
            )
            .unwrap();
        })
    });
}

fn update(c: &mut Criterion) {
    inputs::check_hex();
    ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[])
        .unwrap()
        .attach();
    let mut group = c.benchmark_group("update");
    update_n::<0>(&mut group);
    update_n::<2>(&mut group);
    update_n::<8>(&mut group);
    group.finish();
    let mut group = c.benchmark_group("update_same_bytes");
    update_same_bytes_n::<1>(&mut group, inputs::hex_wide);
    update_same_bytes_n::<3>(&mut group, inputs::hex_wide);
    update_same_bytes_n::<9>(&mut group, inputs::hex_wide);
    group.finish();
    let mut group = c.benchmark_group("update_same_bytes_hex_table");
    update_same_bytes_n::<1>(&mut group, inputs::hex_table);
    update_same_bytes_n::<3>(&mut group, inputs::hex_table);
    update_same_bytes_n::<9>(&mut group, inputs::hex_table);
    group.finish();
    drop(thread::detach());
}

fn with_labels(c: &mut Criterion) {
    let attrs = [
        (Key::from_index(1), inputs::VALUES[0]),
        (Key::from_index(2), inputs::VALUES[1]),
    ];
    let mut group = c.benchmark_group("with_labels_2");
    group.bench_function(format!("{NAME}/new"), |b| {
        b.iter(|| {
            let guard = ThreadContext::new([0; 16], [0; 8], 0, black_box(&attrs))
                .unwrap()
                .attach_scoped();
            black_box(0u8);
            drop(guard);
        })
    });
    let mut held = Some(ThreadContext::with_capacity(ThreadContext::CAPACITY).unwrap());
    group.bench_function(format!("{NAME}/reuse"), |b| {
        b.iter(|| {
            let Some(mut context) = held.take() else {
                unreachable!("the context comes back from every iteration")
            };
            context
                .update([0; 16], [0; 8], 0, black_box(&attrs))
                .unwrap();
            let guard = context.attach_scoped();
            black_box(0u8);
            held = guard.detach();
        })
    });
    // The thread's current context gets the 2 attributes appended for the duration of the
    // closure and then loses them again: custom-labels' `with_labels` on the thread's
    // current label set, in place.
    ThreadContext::new(inputs::TRACE_ID, inputs::SPAN_ID, 1, &[])
        .unwrap()
        .attach();
    group.bench_function(format!("{NAME}/append"), |b| {
        b.iter(|| {
            let before = thread::attached_attr_count().unwrap();
            for (key, value) in black_box(&attrs) {
                thread::append(*key, value).unwrap();
            }
            black_box(0u8);
            thread::truncate_attrs(before).unwrap();
        })
    });
    drop(thread::detach());
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = attach_detach, swap, update, with_labels
}
criterion_main!(benches);
