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

/// Bytes shown as lowercase hex (`format!("{}", Hex(&id))`), without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex<'a>(pub &'a [u8]);

impl core::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Encodes bytes as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    // Writing to a String cannot fail.
    let _ = write!(out, "{}", Hex(bytes));
    out
}

/// Encodes as many of `bytes` as fit into `buf` (two digits each) as lowercase hex, and
/// returns the digits written: for a caller that must not allocate.
pub fn encode_into<'b>(bytes: &[u8], buf: &'b mut [u8]) -> &'b str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let n = bytes.len().min(buf.len() / 2);
    for (pair, &b) in buf.chunks_exact_mut(2).zip(&bytes[..n]) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    // Only ASCII digits were written.
    core::str::from_utf8(&buf[..2 * n]).unwrap_or("")
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
        let mut buf = [0u8; 5];
        assert_eq!(encode_into(&[0xab, 0x01, 0xff], &mut buf), "ab01");
        assert_eq!(alloc::format!("{}", Hex(&[0x0f, 0xf0])), "0ff0");
    }
}
