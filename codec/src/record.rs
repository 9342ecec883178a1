//! The thread-context record that `otel_thread_ctx_v1` points to.
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | `trace_id` | `[u8; 16]` |
//! | 16 | `span_id` | `[u8; 8]` |
//! | 24 | `valid` | `u8`, `1` = valid |
//! | 25 | `trace_flags` | `u8` |
//! | 26 | `attrs_data_size` | `u16`, host byte order |
//! | 28 | `attrs_data` | `attrs_data_size` bytes |
//!
//! Byte-packed, no padding; the record starts at a 2-aligned address.

use core::fmt;
use core::mem::{align_of, offset_of, size_of};

use zerocopy::byteorder::{NativeEndian, U16};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::attrs::{AttrsError, AttrsIter, AttrsWriter, ResolvedAttrs};

/// Size of the fixed part of a record, up to `attrs_data`.
pub const RECORD_HEADER_SIZE: usize = 28;
/// Recommended maximum size of a whole record; the eBPF profiler reads no more.
pub const MAX_RECORD_SIZE: usize = 640;
/// A record that fits one cache line.
pub const COMPACT_RECORD_SIZE: usize = 64;
/// Alignment a record's start address must have.
pub const RECORD_ALIGN: usize = 2;
/// Offset of `trace_id`.
pub const TRACE_ID_OFFSET: usize = offset_of!(RecordHeader, trace_id);
/// Offset of `span_id`.
pub const SPAN_ID_OFFSET: usize = offset_of!(RecordHeader, span_id);
/// Offset of `valid`.
pub const VALID_OFFSET: usize = offset_of!(RecordHeader, valid);
/// Offset of `trace_flags`.
pub const TRACE_FLAGS_OFFSET: usize = offset_of!(RecordHeader, trace_flags);
/// Offset of `attrs_data_size`.
pub const ATTRS_DATA_SIZE_OFFSET: usize = offset_of!(RecordHeader, attrs_data_size);
/// Offset of `attrs_data`.
pub const ATTRS_DATA_OFFSET: usize = RECORD_HEADER_SIZE;
/// The value of `valid` that marks a record readable.
pub const VALID: u8 = 1;

/// The fixed 28-byte part of a record.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct RecordHeader {
    /// W3C trace id; all zero when there is no trace.
    pub trace_id: [u8; 16],
    /// W3C span id.
    pub span_id: [u8; 8],
    /// `1` when the record may be read; any other value means ignore it.
    pub valid: u8,
    /// W3C trace flags; `0` when there are no ids.
    pub trace_flags: u8,
    /// Byte length of `attrs_data`.
    pub attrs_data_size: U16<NativeEndian>,
}

const _: () = {
    assert!(size_of::<RecordHeader>() == RECORD_HEADER_SIZE);
    assert!(align_of::<RecordHeader>() == 1);
    assert!(TRACE_ID_OFFSET == 0);
    assert!(SPAN_ID_OFFSET == 16);
    assert!(VALID_OFFSET == 24);
    assert!(TRACE_FLAGS_OFFSET == 25);
    assert!(ATTRS_DATA_SIZE_OFFSET == 26);
    assert!(ATTRS_DATA_OFFSET == 28);
    assert!(MAX_RECORD_SIZE - RECORD_HEADER_SIZE <= u16::MAX as usize);
};

/// What is wrong with record bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer than [`RECORD_HEADER_SIZE`] bytes.
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// `attrs_data_size` says more bytes than were given.
    AttrsPastEnd {
        /// The record's `attrs_data_size`.
        attrs_data_size: u16,
        /// Bytes available after the header.
        available: usize,
    },
    /// The record is larger than the reader's bound.
    TooLarge {
        /// `28 + attrs_data_size`.
        size: usize,
        /// The bound in force.
        limit: usize,
    },
    /// An attribute could not be encoded.
    Attrs(AttrsError),
    /// The buffer cannot hold even the 28-byte header.
    NoRoom {
        /// Bytes in the buffer.
        available: usize,
    },
}

impl RecordError {
    /// The language-neutral error kind used in `spec-vectors/`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Truncated { .. } => "truncated",
            Self::AttrsPastEnd { .. } => "attrs_past_end",
            Self::TooLarge { .. } => "record_too_large",
            Self::Attrs(e) => e.kind(),
            Self::NoRoom { .. } => "no_room",
        }
    }
}

impl From<AttrsError> for RecordError {
    fn from(e: AttrsError) -> Self {
        Self::Attrs(e)
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { len } => {
                write!(
                    f,
                    "record truncated: {len} of {RECORD_HEADER_SIZE} header bytes"
                )
            }
            Self::AttrsPastEnd {
                attrs_data_size,
                available,
            } => write!(
                f,
                "attrs_data_size is {attrs_data_size} but only {available} bytes follow the header"
            ),
            Self::TooLarge { size, limit } => {
                write!(f, "record of {size} bytes is over the {limit}-byte bound")
            }
            Self::Attrs(e) => e.fmt(f),
            Self::NoRoom { available } => write!(
                f,
                "a record needs at least {RECORD_HEADER_SIZE} bytes, the buffer has {available}"
            ),
        }
    }
}

impl core::error::Error for RecordError {}

impl RecordHeader {
    /// Copies the header out of the first 28 bytes of `bytes`.
    pub fn read(bytes: &[u8]) -> Result<Self, RecordError> {
        Self::read_from_prefix(bytes)
            .map(|(h, _)| h)
            .map_err(|_| RecordError::Truncated { len: bytes.len() })
    }

    /// Whether `valid == 1`.
    pub const fn is_valid(&self) -> bool {
        self.valid == VALID
    }

    /// `attrs_data_size` as a number.
    pub fn attrs_data_size(&self) -> u16 {
        self.attrs_data_size.get()
    }

    /// `28 + attrs_data_size`: the bytes a reader copies.
    pub fn record_size(&self) -> usize {
        RECORD_HEADER_SIZE + usize::from(self.attrs_data_size())
    }

    /// Whether trace and span ids are both zero (no trace).
    pub fn ids_are_zero(&self) -> bool {
        self.trace_id == [0; 16] && self.span_id == [0; 8]
    }
}

/// A record read from bytes: the header and the attrs-data it declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The fixed part.
    pub header: RecordHeader,
    /// Exactly `attrs_data_size` bytes.
    pub attrs_data: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Reads a record from `bytes` (its start), refusing records over `max_record_size`.
    /// `valid` is not checked: see [`RecordHeader::is_valid`].
    pub fn parse(bytes: &'a [u8], max_record_size: usize) -> Result<Self, RecordError> {
        let header = RecordHeader::read(bytes)?;
        let size = header.record_size();
        if size > max_record_size {
            return Err(RecordError::TooLarge {
                size,
                limit: max_record_size,
            });
        }
        let available = bytes.len() - RECORD_HEADER_SIZE;
        let attrs_data = bytes
            .get(RECORD_HEADER_SIZE..size)
            .ok_or(RecordError::AttrsPastEnd {
                attrs_data_size: header.attrs_data_size(),
                available,
            })?;
        Ok(Self { header, attrs_data })
    }

    /// The raw entries, in order, stopping at an incomplete one.
    pub fn entries(&self) -> AttrsIter<'a> {
        AttrsIter::new(self.attrs_data)
    }

    /// The entries resolved against a key map of `key_map_len` names.
    pub fn resolve(&self, key_map_len: usize) -> ResolvedAttrs<'a> {
        ResolvedAttrs::resolve(self.attrs_data, key_map_len)
    }
}

/// Writes a valid record (`valid = 1`) into `buf` and returns its size. On error `buf`
/// is left unchanged.
pub fn encode_record(
    buf: &mut [u8],
    trace_id: [u8; 16],
    span_id: [u8; 8],
    trace_flags: u8,
    attrs: &[(u8, &[u8])],
) -> Result<usize, RecordError> {
    let available = buf.len();
    if available < RECORD_HEADER_SIZE {
        return Err(RecordError::NoRoom { available });
    }
    let needed: usize = RECORD_HEADER_SIZE
        + attrs
            .iter()
            .map(|(_, v)| crate::attrs::entry_len(v))
            .sum::<usize>();
    for (_, v) in attrs {
        if v.len() > crate::attrs::MAX_VALUE_LEN {
            return Err(AttrsError::ValueTooLong { len: v.len() }.into());
        }
    }
    if needed > available || needed - RECORD_HEADER_SIZE > usize::from(u16::MAX) {
        return Err(AttrsError::NoRoom {
            needed: needed - RECORD_HEADER_SIZE,
            available: available - RECORD_HEADER_SIZE,
        }
        .into());
    }
    let (head, tail) = buf.split_at_mut(RECORD_HEADER_SIZE);
    let mut writer = AttrsWriter::new(tail);
    for (k, v) in attrs {
        writer.push(*k, v)?;
    }
    let size = writer.len();
    let header = RecordHeader {
        trace_id,
        span_id,
        valid: VALID,
        trace_flags,
        attrs_data_size: U16::new(size as u16),
    };
    head.copy_from_slice(header.as_bytes());
    Ok(RECORD_HEADER_SIZE + size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse() {
        let mut buf = [0u8; MAX_RECORD_SIZE];
        let n = encode_record(&mut buf, [1; 16], [2; 8], 1, &[(0, b"GET"), (1, b"/a")]).unwrap();
        assert_eq!(n, 28 + 5 + 4);
        let r = RecordView::parse(&buf[..n], MAX_RECORD_SIZE).unwrap();
        assert!(r.header.is_valid());
        assert_eq!(r.header.trace_flags, 1);
        assert_eq!(r.resolve(2).get(1), Some(&b"/a"[..]));
        assert_eq!(buf[26..28], 9u16.to_ne_bytes());
    }

    #[test]
    fn errors() {
        assert_eq!(
            RecordView::parse(&[0; 27], MAX_RECORD_SIZE),
            Err(RecordError::Truncated { len: 27 })
        );
        let mut b = [0u8; 30];
        b[26..28].copy_from_slice(&5u16.to_ne_bytes());
        assert_eq!(
            RecordView::parse(&b, MAX_RECORD_SIZE).map_err(|e| e.kind()),
            Err("attrs_past_end")
        );
        assert_eq!(
            RecordView::parse(&b, 30).map_err(|e| e.kind()),
            Err("record_too_large")
        );
        let mut small = [0u8; 30];
        assert_eq!(
            encode_record(&mut small, [0; 16], [0; 8], 0, &[(0, b"abc")]).map_err(|e| e.kind()),
            Err("no_room")
        );
        assert_eq!(small, [0u8; 30]);
    }
}
