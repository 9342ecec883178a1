//! Lowercase hex: how the spec vectors, `otel-ctx` and profiles write ids and bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// Decodes an even number of hex digits (either case) into bytes.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("hex of odd length {}", text.len()));
    }
    text.as_bytes()
        .chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| {
            let digit = |c: u8| {
                char::from(c).to_digit(16).ok_or_else(|| {
                    format!("not a hex digit {:?} at offset {}", char::from(c), 2 * i)
                })
            };
            Ok((digit(pair[0])? << 4 | digit(pair[1])?) as u8)
        })
        .collect()
}

/// Encodes bytes as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use alloc::vec;

    #[test]
    fn round_trip_and_errors() {
        assert_eq!(decode("00ff7fA0"), Ok(vec![0x00, 0xff, 0x7f, 0xa0]));
        assert_eq!(encode(&[0x00, 0xff, 0x7f, 0xa0]), "00ff7fa0");
        assert!(decode("abc").is_err());
        assert!(decode("zz").is_err());
        assert_eq!(decode(""), Ok(vec![]));
    }
}
