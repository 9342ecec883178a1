//! What the tests of this crate share: the calling thread's record, read through its
//! `otel_thread_ctx_v1` slot and decoded with the codec (the writer's test helper).

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
