//! `header_validate`: the process-context header and the thread-context record read
//! from arbitrary bytes.
//!
//! The same input is read as a header ([`ProcessContextHeader::parse`]) and as a record
//! ([`RecordView::parse`]), each under several limits, and every outcome must equal the
//! one a model of the spec's checks gives, error included. A header whose payload
//! follows it in the input also has that payload decoded and checked as in
//! [`crate::protobuf`]. A valid, complete record is encoded again and must give the
//! same bytes.

use otel_ctx_codec::attrs::{AttrsIter, ResolvedAttrs};
use otel_ctx_codec::header::{
    HeaderError, ProcessContextHeader, HEADER_SIZE, MAX_PAYLOAD_SIZE, SIGNATURE, VERSION,
};
use otel_ctx_codec::record::{
    encode_record, RecordError, RecordView, COMPACT_RECORD_SIZE, MAX_RECORD_SIZE,
    RECORD_HEADER_SIZE,
};
use zerocopy::IntoBytes;

/// Reads `data` as a header and as a record, and checks both.
pub fn check(data: &[u8]) {
    for max in [MAX_PAYLOAD_SIZE, 1, u32::MAX] {
        check_header(data, max);
    }
    for max in [
        MAX_RECORD_SIZE,
        COMPACT_RECORD_SIZE,
        RECORD_HEADER_SIZE,
        0,
        data.len(),
        usize::MAX,
    ] {
        check_record(data, max);
    }
}

fn field<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&data[at..at + N]);
    out
}

/// The spec's checks, in the order a reader makes them.
fn expected_header(data: &[u8], max: u32) -> Result<(), HeaderError> {
    if data.len() < HEADER_SIZE {
        return Err(HeaderError::Truncated { len: data.len() });
    }
    let signature: [u8; 8] = field(data, 0);
    let version = u32::from_ne_bytes(field(data, 8));
    let payload_size = u32::from_ne_bytes(field(data, 12));
    let published = u64::from_ne_bytes(field(data, 16));
    if signature != SIGNATURE {
        return Err(HeaderError::BadSignature(signature));
    }
    if version != VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    if published == 0 {
        return Err(HeaderError::BeingUpdated);
    }
    if payload_size == 0 {
        return Err(HeaderError::EmptyPayload);
    }
    if payload_size > max {
        return Err(HeaderError::PayloadTooLarge {
            size: payload_size,
            limit: max,
        });
    }
    Ok(())
}

fn check_header(data: &[u8], max: u32) {
    let got = ProcessContextHeader::parse(data, max);
    let expected = expected_header(data, max);
    assert_eq!(got.map(|_| ()), expected);
    match ProcessContextHeader::read(data) {
        Ok(header) => {
            assert_eq!(header.as_bytes(), &data[..HEADER_SIZE]);
            assert_eq!(header.validate(max), expected);
            let identity = header.check_identity();
            assert_eq!(
                identity.is_ok(),
                header.signature == SIGNATURE && header.version == VERSION
            );
            if expected.is_ok() && max == MAX_PAYLOAD_SIZE {
                assert_eq!(got, Ok(header));
                let size = header.payload_size as usize;
                if let Some(payload) = data.get(HEADER_SIZE..HEADER_SIZE + size) {
                    crate::protobuf::check(payload);
                }
            }
        }
        Err(e) => assert_eq!(e, HeaderError::Truncated { len: data.len() }),
    }
    if let Err(e) = got {
        assert!(!e.kind().is_empty() && !e.to_string().is_empty());
    }
}

fn expected_record(data: &[u8], max: usize) -> Result<&[u8], RecordError> {
    if data.len() < RECORD_HEADER_SIZE {
        return Err(RecordError::Truncated { len: data.len() });
    }
    let attrs_data_size = u16::from_ne_bytes(field(data, 26));
    let size = RECORD_HEADER_SIZE + usize::from(attrs_data_size);
    if size > max {
        return Err(RecordError::TooLarge { size, limit: max });
    }
    if size > data.len() {
        return Err(RecordError::AttrsPastEnd {
            attrs_data_size,
            available: data.len() - RECORD_HEADER_SIZE,
        });
    }
    Ok(&data[RECORD_HEADER_SIZE..size])
}

fn check_record(data: &[u8], max: usize) {
    let got = RecordView::parse(data, max);
    let expected = expected_record(data, max);
    let record = match (got, expected) {
        (Ok(record), Ok(attrs_data)) => {
            assert!(std::ptr::eq(record.attrs_data, attrs_data));
            record
        }
        (Err(g), Err(e)) => {
            assert_eq!(g, e);
            assert!(!g.kind().is_empty() && !g.to_string().is_empty());
            return;
        }
        (got, expected) => panic!("record {got:?}, expected {expected:?}"),
    };
    let header = record.header;
    assert_eq!(header.as_bytes(), &data[..RECORD_HEADER_SIZE]);
    assert_eq!(header.is_valid(), data[24] == 1);
    assert_eq!(header.ids_are_zero(), data[..24].iter().all(|&b| b == 0));
    assert_eq!(
        header.record_size(),
        RECORD_HEADER_SIZE + record.attrs_data.len()
    );
    assert_eq!(
        usize::from(header.attrs_data_size()),
        record.attrs_data.len()
    );
    assert!(record.entries().eq(AttrsIter::new(record.attrs_data)));
    let resolved = record.resolve(256);
    let direct = ResolvedAttrs::resolve(record.attrs_data, 256);
    assert!(resolved.iter().eq(direct.iter()));

    // A valid record whose attrs-data ends on a whole entry is what the encoder writes.
    let mut entries = record.entries();
    let attrs: Vec<(u8, &[u8])> = entries.by_ref().collect();
    if header.is_valid() && entries.remainder().is_empty() {
        let mut buf = vec![0u8; header.record_size()];
        let written = encode_record(
            &mut buf,
            header.trace_id,
            header.span_id,
            header.trace_flags,
            &attrs,
        );
        assert_eq!(written, Ok(header.record_size()));
        assert_eq!(&buf[..], &data[..header.record_size()]);
    }
}
