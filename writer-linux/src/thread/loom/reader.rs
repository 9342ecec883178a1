//! The model reader: `read_slot` of `reader-linux/src/tls/sample.rs` on one image of the
//! model memory.

// The crate is `no_std`: the model, a test, uses std.
use std::format;
use std::string::String;

use otel_ctx_codec::record::{
    RecordView, ATTRS_DATA_SIZE_OFFSET, RECORD_ALIGN, RECORD_HEADER_SIZE, VALID, VALID_OFFSET,
};

use super::memory::Image;
use super::{attrs_data_size, Logical, CAPACITY, HEAP_BASE, RECORDS, STRIDE};

/// What the reader found.
#[derive(Debug)]
pub(super) enum Found {
    /// The slot is NULL.
    Null,
    /// `valid` is not 1.
    Invalid,
    /// A valid record, decoded.
    Record(Logical),
}

/// `read_slot` of `sample.rs` on one view; `Err` says what a real reader would have
/// got wrong.
pub(super) fn read_view(view: &Image) -> Result<Found, String> {
    if view.slot == 0 {
        return Ok(Found::Null);
    }
    let offset = view.slot.wrapping_sub(HEAP_BASE);
    let index = offset / STRIDE;
    if !offset.is_multiple_of(STRIDE) || index >= RECORDS || !view.slot.is_multiple_of(RECORD_ALIGN)
    {
        return Err(format!("the slot points at {:#x}, no record", view.slot));
    }
    let (bytes, unknown) = (&view.bytes[index], &view.unknown[index]);
    if unknown[VALID_OFFSET] {
        return Err(format!(
            "followed the slot to record {index}, whose valid byte may be anything \
             (freed or being rewritten while reachable)"
        ));
    }
    if bytes[VALID_OFFSET] != VALID {
        return Ok(Found::Invalid);
    }
    if unknown[ATTRS_DATA_SIZE_OFFSET..ATTRS_DATA_SIZE_OFFSET + 2].contains(&true) {
        return Err(format!(
            "record {index} is valid but its attrs_data_size may be anything"
        ));
    }
    let size = RECORD_HEADER_SIZE + usize::from(attrs_data_size(bytes));
    if size > CAPACITY {
        return Err(format!(
            "record {index} declares {size} bytes, past its end"
        ));
    }
    if let Some(at) = unknown[..size].iter().position(|&u| u) {
        return Err(format!(
            "accepted record {index} with byte {at} possibly unwritten or torn: {:?}",
            &bytes[..size]
        ));
    }
    let view = RecordView::parse(&bytes[..size], CAPACITY)
        .map_err(|e| format!("record {index} does not parse: {e}"))?;
    let header = view.header;
    let attrs = view.entries().map(|(k, v)| (k, v.to_vec())).collect();
    Ok(Found::Record(Logical {
        trace_id: header.trace_id,
        span_id: header.span_id,
        trace_flags: header.trace_flags,
        attrs,
    }))
}
