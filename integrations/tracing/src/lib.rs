//! A [`tracing_subscriber::Layer`] that keeps the OpenTelemetry thread context (OTEP 4947)
//! of each thread on the `tracing` span it is in.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//!
//! let layer = otel_ctx_tracing::ThreadContextLayer::new().with_attribute("http.route")?;
//! tracing_subscriber::registry().with(layer).init();
//! tracing::info_span!("request", http.route = "/cart").in_scope(|| {
//!     // While the span is entered, a profiler that stops this thread reads its trace id,
//!     // span id, flags and `http.route` in the thread's `otel_thread_ctx_v1` record.
//! });
//! # Ok::<(), otel_ctx_tracing::RegistryError>(())
//! ```
//!
//! A profiler that stops a thread reads its `otel_thread_ctx_v1` record: trace id, span
//! id, trace flags and a few attributes. With [`ThreadContextLayer`] installed, that
//! record is the one of the span the thread has entered, on whatever worker thread an
//! async task runs, with no call in the service's own code.
//!
//! # What each span callback does
//!
//! - **New span**: builds the span's record once (one allocation): ids, flags, and the
//!   values of the chosen fields as attributes. The ids come from `tracing-opentelemetry`
//!   when its layer is installed below this one and the `opentelemetry` feature is on (the
//!   span context it activates on enter), otherwise they are generated: a child span keeps
//!   its parent's trace id, a root span starts a new trace.
//! - **Record**: takes the new field values into the record; if the span is the one
//!   attached to the calling thread, the attached record is updated in place.
//! - **Enter**: attaches the record, keeping what the slot held, on a per-thread stack.
//! - **Exit**: puts back what the slot held before that enter. Exits need not come in
//!   last-in-first-out order: exiting a span that is not the innermost one unlinks it from
//!   the stack, and the slot keeps the innermost span's record. The record stays on the
//!   thread (one per thread), so that the next enter of the same span there (the next
//!   poll of the same task, most often) attaches it without looking the span up; it goes
//!   back to the span when another span's record takes its place.
//! - **Close**: frees the record; one still attached or kept on another thread is freed
//!   there, at its exit or when it leaves that thread.
//!
//! Outside Linux there is no `otel_thread_ctx_v1` slot: the layer keeps its builder
//! methods and does nothing, so that a service builds the same subscriber everywhere.
//!
//! With the `demo-service` feature, `otel_ctx_tracing::demo` is the demo service of the
//! `traced_service` example and of `otel-ctx demo`.
//!
//! A span entered on two threads at once gets a second record for the second thread,
//! built on that enter. The export of `otel_thread_ctx_v1` in the binary's `.dynsym` is the
//! binary's job: see `otel-ctx-export`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(all(feature = "demo-service", target_os = "linux"))]
pub mod demo;
mod ids;
#[cfg(target_os = "linux")]
mod layer;
#[cfg(not(target_os = "linux"))]
mod noop;

pub use ids::{SpanIds, GENERATED_TRACE_FLAGS};
#[cfg(target_os = "linux")]
pub use layer::{default_resource, span_ids, ThreadContextLayer};
#[cfg(not(target_os = "linux"))]
pub use noop::{span_ids, ThreadContextLayer};

/// The writer's `otel_ctx_writer::thread::RegistryError`: outside Linux no key is
/// registered and nothing fails.
pub use otel_ctx_writer::thread::RegistryError;
