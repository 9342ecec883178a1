//! The JSON output of `otel-ctx`, written with serde: one struct per JSON object, its
//! fields in the order `cli/JSON.md` documents, so that the output keeps that order.
//! Attribute lists keep wire order too, which is why they have their own [`Serialize`].

use otel_ctx_reader::process::{OwnedKeyValue, OwnedValue};
use otel_ctx_reader::Snapshot;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// Writes `document` to stdout as compact JSON on one line.
pub fn print(document: &impl Serialize) -> Result<(), super::Failure> {
    let mut text = serde_json::to_string(document)
        .map_err(|e| super::Failure::Unusable(format!("cannot write the JSON document: {e}")))?;
    text.push('\n');
    super::out(&text)
}

/// Standard base64 with padding (RFC 4648, section 4).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A value: string, boolean, number, array, object (kvlist) or `{"bytes": "<base64>"}`;
/// `null` for an `AnyValue` with no field set.
pub struct Value<'a>(pub &'a OwnedValue);

/// The JSON form of a `bytes_value`.
#[derive(Serialize)]
struct Bytes {
    bytes: String,
}

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            OwnedValue::Empty => serializer.serialize_unit(),
            OwnedValue::String(s) => serializer.serialize_str(s),
            OwnedValue::Bool(b) => serializer.serialize_bool(*b),
            OwnedValue::Int(i) => serializer.serialize_i64(*i),
            OwnedValue::Double(d) => double(serializer, *d),
            OwnedValue::Bytes(b) => Bytes { bytes: base64(b) }.serialize(serializer),
            OwnedValue::Array(items) => serializer.collect_seq(items.iter().map(Value)),
            OwnedValue::KvList(kvs) => KvList(kvs).serialize(serializer),
        }
    }
}

/// A double as a number, which serde_json writes with a fraction or an exponent (`2.0`,
/// `1e20`) so that it reads back as a double. JSON has no NaN or infinities, so those
/// are the strings `"NaN"`, `"Infinity"` and `"-Infinity"`.
fn double<S: Serializer>(serializer: S, d: f64) -> Result<S::Ok, S::Error> {
    if d.is_nan() {
        serializer.serialize_str("NaN")
    } else if d == f64::INFINITY {
        serializer.serialize_str("Infinity")
    } else if d == f64::NEG_INFINITY {
        serializer.serialize_str("-Infinity")
    } else {
        serializer.serialize_f64(d)
    }
}

/// The items of `list` as an object would show them: one per key, where the key first
/// occurs, each the key's last occurrence (the one readers use). A payload may repeat a
/// key (the specification forbids it in the resource, but a reader cannot rely on that).
fn last_of_each_key<'a, T>(
    list: &'a [T],
    key: impl Fn(&T) -> &str + Copy + 'a,
) -> impl Iterator<Item = &'a T> + 'a {
    list.iter().enumerate().filter_map(move |(i, item)| {
        let k = key(item);
        if list[..i].iter().any(|earlier| key(earlier) == k) {
            return None;
        }
        list[i..].iter().rev().find(|later| key(later) == k)
    })
}

/// Key-value pairs as an object, in wire order; a repeated key appears once, where it
/// first occurs, with the value of its last occurrence.
pub struct KvList<'a>(pub &'a [OwnedKeyValue]);

impl Serialize for KvList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for kv in last_of_each_key(self.0, |kv| kv.key.as_str()) {
            map.serialize_entry(&kv.key, &Value(&kv.value))?;
        }
        map.end()
    }
}

/// String attributes (a thread context's) as an object, with the same rules as
/// [`KvList`].
pub struct StringPairs<'a>(pub &'a [(String, String)]);

impl Serialize for StringPairs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in last_of_each_key(self.0, |(key, _)| key.as_str()) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The `process_context` object of `show --json`.
#[derive(Serialize)]
pub struct ProcessContext<'a> {
    /// The mapping's name in `/proc/<pid>/maps`.
    pub mapping: String,
    /// The header's `version`.
    pub version: u32,
    /// The header's `monotonic_published_at_ns`.
    pub monotonic_published_at_ns: u64,
    /// The header's `payload_size`.
    pub payload_size: u32,
    /// The resource attributes.
    pub resource: KvList<'a>,
    /// The extra attributes (payload field 2).
    pub attributes: KvList<'a>,
}

impl<'a> ProcessContext<'a> {
    /// The object for one snapshot.
    pub fn new(s: &'a Snapshot) -> Self {
        Self {
            mapping: s.mapping.name.to_string(),
            version: s.version,
            monotonic_published_at_ns: s.monotonic_published_at_ns,
            payload_size: s.payload_size,
            resource: KvList(&s.context.resource),
            attributes: KvList(&s.context.attributes),
        }
    }
}

/// Every object key of the JSON text `raw`, in the order the text has them, the keys of
/// nested objects where they occur: what the tests compare to the order `JSON.md` shows,
/// since `serde_json::Value` (without `preserve_order`) sorts keys.
#[cfg(test)]
pub fn keys(raw: &str) -> Vec<String> {
    let bytes = raw.as_bytes();
    let mut keys = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while bytes[i] != b'"' {
            // An escape: the next byte cannot end the string.
            if bytes[i] == b'\\' {
                i += 1;
            }
            i += 1;
        }
        i += 1;
        if raw[i..].trim_start().starts_with(':') {
            keys.push(serde_json::from_str(&raw[start..i]).expect("a JSON string"));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: OwnedValue) -> OwnedKeyValue {
        OwnedKeyValue {
            key: key.into(),
            value,
        }
    }

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
            kv("a\"b", OwnedValue::String("x\ny\u{1}".into())),
            kv(
                "n",
                OwnedValue::Array(vec![
                    OwnedValue::Int(i64::MIN),
                    OwnedValue::Double(2.0),
                    OwnedValue::Double(0.25),
                    OwnedValue::Double(-3e20),
                    OwnedValue::Double(f64::NAN),
                    OwnedValue::Bool(false),
                    OwnedValue::Empty,
                    OwnedValue::Bytes(vec![1, 2, 3]),
                ]),
            ),
            kv("a\"b", OwnedValue::KvList(vec![])),
        ];
        let out = serde_json::to_string(&KvList(&kvs)).unwrap();
        assert_eq!(
            out,
            r#"{"a\"b":{},"n":[-9223372036854775808,2.0,0.25,-3e+20,"NaN",false,null,{"bytes":"AQID"}]}"#
        );
        let s = serde_json::to_string(&Value(&OwnedValue::String("x\ny\u{1}".into()))).unwrap();
        assert_eq!(s, r#""x\ny\u0001""#);
    }

    #[test]
    fn doubles_read_back_as_doubles() {
        for (d, text) in [
            (1.0, "1.0"),
            (-0.5, "-0.5"),
            (1e300, "1e+300"),
            (f64::INFINITY, "\"Infinity\""),
            (f64::NEG_INFINITY, "\"-Infinity\""),
        ] {
            let out = serde_json::to_string(&Value(&OwnedValue::Double(d))).unwrap();
            assert_eq!(out, text);
            if d.is_finite() {
                let back: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert!(back.is_f64(), "{out}");
                assert_eq!(back.as_f64(), Some(d));
            }
        }
    }

    #[test]
    fn kvlist_keeps_wire_order_and_the_last_value() {
        let kvs = vec![
            kv("z", OwnedValue::Int(1)),
            kv("a", OwnedValue::Int(2)),
            kv("m", OwnedValue::Int(3)),
            kv("a", OwnedValue::Int(4)),
            kv(
                "nested",
                OwnedValue::KvList(vec![
                    kv("y", OwnedValue::Bool(true)),
                    kv("b", OwnedValue::Empty),
                    kv("y", OwnedValue::Bool(false)),
                ]),
            ),
        ];
        let out = serde_json::to_string(&KvList(&kvs)).unwrap();
        assert_eq!(keys(&out), ["z", "a", "m", "nested", "y", "b"]);
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"z": 1, "a": 4, "m": 3, "nested": {"y": false, "b": null}})
        );
    }

    #[test]
    fn string_pairs_keep_order() {
        let pairs = [
            ("http.route".to_owned(), "/a".to_owned()),
            ("http.request.method".to_owned(), "GET".to_owned()),
            ("http.route".to_owned(), "/b".to_owned()),
        ];
        let out = serde_json::to_string(&StringPairs(&pairs)).unwrap();
        assert_eq!(out, r#"{"http.route":"/b","http.request.method":"GET"}"#);
    }

    #[test]
    fn process_context_shape() {
        let resource = [
            kv("service.name", OwnedValue::String("checkout".into())),
            kv("process.pid", OwnedValue::Int(4242)),
            kv("build.sha", OwnedValue::Bytes(vec![0xde, 0xad, 0xbe, 0xef])),
        ];
        let attributes = [
            kv(
                "threadlocal.schema_version",
                OwnedValue::String("tlsdesc_v1_dev".into()),
            ),
            kv(
                "threadlocal.attribute_key_map",
                OwnedValue::Array(vec![OwnedValue::String("http.route".into())]),
            ),
        ];
        let pc = ProcessContext {
            mapping: "/memfd:OTEL_CTX (deleted)".into(),
            version: 2,
            monotonic_published_at_ns: 8_123_456_789_012,
            payload_size: 412,
            resource: KvList(&resource),
            attributes: KvList(&attributes),
        };
        let out = serde_json::to_string(&pc).unwrap();
        assert_eq!(
            keys(&out),
            [
                "mapping",
                "version",
                "monotonic_published_at_ns",
                "payload_size",
                "resource",
                "service.name",
                "process.pid",
                "build.sha",
                "bytes",
                "attributes",
                "threadlocal.schema_version",
                "threadlocal.attribute_key_map",
            ]
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            serde_json::json!({
                "mapping": "/memfd:OTEL_CTX (deleted)",
                "version": 2,
                "monotonic_published_at_ns": 8_123_456_789_012_u64,
                "payload_size": 412,
                "resource": {
                    "service.name": "checkout",
                    "process.pid": 4242,
                    "build.sha": {"bytes": "3q2+7w=="}
                },
                "attributes": {
                    "threadlocal.schema_version": "tlsdesc_v1_dev",
                    "threadlocal.attribute_key_map": ["http.route"]
                }
            })
        );
    }

    #[test]
    fn keys_skips_values_and_escapes() {
        assert_eq!(
            keys(r#"{"a": "b:", "c\"": {"d" : ["e", "f\\"]}}"#),
            ["a", "c\"", "d"]
        );
    }
}
