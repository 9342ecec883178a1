//! The calling thread's own record, read the way a reader reads it: the pointer in its
//! `otel_thread_ctx_v1` slot, the record header, then `attrs_data_size` bytes of
//! attrs-data, decoded with the codec.
//!
//! Shared by the thread tests of the writer and of the integrations, which include this
//! file with `#[path]`: they all link the writer, whose slot this reads.
#![allow(dead_code)]

use otel_ctx_codec::record::{RecordHeader, RecordView, MAX_RECORD_SIZE, RECORD_HEADER_SIZE};
use otel_ctx_writer::thread::attached_record_address;

/// A record as a reader decodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnRecord {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub trace_flags: u8,
    /// Key index and value of each entry, in order.
    pub attrs: Vec<(u8, String)>,
}

/// `f` of the bytes a reader copies of the calling thread's record (the header and its
/// attrs-data), or `None` for a NULL slot. Allocates nothing.
pub fn with_own_record<R>(f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let record = attached_record_address();
    if record.is_null() {
        return None;
    }
    // SAFETY: the slot points at a record attached on this thread, live while attached and
    // at least a header long; this thread does not write it while it is read here.
    let header = unsafe { std::slice::from_raw_parts(record, RECORD_HEADER_SIZE) };
    let size = RecordHeader::read(header)
        .expect("a record starts with its header")
        .record_size();
    assert!(size <= MAX_RECORD_SIZE, "a record of {size} bytes");
    // SAFETY: as above; `size` is the record's header plus its attrs-data size, inside the
    // record's capacity.
    Some(f(unsafe { std::slice::from_raw_parts(record, size) }))
}

/// A copy of the bytes a reader copies of the calling thread's record, or `None`.
pub fn own_record_bytes() -> Option<Vec<u8>> {
    with_own_record(<[u8]>::to_vec)
}

/// The calling thread's record, decoded, or `None` for a NULL slot.
pub fn own_record() -> Option<OwnRecord> {
    with_own_record(decode)
}

/// `bytes` decoded as a record that must parse, be valid and hold UTF-8 values.
pub fn decode(bytes: &[u8]) -> OwnRecord {
    let view = RecordView::parse(bytes, MAX_RECORD_SIZE).expect("record parses");
    assert!(view.header.is_valid(), "an attached record is valid");
    OwnRecord {
        trace_id: view.header.trace_id,
        span_id: view.header.span_id,
        trace_flags: view.header.trace_flags,
        attrs: view
            .entries()
            .map(|(k, v)| (k, String::from_utf8(v.to_vec()).expect("UTF-8 value")))
            .collect(),
    }
}
