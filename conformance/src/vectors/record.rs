//! `record.json`: thread-context records.

use otel_ctx_codec::record::{RecordError, RecordHeader, RecordView, RECORD_HEADER_SIZE};
use serde::{Deserialize, Serialize};

use crate::hex;
use crate::vectors::{self, LoadError, Outcome, Vector};

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

/// Several readings, any one of which conforms: `{"either": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Either {
    /// The readings OTEP 4947 allows.
    pub either: Vec<RecordExpected>,
}

/// What a record vector's `expected` holds: the one reading the spec allows, or, where it
/// leaves the choice to the reader (a record over the reader's copy bound, a value that is
/// not UTF-8), each reading it allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RecordOutcome {
    /// The only conforming reading.
    One(RecordExpected),
    /// Any one of these conforms.
    Either(Either),
}

impl RecordOutcome {
    /// Whether `reading` conforms to this outcome.
    pub fn allows(&self, reading: &RecordExpected) -> bool {
        match self {
            Self::One(one) => one == reading,
            Self::Either(e) => e.either.contains(reading),
        }
    }
}

/// Loads `spec-vectors/record.json`.
pub fn load() -> Result<Vec<Vector<RecordOutcome>>, LoadError> {
    let inputs = &["key_map_len", "max_record_size"];
    vectors::load(FILE, inputs, inputs)
}

/// Values are UTF-8 by the spec, and the vectors show each byte that is not as U+FFFD: the
/// lossy conversion keeps such a value as a reader that keeps it would show it, and makes
/// a codec that returned other bytes show up as a mismatch rather than a panic.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Reads a record the way a reader that copies at most `max_record_size` bytes does (the
/// OpenTelemetry eBPF profiler copies 640): a record that fits is read whole; of a larger
/// one, the header and the attrs-data within the bound, whose last entry is then usually
/// cut short and ignored. OTEP 4947 only recommends the 640 bytes to writers, so a reader
/// does not refuse a larger record; the codec's [`RecordView::parse`] does
/// ([`RecordError::TooLarge`]), and its view is rebuilt here from the bounded copy.
fn read_bounded(bytes: &[u8], max_record_size: usize) -> Result<RecordView<'_>, RecordError> {
    match RecordView::parse(bytes, max_record_size) {
        Err(RecordError::TooLarge { .. }) => {
            let header = RecordHeader::read(bytes)?;
            let end = max_record_size.max(RECORD_HEADER_SIZE);
            let attrs_data =
                bytes
                    .get(RECORD_HEADER_SIZE..end)
                    .ok_or(RecordError::AttrsPastEnd {
                        attrs_data_size: header.attrs_data_size(),
                        available: bytes.len() - RECORD_HEADER_SIZE,
                    })?;
            Ok(RecordView { header, attrs_data })
        }
        read => read,
    }
}

/// Parses and resolves a record the way a reader does; an error is its kind.
pub fn run(vector: &Vector<RecordOutcome>) -> Result<RecordExpected, &'static str> {
    let key_map_len = vector.inputs.key_map_len.unwrap_or(0);
    let max_record_size = vector.inputs.max_record_size.unwrap_or(usize::MAX);
    let r = read_bounded(&vector.bytes, max_record_size).map_err(|e| e.kind())?;
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

/// Compares what [`run`] gave with the vector's outcome, as [`vectors::check`] does, a
/// reading being right when it is any one of those an `either` allows.
pub fn check(
    vector: &Vector<RecordOutcome>,
    actual: Result<RecordExpected, &str>,
) -> Result<(), String> {
    match (&vector.outcome, &actual) {
        (Outcome::Expected(outcome), Ok(reading)) if outcome.allows(reading) => Ok(()),
        _ => vectors::check(vector, actual.map(RecordOutcome::One)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::Inputs;

    fn reading(entries: &[(u8, &str)]) -> RecordExpected {
        let entries: Vec<(u8, String)> = entries.iter().map(|(k, v)| (*k, v.to_string())).collect();
        RecordExpected {
            trace_id: "01".repeat(16),
            span_id: "02".repeat(8),
            valid: true,
            trace_flags: 1,
            attrs_data_size: 0,
            entries: entries.clone(),
            incomplete: false,
            attributes: entries,
        }
    }

    fn vector(outcome: Outcome<RecordOutcome>) -> Vector<RecordOutcome> {
        Vector {
            name: "a_record".into(),
            description: "d.".into(),
            spec: "OTEP 4947 record: layout".into(),
            bytes: vec![],
            inputs: Inputs::default(),
            outcome,
        }
    }

    #[test]
    fn either_allows_each_of_its_readings_only() {
        let a = reading(&[(0, "a")]);
        let b = reading(&[(0, "a"), (1, "b")]);
        let c = reading(&[]);
        let v = vector(Outcome::Expected(RecordOutcome::Either(Either {
            either: vec![a.clone(), b.clone()],
        })));
        assert_eq!(check(&v, Ok(a.clone())), Ok(()));
        assert_eq!(check(&v, Ok(b)), Ok(()));
        let err = check(&v, Ok(c)).unwrap_err();
        assert!(err.contains("a_record") && err.contains("either"), "{err}");
        assert!(check(&v, Err("record_too_large")).is_err());
        let v = vector(Outcome::Expected(RecordOutcome::One(a.clone())));
        assert_eq!(check(&v, Ok(a)), Ok(()));
    }

    #[test]
    fn either_reads_from_json() {
        let one = serde_json::to_value(reading(&[(0, "a")])).unwrap();
        let either = serde_json::json!({ "either": [one.clone(), one.clone()] });
        assert!(matches!(
            serde_json::from_value::<RecordOutcome>(one).unwrap(),
            RecordOutcome::One(_)
        ));
        assert!(matches!(
            serde_json::from_value::<RecordOutcome>(either).unwrap(),
            RecordOutcome::Either(Either { either }) if either.len() == 2
        ));
        let typo = serde_json::json!({ "eitehr": [] });
        assert!(serde_json::from_value::<RecordOutcome>(typo).is_err());
    }

    #[test]
    fn a_record_over_the_bound_is_read_up_to_it() {
        let mut bytes = vec![0u8; RECORD_HEADER_SIZE];
        bytes[24] = 1;
        let attrs = [0, 3, b'G', b'E', b'T', 1, 4, b'/', b'a', b'p', b'i'];
        bytes[26..28].copy_from_slice(&(attrs.len() as u16).to_le_bytes());
        bytes.extend_from_slice(&attrs);
        // The bound cuts the second entry: the first is kept, the second ignored.
        let r = read_bounded(&bytes, RECORD_HEADER_SIZE + 8).unwrap();
        assert_eq!(r.entries().collect::<Vec<_>>(), [(0, &b"GET"[..])]);
        assert!(r.resolve(2).incomplete());
        assert_eq!(usize::from(r.header.attrs_data_size()), attrs.len());
        let whole = read_bounded(&bytes, 640).unwrap();
        assert_eq!(whole.entries().count(), 2);
        // A bound past the bytes there are: nothing to read.
        bytes.truncate(RECORD_HEADER_SIZE + 3);
        assert_eq!(
            read_bounded(&bytes, RECORD_HEADER_SIZE + 8).map_err(|e| e.kind()),
            Err("attrs_past_end")
        );
    }
}
