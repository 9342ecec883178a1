//! The process-context header: 32 bytes at the start of the `OTEL_CTX` mapping.
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | `signature` | `[u8; 8]`, exactly `OTEL_CTX` |
//! | 8 | `version` | `u32`, `2` |
//! | 12 | `payload_size` | `u32` |
//! | 16 | `monotonic_published_at_ns` | `u64`, `CLOCK_BOOTTIME`; `0` while being changed |
//! | 24 | `payload` | `u64`, address of the payload in the publisher |
//!
//! All fields are in the host's byte order.

use core::fmt;
use core::mem::{offset_of, size_of};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The eight signature bytes, not NUL-terminated.
pub const SIGNATURE: [u8; 8] = *b"OTEL_CTX";
/// The header version this crate reads and writes.
pub const VERSION: u32 = 2;
/// Size of the header in bytes.
pub const HEADER_SIZE: usize = 32;
/// Largest `payload_size` readers accept (the OpenTelemetry eBPF profiler's bound).
pub const MAX_PAYLOAD_SIZE: u32 = 65536;
/// The name of the memfd and of the anonymous mapping.
pub const MAPPING_NAME: &str = "OTEL_CTX";

/// The process-context header exactly as it lies in memory.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct ProcessContextHeader {
    /// Exactly [`SIGNATURE`].
    pub signature: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// Byte length of the encoded payload.
    pub payload_size: u32,
    /// `CLOCK_BOOTTIME` nanoseconds at publication; `0` means "being changed, do not read".
    pub monotonic_published_at_ns: u64,
    /// Address of the payload in the publisher's address space.
    pub payload: u64,
}

const _: () = {
    assert!(size_of::<ProcessContextHeader>() == HEADER_SIZE);
    assert!(offset_of!(ProcessContextHeader, signature) == 0);
    assert!(offset_of!(ProcessContextHeader, version) == 8);
    assert!(offset_of!(ProcessContextHeader, payload_size) == 12);
    assert!(offset_of!(ProcessContextHeader, monotonic_published_at_ns) == 16);
    assert!(offset_of!(ProcessContextHeader, payload) == 24);
};

/// Offset of `monotonic_published_at_ns`, the field a reader re-reads to detect changes.
pub const TIMESTAMP_OFFSET: usize = offset_of!(ProcessContextHeader, monotonic_published_at_ns);

/// What is wrong with a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than [`HEADER_SIZE`] bytes.
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// The first eight bytes are not `OTEL_CTX`.
    BadSignature([u8; 8]),
    /// A version other than [`VERSION`].
    UnsupportedVersion(u32),
    /// `monotonic_published_at_ns` is 0: the writer is changing the context.
    BeingUpdated,
    /// `payload_size` is 0.
    EmptyPayload,
    /// `payload_size` is over the reader's limit.
    PayloadTooLarge {
        /// The header's `payload_size`.
        size: u32,
        /// The limit in force.
        limit: u32,
    },
}

impl HeaderError {
    /// The language-neutral error kind used in `spec-vectors/`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Truncated { .. } => "truncated",
            Self::BadSignature(_) => "bad_signature",
            Self::UnsupportedVersion(_) => "unsupported_version",
            Self::BeingUpdated => "being_updated",
            Self::EmptyPayload => "empty_payload",
            Self::PayloadTooLarge { .. } => "payload_too_large",
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { len } => {
                write!(f, "header truncated: {len} of {HEADER_SIZE} bytes")
            }
            Self::BadSignature(sig) => {
                write!(f, "bad signature {:02x?}, expected \"OTEL_CTX\"", sig)
            }
            Self::UnsupportedVersion(v) => {
                write!(
                    f,
                    "unsupported header version {v}, this reader knows {VERSION}"
                )
            }
            Self::BeingUpdated => f.write_str(
                "monotonic_published_at_ns is 0: the publisher is changing the context, read again",
            ),
            Self::EmptyPayload => f.write_str("payload_size is 0"),
            Self::PayloadTooLarge { size, limit } => {
                write!(f, "payload_size {size} is over the limit of {limit} bytes")
            }
        }
    }
}

impl core::error::Error for HeaderError {}

impl ProcessContextHeader {
    /// A header for a new publication; the timestamp is left 0 (written last).
    pub const fn new(payload_size: u32, payload: u64) -> Self {
        Self {
            signature: SIGNATURE,
            version: VERSION,
            payload_size,
            monotonic_published_at_ns: 0,
            payload,
        }
    }

    /// Copies a header out of the first 32 bytes of `bytes`, without validating it.
    pub fn read(bytes: &[u8]) -> Result<Self, HeaderError> {
        Self::read_from_prefix(bytes)
            .map(|(h, _)| h)
            .map_err(|_| HeaderError::Truncated { len: bytes.len() })
    }

    /// Checks the signature and the version: the mapping is a process context and may be
    /// cached. Says nothing of the timestamp or payload, which change on every update.
    pub fn check_identity(&self) -> Result<(), HeaderError> {
        if self.signature != SIGNATURE {
            return Err(HeaderError::BadSignature(self.signature));
        }
        if self.version != VERSION {
            return Err(HeaderError::UnsupportedVersion(self.version));
        }
        Ok(())
    }

    /// Checks everything a reader must check before copying the payload: identity,
    /// a non-zero timestamp, and `payload_size` in `1..=max_payload_size`.
    pub fn validate(&self, max_payload_size: u32) -> Result<(), HeaderError> {
        self.check_identity()?;
        if self.monotonic_published_at_ns == 0 {
            return Err(HeaderError::BeingUpdated);
        }
        if self.payload_size == 0 {
            return Err(HeaderError::EmptyPayload);
        }
        if self.payload_size > max_payload_size {
            return Err(HeaderError::PayloadTooLarge {
                size: self.payload_size,
                limit: max_payload_size,
            });
        }
        Ok(())
    }

    /// [`read`](Self::read) then [`validate`](Self::validate).
    pub fn parse(bytes: &[u8], max_payload_size: u32) -> Result<Self, HeaderError> {
        let header = Self::read(bytes)?;
        header.validate(max_payload_size)?;
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ProcessContextHeader {
        let mut h = ProcessContextHeader::new(10, 0x1000);
        h.monotonic_published_at_ns = 5;
        h
    }

    #[test]
    fn round_trip_bytes() {
        let h = good();
        let bytes = h.as_bytes();
        assert_eq!(&bytes[..8], b"OTEL_CTX");
        assert_eq!(ProcessContextHeader::parse(bytes, MAX_PAYLOAD_SIZE), Ok(h));
    }

    #[test]
    fn each_error() {
        let check = |h: ProcessContextHeader| {
            ProcessContextHeader::parse(h.as_bytes(), MAX_PAYLOAD_SIZE).map_err(|e| e.kind())
        };
        let mut h = good();
        h.signature[7] = b'x';
        assert_eq!(check(h), Err("bad_signature"));
        let mut h = good();
        h.version = 3;
        assert_eq!(check(h), Err("unsupported_version"));
        let mut h = good();
        h.monotonic_published_at_ns = 0;
        assert_eq!(check(h), Err("being_updated"));
        let mut h = good();
        h.payload_size = 0;
        assert_eq!(check(h), Err("empty_payload"));
        let mut h = good();
        h.payload_size = MAX_PAYLOAD_SIZE + 1;
        assert_eq!(check(h), Err("payload_too_large"));
        assert_eq!(
            ProcessContextHeader::parse(&[0; 31], MAX_PAYLOAD_SIZE),
            Err(HeaderError::Truncated { len: 31 })
        );
    }
}
