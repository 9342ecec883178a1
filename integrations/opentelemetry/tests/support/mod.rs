//! What the tests of this crate share: the calling thread's record, read through its
//! `otel_thread_ctx_v1` slot and decoded with the codec.

use otel_ctx_codec::record::{RecordView, MAX_RECORD_SIZE};
use otel_ctx_writer::thread::attached_record_address;

/// Trace id, span id, trace flags and attributes of a record.
pub type Seen = ([u8; 16], [u8; 8], u8, Vec<(u8, String)>);

/// The calling thread's record, or `None` for NULL.
pub fn seen() -> Option<Seen> {
    let record = attached_record_address();
    if record.is_null() {
        return None;
    }
    // SAFETY: the slot points at a record attached on this thread, live while attached;
    // this thread does not write it while the test reads it.
    let header = unsafe { std::slice::from_raw_parts(record, 28) };
    let size = 28 + usize::from(u16::from_ne_bytes([header[26], header[27]]));
    // SAFETY: as above; `size` is the record's header plus its attrs-data size.
    let bytes = unsafe { std::slice::from_raw_parts(record, size) };
    let view = RecordView::parse(bytes, MAX_RECORD_SIZE).expect("record parses");
    assert!(view.header.is_valid());
    Some((
        view.header.trace_id,
        view.header.span_id,
        view.header.trace_flags,
        view.entries()
            .map(|(k, v)| (k, String::from_utf8(v.to_vec()).unwrap()))
            .collect(),
    ))
}
