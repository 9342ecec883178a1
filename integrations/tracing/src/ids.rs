//! The ids and flags the layer records for a span.

/// The trace flags of a span whose ids this layer generated: sampled, since the span is
/// being recorded by the subscriber.
pub const GENERATED_TRACE_FLAGS: u8 = 0x01;

/// The trace and span ids this layer recorded for a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanIds {
    /// W3C trace id bytes.
    pub trace_id: [u8; 16],
    /// W3C span id bytes.
    pub span_id: [u8; 8],
    /// W3C trace flags.
    pub trace_flags: u8,
}
