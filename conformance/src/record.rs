//! `record.json`: thread-context records.

use otel_ctx_codec::record::RecordView;
use serde::{Deserialize, Serialize};

use crate::hex;
use crate::vectors::{self, LoadError, Vector};

/// The file of record vectors.
pub const FILE: &str = "record.json";

/// The decoded record, as `expected` writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordExpected {
    /// `trace_id`, 32 lowercase hex digits.
    pub trace_id: String,
    /// `span_id`, 16 lowercase hex digits.
    pub span_id: String,
    /// Whether `valid == 1`.
    pub valid: bool,
    /// `trace_flags`.
    pub trace_flags: u8,
    /// `attrs_data_size`.
    pub attrs_data_size: u16,
    /// Every complete entry of attrs_data, `[key_index, value]`, in order.
    pub entries: Vec<(u8, String)>,
    /// Whether attrs_data ends in an incomplete entry, which readers ignore.
    pub incomplete: bool,
    /// The entries a reader keeps: last occurrence of each key index, indexes outside the
    /// key map dropped, ordered by key index.
    pub attributes: Vec<(u8, String)>,
}

/// Loads `spec-vectors/record.json`.
pub fn load() -> Result<Vec<Vector<RecordExpected>>, LoadError> {
    let inputs = &["key_map_len", "max_record_size"];
    vectors::load(FILE, inputs, inputs)
}

/// Values are UTF-8 by the spec; the lossy conversion makes a codec that returned other
/// bytes show up as a mismatch (U+FFFD) rather than a panic.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses and resolves a record the way a reader does; an error is its kind.
pub fn run(vector: &Vector<RecordExpected>) -> Result<RecordExpected, &'static str> {
    let key_map_len = vector.inputs.key_map_len.unwrap_or(0);
    let max_record_size = vector.inputs.max_record_size.unwrap_or(usize::MAX);
    let r = RecordView::parse(&vector.bytes, max_record_size).map_err(|e| e.kind())?;
    let entries = r.entries().map(|(k, v)| (k, text(v))).collect();
    let resolved = r.resolve(key_map_len);
    Ok(RecordExpected {
        trace_id: hex::encode(&r.header.trace_id),
        span_id: hex::encode(&r.header.span_id),
        valid: r.header.is_valid(),
        trace_flags: r.header.trace_flags,
        attrs_data_size: r.header.attrs_data_size(),
        entries,
        incomplete: resolved.incomplete(),
        attributes: resolved.iter().map(|(k, v)| (k, text(v))).collect(),
    })
}
