//! `header.json`: the 32-byte process-context header.

use otel_ctx_codec::header::{ProcessContextHeader, MAX_PAYLOAD_SIZE};
use serde::{Deserialize, Serialize};

use crate::vectors::{self, LoadError, Vector};

/// The file of header vectors.
pub const FILE: &str = "header.json";

/// The decoded header, as `expected` writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderExpected {
    /// The eight signature bytes as text (`OTEL_CTX` in every valid header).
    pub signature: String,
    /// `version`.
    pub version: u32,
    /// `payload_size`.
    pub payload_size: u32,
    /// `monotonic_published_at_ns`.
    #[serde(with = "u64_json")]
    pub monotonic_published_at_ns: u64,
    /// `payload`, the payload's address in the publisher.
    #[serde(with = "u64_json")]
    pub payload: u64,
}

/// Loads `spec-vectors/header.json`.
pub fn load() -> Result<Vec<Vector<HeaderExpected>>, LoadError> {
    vectors::load(FILE, &["max_payload_size"], &[])
}

/// Reads and validates a header the way a reader does, with the vector's
/// `max_payload_size` (65536 by default); an error is its kind.
pub fn run(vector: &Vector<HeaderExpected>) -> Result<HeaderExpected, &'static str> {
    // A limit beyond u32 admits every u32 payload_size.
    let limit = vector
        .inputs
        .max_payload_size
        .map_or(MAX_PAYLOAD_SIZE, |l| u32::try_from(l).unwrap_or(u32::MAX));
    let h = ProcessContextHeader::parse(&vector.bytes, limit).map_err(|e| e.kind())?;
    Ok(HeaderExpected {
        signature: String::from_utf8_lossy(&h.signature).into_owned(),
        version: h.version,
        payload_size: h.payload_size,
        monotonic_published_at_ns: h.monotonic_published_at_ns,
        payload: h.payload,
    })
}

/// u64 values in JSON: a number up to 2^53 - 1 (exact in a double, so in every JSON
/// library), a decimal string above.
pub mod u64_json {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The largest integer every JSON library reads exactly.
    pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(u64),
        Text(String),
    }

    /// Writes `value` as a number, or as a string when above [`MAX_SAFE_INTEGER`].
    pub fn serialize<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        if *value <= MAX_SAFE_INTEGER {
            value.serialize(s)
        } else {
            value.to_string().serialize(s)
        }
    }

    /// Reads a number up to [`MAX_SAFE_INTEGER`] or a decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Written::deserialize(d)? {
            Written::Number(n) if n <= MAX_SAFE_INTEGER => Ok(n),
            Written::Number(n) => Err(D::Error::custom(format!(
                "{n} is above 2^53 - 1: write it as the string \"{n}\""
            ))),
            Written::Text(t) => t
                .parse()
                .map_err(|_| D::Error::custom(format!("{t:?} is not a decimal u64"))),
        }
    }
}
