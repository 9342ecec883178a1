//! Attach+detach and a 2-attribute in-place update, each called three ways in one binary:
//!
//! - `c`: from C. `c/calls.c`, compiled by `build.rs` with the C compiler (outside
//!   Rust's LTO, so nothing is inlined across), calls the library's exported
//!   `otel_thread_ctx_*` functions; criterion calls the C function of one iteration.
//! - `rust-ffi`: the same exported functions called from Rust, which LTO may inline: the
//!   cost of the C API's own layer (handles, the reading of C strings, the panic guard)
//!   without the boundary.
//! - `rust-api`: `otel-ctx-writer`'s Rust API (`ThreadContext::attach`, `thread::detach`,
//!   `thread::update`), as `writer-linux/benches/thread_writes.rs` measures it.
//!
//! The ids and the two values are those of the writer's benchmarks (`GET`,
//! `/api/v1/users/:id`, keys 1 and 2). Every update builds its attribute list on each call,
//! from inputs the optimizer cannot see through, as a caller does.

use core::ffi::c_char;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use otel_ctx_ffi::thread::{
    otel_thread_ctx, otel_thread_ctx_attach, otel_thread_ctx_attr, otel_thread_ctx_detach,
    otel_thread_ctx_free, otel_thread_ctx_new, otel_thread_ctx_update,
};
use otel_ctx_writer::thread::{self, Key, ThreadContext};

#[path = "../../../writer-linux/benches/criterion_config.rs"]
mod criterion_config;

// `otel_thread_ctx` is opaque to C (only pointers to it cross), so its Rust layout is
// irrelevant here, as in the library's own exported functions.
#[allow(improper_ctypes)]
extern "C" {
    /// `benches/c/calls.c`: attaches `context` to the empty slot and detaches it; returns
    /// it, or NULL on failure.
    fn otel_ctx_bench_c_attach_detach(context: *mut otel_thread_ctx) -> *mut otel_thread_ctx;
    /// `benches/c/calls.c`: `otel_thread_ctx_update` of the attached context with these
    /// ids, flags 1 and the two attributes; whether it succeeded.
    fn otel_ctx_bench_c_update_2(
        trace_id: *const u8,
        span_id: *const u8,
        key0: u8,
        value0: *const c_char,
        key1: u8,
        value1: *const c_char,
    ) -> bool;
}

const TRACE_ID: [u8; 16] = [
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36,
];
const SPAN_ID: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
const KEYS: [u8; 2] = [1, 2];
const VALUES: [&str; 2] = ["GET", "/api/v1/users/:id"];
const C_VALUES: [&core::ffi::CStr; 2] = [c"GET", c"/api/v1/users/:id"];

/// A new detached context of the C API, with the ids and no attributes.
fn new_handle() -> *mut otel_thread_ctx {
    // SAFETY: the ids are 16 and 8 readable bytes; no attributes.
    let made = unsafe {
        otel_thread_ctx_new(TRACE_ID.as_ptr(), SPAN_ID.as_ptr(), 1, core::ptr::null(), 0)
    };
    assert!(made.success && !made.context.is_null());
    made.context
}

fn attach_detach(c: &mut Criterion) {
    let mut group = c.benchmark_group("ffi_attach_detach");
    let mut held = new_handle();
    group.bench_function("c", |b| {
        b.iter(|| {
            // SAFETY: `held` is a detached handle of this library (the previous
            // iteration's, checked below), given up to the call, which returns it.
            held = unsafe { otel_ctx_bench_c_attach_detach(black_box(held)) };
        })
    });
    assert!(!held.is_null(), "an attach or detach from C failed");
    group.bench_function("rust-ffi", |b| {
        b.iter(|| {
            // SAFETY: as above.
            let previous = unsafe { otel_thread_ctx_attach(black_box(held)) };
            black_box(previous.context);
            held = otel_thread_ctx_detach();
        })
    });
    assert!(
        !held.is_null(),
        "an attach or detach through the C API failed"
    );
    // SAFETY: a detached handle of this library, not used afterwards.
    unsafe { otel_thread_ctx_free(held) };

    let mut context = Some(ThreadContext::new(TRACE_ID, SPAN_ID, 1, &[]).expect("a context"));
    group.bench_function("rust-api", |b| {
        b.iter(|| {
            let previous = black_box(context.take()).map(ThreadContext::attach);
            black_box(previous);
            context = thread::detach();
        })
    });
    assert!(
        context.is_some(),
        "an attach or detach through the Rust API failed"
    );
    group.finish();
}

fn update_2(c: &mut Criterion) {
    let mut group = c.benchmark_group("ffi_update_2");
    // One context attached for the three rows: the C API and the Rust API share the slot.
    let _attached = ThreadContext::new(TRACE_ID, SPAN_ID, 1, &[])
        .expect("a context")
        .attach_scoped();
    group.bench_function("c", |b| {
        b.iter(|| {
            let [value0, value1] = black_box(C_VALUES);
            // SAFETY: the ids are 16 and 8 readable bytes, the values NUL-terminated.
            let ok = unsafe {
                otel_ctx_bench_c_update_2(
                    black_box(&TRACE_ID).as_ptr(),
                    black_box(&SPAN_ID).as_ptr(),
                    black_box(KEYS[0]),
                    value0.as_ptr(),
                    black_box(KEYS[1]),
                    value1.as_ptr(),
                )
            };
            assert!(ok, "the update from C failed");
        })
    });
    group.bench_function("rust-ffi", |b| {
        b.iter(|| {
            let [value0, value1] = black_box(C_VALUES);
            let attrs = [
                otel_thread_ctx_attr {
                    key: black_box(KEYS[0]),
                    value: value0.as_ptr(),
                },
                otel_thread_ctx_attr {
                    key: black_box(KEYS[1]),
                    value: value1.as_ptr(),
                },
            ];
            // SAFETY: the ids are 16 and 8 readable bytes, `attrs` holds 2 attributes
            // with NUL-terminated values.
            let result = unsafe {
                otel_thread_ctx_update(
                    black_box(&TRACE_ID).as_ptr(),
                    black_box(&SPAN_ID).as_ptr(),
                    1,
                    attrs.as_ptr(),
                    attrs.len(),
                )
            };
            assert!(result.success, "the update through the C API failed");
        })
    });
    group.bench_function("rust-api", |b| {
        b.iter(|| {
            let [value0, value1] = black_box(VALUES);
            let attrs = [
                (Key::from_index(black_box(KEYS[0])), value0),
                (Key::from_index(black_box(KEYS[1])), value1),
            ];
            thread::update(black_box(TRACE_ID), black_box(SPAN_ID), 1, &attrs)
                .expect("the update through the Rust API failed");
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = attach_detach, update_2
}
criterion_main!(benches);
