//! What the tests of this crate share: a context with a remote span, and the calling
//! thread's record, read through its `otel_thread_ctx_v1` slot and decoded with the codec
//! (the writer's test helper).

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;

#[path = "../../../../writer-linux/tests/thread_support/mod.rs"]
mod thread_support;

/// Trace id, span id, trace flags and attributes of a record.
pub type Seen = ([u8; 16], [u8; 8], u8, Vec<(u8, String)>);

/// The calling thread's record, or `None` for NULL.
pub fn seen() -> Option<Seen> {
    thread_support::own_record().map(|record| {
        (
            record.trace_id,
            record.span_id,
            record.trace_flags,
            record.attrs,
        )
    })
}

/// A context whose span is a remote one with these ids (each byte repeated) and flags.
pub fn remote(trace: u8, span: u8, flags: u8) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes([trace; 16]),
        SpanId::from_bytes([span; 8]),
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}
