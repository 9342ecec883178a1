//! The JSON output of `otel-ctx`, written by hand so that objects keep wire order. The
//! format is documented in `reader-linux/JSON.md`.

use std::fmt::Write as _;

use otel_ctx_reader::{OwnedKeyValue, OwnedValue, Snapshot};

/// Appends `s` as a JSON string.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `s` as a JSON string, or `null`.
pub fn opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}

/// Standard base64 with padding (RFC 4648, section 4).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Appends a value: string, boolean, number, array, object (kvlist) or
/// `{"bytes": "<base64>"}`; `null` for an `AnyValue` with no field set. A double that JSON
/// cannot hold (NaN, infinities) is written as the string `"NaN"`, `"Infinity"` or
/// `"-Infinity"`.
pub fn value(out: &mut String, v: &OwnedValue) {
    match v {
        OwnedValue::Empty => out.push_str("null"),
        OwnedValue::String(s) => string(out, s),
        OwnedValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        OwnedValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        OwnedValue::Double(d) => double(out, *d),
        OwnedValue::Bytes(b) => {
            out.push_str("{\"bytes\": ");
            string(out, &base64(b));
            out.push('}');
        }
        OwnedValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(out, item);
            }
            out.push(']');
        }
        OwnedValue::KvList(kvs) => object(out, kvs),
    }
}

fn double(out: &mut String, d: f64) {
    if d.is_nan() {
        out.push_str("\"NaN\"");
    } else if d.is_infinite() {
        out.push_str(if d > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else if d == d.trunc() {
        // Keep a fraction or an exponent so the number reads back as a double.
        if d.abs() < 1e15 {
            let _ = write!(out, "{d:.1}");
        } else {
            let _ = write!(out, "{d:e}");
        }
    } else {
        let _ = write!(out, "{d}");
    }
}

/// Appends key-value pairs as an object. Each key appears once, where it first occurs,
/// with the value of its last occurrence (the value readers use).
pub fn object(out: &mut String, kvs: &[OwnedKeyValue]) {
    out.push('{');
    let mut first = true;
    for (i, kv) in kvs.iter().enumerate() {
        if kvs[..i].iter().any(|earlier| earlier.key == kv.key) {
            continue;
        }
        let last = kvs[i..]
            .iter()
            .rev()
            .find(|later| later.key == kv.key)
            .map_or(&kv.value, |later| &later.value);
        if !first {
            out.push_str(", ");
        }
        first = false;
        string(out, &kv.key);
        out.push_str(": ");
        value(out, last);
    }
    out.push('}');
}

/// The `process_context` object of `show --json`.
pub fn process_context(out: &mut String, s: &Snapshot) {
    out.push_str("{\"mapping\": ");
    string(out, &s.mapping.name.to_string());
    let _ = write!(
        out,
        ", \"version\": {}, \"monotonic_published_at_ns\": {}, \"payload_size\": {}, \"resource\": ",
        s.version, s.monotonic_published_at_ns, s.payload_size
    );
    object(out, &s.context.resource);
    out.push_str(", \"attributes\": ");
    object(out, &s.context.attributes);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn values_and_escapes() {
        let kvs = vec![
            OwnedKeyValue {
                key: "a\"b".into(),
                value: OwnedValue::String("x\ny\u{1}".into()),
            },
            OwnedKeyValue {
                key: "n".into(),
                value: OwnedValue::Array(vec![
                    OwnedValue::Int(i64::MIN),
                    OwnedValue::Double(2.0),
                    OwnedValue::Double(0.25),
                    OwnedValue::Double(-3e20),
                    OwnedValue::Double(f64::NAN),
                    OwnedValue::Bool(false),
                    OwnedValue::Empty,
                    OwnedValue::Bytes(vec![1, 2, 3]),
                ]),
            },
            OwnedKeyValue {
                key: "a\"b".into(),
                value: OwnedValue::KvList(vec![]),
            },
        ];
        let mut out = String::new();
        object(&mut out, &kvs);
        assert_eq!(
            out,
            r#"{"a\"b": {}, "n": [-9223372036854775808, 2.0, 0.25, -3e20, "NaN", false, null, {"bytes": "AQID"}]}"#
        );
        let mut s = String::new();
        string(&mut s, "x\ny\u{1}");
        assert_eq!(s, r#""x\ny\u0001""#);
    }
}
