//! `payload.json`: the protobuf `ProcessContext` payload and its `threadlocal.*`
//! reference data.

use otel_ctx_codec::proto::{AnyValueView, KeyValueView, Limits, ProcessContextView};
use otel_ctx_codec::threadlocal::ThreadlocalView;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number};

use crate::hex;
use crate::vectors::{self, LoadError, Vector};

/// The file of payload vectors.
pub const FILE: &str = "payload.json";

/// An `AnyValue`, written in JSON as an object with at most one member: `{"string": s}`,
/// `{"bool": b}`, `{"int": "<decimal>"}`, `{"double": n | "NaN" | "Infinity" |
/// "-Infinity"}`, `{"bytes": "<hex>"}`, `{"array": [..]}`, `{"kvlist": [..]}`, or `{}`.
///
/// Equality compares doubles bit for bit (so `-0.0 != 0.0`), except that any NaN equals
/// any NaN.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "serde_json::Value", into = "serde_json::Value")]
pub enum Value {
    /// No field of the oneof set (`{}`); also the value of a `KeyValue` without one.
    Empty,
    /// `string_value`.
    String(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(Vec<u8>),
    /// `array_value`.
    Array(Vec<Value>),
    /// `kvlist_value`.
    KvList(Vec<Kv>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Empty, Self::Empty) => true,
            (Self::String(a), Self::String(b)) => a == b,
            (Self::Bool(a), Self::Bool(b)) => a == b,
            (Self::Int(a), Self::Int(b)) => a == b,
            (Self::Double(a), Self::Double(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Self::Bytes(a), Self::Bytes(b)) => a == b,
            (Self::Array(a), Self::Array(b)) => a == b,
            (Self::KvList(a), Self::KvList(b)) => a == b,
            _ => false,
        }
    }
}

/// A `KeyValue`: `{"key": "...", "value": V}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value ([`Value::Empty`] when the `KeyValue` has none).
    pub value: Value,
}

impl TryFrom<serde_json::Value> for Value {
    type Error = String;

    fn try_from(json: serde_json::Value) -> Result<Self, String> {
        let serde_json::Value::Object(map) = json else {
            return Err(format!("a value must be a JSON object, not {json}"));
        };
        let mut members = map.into_iter();
        let Some((kind, x)) = members.next() else {
            return Ok(Self::Empty);
        };
        if let Some((second, _)) = members.next() {
            return Err(format!(
                "a value has one member, not `{kind}` and `{second}`"
            ));
        }
        let wrong = |what: &str| format!("`{kind}` must be {what}, not {x}");
        Ok(match kind.as_str() {
            "string" => Self::String(x.as_str().ok_or_else(|| wrong("a string"))?.to_owned()),
            "bool" => Self::Bool(x.as_bool().ok_or_else(|| wrong("a boolean"))?),
            "int" => Self::Int(
                x.as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| wrong("an int64 written as a decimal string"))?,
            ),
            "double" => Self::Double(match &x {
                serde_json::Value::Number(n) => n.as_f64().ok_or_else(|| wrong("a number"))?,
                serde_json::Value::String(s) if s == "NaN" => f64::NAN,
                serde_json::Value::String(s) if s == "Infinity" => f64::INFINITY,
                serde_json::Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
                _ => return Err(wrong("a number, \"NaN\", \"Infinity\" or \"-Infinity\"")),
            }),
            "bytes" => Self::Bytes(hex::decode(x.as_str().ok_or_else(|| wrong("hex"))?)?),
            "array" => Self::Array(serde_json::from_value(x).map_err(|e| e.to_string())?),
            "kvlist" => Self::KvList(serde_json::from_value(x).map_err(|e| e.to_string())?),
            other => return Err(format!("unknown value kind `{other}`")),
        })
    }
}

impl From<Value> for serde_json::Value {
    fn from(v: Value) -> Self {
        let (kind, x) = match v {
            Value::Empty => return Self::Object(Map::new()),
            Value::String(s) => ("string", Self::String(s)),
            Value::Bool(b) => ("bool", Self::Bool(b)),
            Value::Int(i) => ("int", Self::String(i.to_string())),
            Value::Double(d) => (
                "double",
                match Number::from_f64(d) {
                    Some(n) => Self::Number(n),
                    None if d.is_nan() => Self::String("NaN".into()),
                    None if d > 0.0 => Self::String("Infinity".into()),
                    None => Self::String("-Infinity".into()),
                },
            ),
            Value::Bytes(b) => ("bytes", Self::String(hex::encode(&b))),
            Value::Array(a) => (
                "array",
                Self::Array(a.into_iter().map(Self::from).collect()),
            ),
            Value::KvList(kvs) => (
                "kvlist",
                // Serializing plain data into a JSON value cannot fail.
                serde_json::to_value(kvs).unwrap_or(Self::Null),
            ),
        };
        Self::Object(Map::from_iter([(kind.to_owned(), x)]))
    }
}

/// The thread-context reference data found in the extra attributes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threadlocal {
    /// `threadlocal.schema_version`, or `null` when absent.
    pub schema_version: Option<String>,
    /// `threadlocal.attribute_key_map`, or `null` when absent.
    pub key_map: Option<Vec<String>>,
}

/// The decoded payload, as `expected` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadExpected {
    /// `resource.attributes` in wire order, every `Resource` occurrence concatenated.
    pub resource: Vec<Kv>,
    /// The extra attributes (field 2) in wire order.
    pub attributes: Vec<Kv>,
    /// The reference data, when a `threadlocal.*` key is in the extra attributes and it
    /// is well formed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threadlocal: Option<Threadlocal>,
    /// The error kind, when a `threadlocal.*` key is there but malformed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threadlocal_error: Option<String>,
}

/// Loads `spec-vectors/payload.json`.
pub fn load() -> Result<Vec<Vector<PayloadExpected>>, LoadError> {
    vectors::load(
        FILE,
        &["max_payload_size", "max_depth", "max_attributes"],
        &[],
    )
}

/// The decoder limits of a vector: its own, or the defaults (65536 / 16 / 2048).
pub fn limits(vector: &Vector<PayloadExpected>) -> Limits {
    let d = Limits::default();
    let i = &vector.inputs;
    Limits {
        max_payload_size: i.max_payload_size.map_or(d.max_payload_size, |l| {
            usize::try_from(l).unwrap_or(usize::MAX)
        }),
        max_depth: i.max_depth.unwrap_or(d.max_depth),
        max_attributes: i.max_attributes.unwrap_or(d.max_attributes),
    }
}

/// An owned copy of a decoded `AnyValue`.
pub fn value_of(v: &AnyValueView<'_>) -> Value {
    match v {
        AnyValueView::Empty => Value::Empty,
        AnyValueView::String(s) => Value::String((*s).to_owned()),
        AnyValueView::Bool(b) => Value::Bool(*b),
        AnyValueView::Int(i) => Value::Int(*i),
        AnyValueView::Double(d) => Value::Double(*d),
        AnyValueView::Bytes(b) => Value::Bytes(b.to_vec()),
        AnyValueView::Array(a) => Value::Array(a.iter().map(|e| value_of(&e)).collect()),
        AnyValueView::KvList(l) => Value::KvList(l.iter().map(|kv| kv_of(&kv)).collect()),
    }
}

/// An owned copy of a decoded `KeyValue`.
pub fn kv_of(kv: &KeyValueView<'_>) -> Kv {
    Kv {
        key: kv.key.to_owned(),
        value: value_of(&kv.value),
    }
}

/// Decodes a payload the way a reader does, then reads its reference data; an error is
/// its kind.
pub fn run(vector: &Vector<PayloadExpected>) -> Result<PayloadExpected, &'static str> {
    let view = ProcessContextView::decode(&vector.bytes, &limits(vector)).map_err(|e| e.kind())?;
    let (threadlocal, threadlocal_error) = match ThreadlocalView::from_context(&view) {
        Ok(t) if t.schema_version.is_none() && t.key_map.is_none() => (None, None),
        Ok(t) => (
            Some(Threadlocal {
                schema_version: t.schema_version.map(str::to_owned),
                key_map: t.key_map.map(|m| m.iter().map(str::to_owned).collect()),
            }),
            None,
        ),
        Err(e) => (None, Some(e.kind().to_owned())),
    };
    Ok(PayloadExpected {
        resource: view.resource().map(|kv| kv_of(&kv)).collect(),
        attributes: view.attributes().map(|kv| kv_of(&kv)).collect(),
        threadlocal,
        threadlocal_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Value, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn values_read_and_write_their_json_shape() {
        let cases = [
            (r#"{}"#, Value::Empty),
            (r#"{"string":"x"}"#, Value::String("x".into())),
            (r#"{"int":"-9223372036854775808"}"#, Value::Int(i64::MIN)),
            (r#"{"double":-0.0}"#, Value::Double(-0.0)),
            (
                r#"{"double":"-Infinity"}"#,
                Value::Double(f64::NEG_INFINITY),
            ),
            (r#"{"bytes":"00ff"}"#, Value::Bytes(vec![0, 0xff])),
            (
                r#"{"kvlist":[{"key":"k","value":{"bool":true}}]}"#,
                Value::KvList(vec![Kv {
                    key: "k".into(),
                    value: Value::Bool(true),
                }]),
            ),
        ];
        for (json, value) in cases {
            assert_eq!(parse(json), Ok(value.clone()), "{json}");
            assert_eq!(serde_json::to_string(&value).unwrap(), json);
        }
        assert_eq!(parse(r#"{"double":"NaN"}"#), Ok(Value::Double(f64::NAN)));
        assert_ne!(Value::Double(0.0), Value::Double(-0.0));
    }

    #[test]
    fn malformed_values_are_refused() {
        for json in [
            r#"{"int":5}"#,
            r#"{"string":"a","bool":true}"#,
            r#"{"float":1.0}"#,
            r#"{"double":"nan"}"#,
            r#"{"bytes":"0"}"#,
            r#"[]"#,
        ] {
            assert!(parse(json).is_err(), "{json} was accepted");
        }
    }
}
