//! Errors of the thread-context writer.

use core::fmt;

use otel_ctx_codec::attrs::MAX_VALUE_LEN;
use otel_ctx_codec::record::{MAX_RECORD_SIZE, RECORD_HEADER_SIZE};

/// Why a record operation was refused. The record is left as it was, and stays valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextError {
    /// An attribute value is longer than the 255 bytes an entry can hold.
    ValueTooLong {
        /// Key index of the attribute.
        key: u8,
        /// Length of the value in bytes.
        len: usize,
    },
    /// The record would be larger than its capacity.
    RecordFull {
        /// Bytes the record would take, header included.
        needed: usize,
        /// The record's capacity.
        capacity: usize,
    },
    /// No record is attached to this thread.
    NotAttached,
    /// A capacity outside `28..=640` bytes was asked for.
    CapacityOutOfRange {
        /// The capacity asked for.
        capacity: usize,
    },
    /// The slot holds a record another library attached (`otel_thread_ctx_v1` is shared by
    /// every writer in the process): this crate changes only records it allocated.
    ForeignRecordAttached,
    /// A trace id without a span id: OTEP 4947 requires both or neither.
    TraceIdWithoutSpanId,
    /// A span id without a trace id: OTEP 4947 requires both or neither.
    SpanIdWithoutTraceId,
    /// Trace flags with neither a trace id nor a span id: OTEP 4947 requires zero flags
    /// when no ids are set.
    TraceFlagsWithoutIds {
        /// The flags asked for.
        trace_flags: u8,
    },
}

impl ContextError {
    /// A snake_case name of the error kind.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::ValueTooLong { .. } => "value_too_long",
            Self::RecordFull { .. } => "record_full",
            Self::NotAttached => "not_attached",
            Self::CapacityOutOfRange { .. } => "capacity_out_of_range",
            Self::ForeignRecordAttached => "foreign_record_attached",
            Self::TraceIdWithoutSpanId => "trace_id_without_span_id",
            Self::SpanIdWithoutTraceId => "span_id_without_trace_id",
            Self::TraceFlagsWithoutIds { .. } => "trace_flags_without_ids",
        }
    }
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ValueTooLong { key, len } => write!(
                f,
                "value of attribute key {key} is {len} bytes, over the {MAX_VALUE_LEN} bytes \
                 an entry holds; shorten it or use the truncating append"
            ),
            Self::RecordFull { needed, capacity } => write!(
                f,
                "the record would take {needed} bytes but its capacity is {capacity}; the \
                 record was left unchanged (use a larger capacity, up to {MAX_RECORD_SIZE}, \
                 or fewer attributes)"
            ),
            Self::NotAttached => write!(
                f,
                "no thread context is attached to this thread; attach one first"
            ),
            Self::CapacityOutOfRange { capacity } => write!(
                f,
                "record capacity {capacity} is outside {RECORD_HEADER_SIZE}..={MAX_RECORD_SIZE} \
                 bytes (the header takes {RECORD_HEADER_SIZE}, readers copy at most \
                 {MAX_RECORD_SIZE})"
            ),
            Self::ForeignRecordAttached => write!(
                f,
                "another library's record is attached to this thread's otel_thread_ctx_v1 \
                 (the slot is shared by every writer in the process), and this crate never \
                 changes a record it did not allocate; it was left as it is: attach a \
                 context of this crate first (attach returns the other record, to put back \
                 afterwards)"
            ),
            Self::TraceIdWithoutSpanId => write!(
                f,
                "the trace id is set but the span id is all zeros; set both ids (OTEP 4947: \
                 both or neither), or neither for no trace"
            ),
            Self::SpanIdWithoutTraceId => write!(
                f,
                "the span id is set but the trace id is all zeros; set both ids (OTEP 4947: \
                 both or neither), or neither for no trace"
            ),
            Self::TraceFlagsWithoutIds { trace_flags } => write!(
                f,
                "trace flags {trace_flags:#04x} with neither a trace id nor a span id; \
                 OTEP 4947 requires zero flags when no ids are set: pass 0, or set both ids"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ContextError {}
