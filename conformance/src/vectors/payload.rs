//! `payload.json`: the protobuf `ProcessContext` payload and its `threadlocal.*`
//! reference data.
//!
//! Values are the codec's owned model ([`OwnedValue`], [`OwnedKeyValue`],
//! [`Threadlocal`]); this module only adds the vectors' JSON shape of them, at the serde
//! boundary, and the vectors' equality ([`same_value`], [`same_values`]).

use otel_ctx_codec::owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal};
use otel_ctx_codec::proto::{Limits, ProcessContextView};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value as Json};

use crate::hex;
use crate::vectors::{self, LoadError, Vector};

/// The file of payload vectors.
pub const FILE: &str = "payload.json";

/// The decoded payload, as `expected` writes it.
///
/// Equality compares the attributes with [`same_values`], so doubles bit for bit.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadExpected {
    /// `resource.attributes` in wire order, every `Resource` occurrence concatenated.
    #[serde(with = "key_values_serde")]
    pub resource: Vec<OwnedKeyValue>,
    /// The extra attributes (field 2) in wire order.
    #[serde(with = "key_values_serde")]
    pub attributes: Vec<OwnedKeyValue>,
    /// The reference data, when a `threadlocal.*` key is in the extra attributes and it
    /// is well formed; written `{"schema_version": .., "key_map": ..}`, `null` for an
    /// absent key.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "threadlocal_serde"
    )]
    pub threadlocal: Option<Threadlocal>,
    /// The error kind, when a `threadlocal.*` key is there but malformed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threadlocal_error: Option<String>,
}

impl PartialEq for PayloadExpected {
    fn eq(&self, other: &Self) -> bool {
        same_values(&self.resource, &other.resource)
            && same_values(&self.attributes, &other.attributes)
            && self.threadlocal == other.threadlocal
            && self.threadlocal_error == other.threadlocal_error
    }
}

/// Whether two values are the same by the vectors' rule: doubles compare bit for bit (so
/// `-0.0` differs from `0.0`), except that any NaN equals any NaN; everything else, at
/// any depth, compares as usual.
///
/// [`OwnedValue`]'s own `==` is IEEE equality, under which `-0.0 == 0.0` and a NaN differs
/// from itself: the vectors pin down both, so they need this one.
pub fn same_value(a: &OwnedValue, b: &OwnedValue) -> bool {
    match (a, b) {
        (OwnedValue::Double(x), OwnedValue::Double(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (OwnedValue::Array(x), OwnedValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (OwnedValue::KvList(x), OwnedValue::KvList(y)) => same_values(x, y),
        // Neither side holds a double, so the derived equality is already exact.
        _ => a == b,
    }
}

/// Whether two key-value lists are the same, in order, keys equal and values by
/// [`same_value`].
pub fn same_values(a: &[OwnedKeyValue], b: &[OwnedKeyValue]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.key == y.key && same_value(&x.value, &y.value))
}

/// A key-value list as the vectors write it, `[{"key": "...", "value": V}, ...]`, for a
/// failure message.
///
/// `V` is an object with at most one member: `{"string": s}`, `{"bool": b}`,
/// `{"int": "<decimal>"}`, `{"double": n | "NaN" | "Infinity" | "-Infinity"}`,
/// `{"bytes": "<hex>"}`, `{"array": [V, ..]}`, `{"kvlist": [..]}`, or `{}` for
/// [`OwnedValue::Empty`].
pub fn to_json(kvs: &[OwnedKeyValue]) -> Json {
    Json::Array(kvs.iter().map(key_value_to_json).collect())
}

fn key_value_to_json(kv: &OwnedKeyValue) -> Json {
    Json::Object(Map::from_iter([
        ("key".to_owned(), Json::String(kv.key.clone())),
        ("value".to_owned(), value_to_json(&kv.value)),
    ]))
}

fn value_to_json(value: &OwnedValue) -> Json {
    let (kind, x) = match value {
        OwnedValue::Empty => return Json::Object(Map::new()),
        OwnedValue::String(s) => ("string", Json::String(s.clone())),
        OwnedValue::Bool(b) => ("bool", Json::Bool(*b)),
        OwnedValue::Int(i) => ("int", Json::String(i.to_string())),
        OwnedValue::Double(d) => (
            "double",
            match Number::from_f64(*d) {
                Some(n) => Json::Number(n),
                None if d.is_nan() => Json::String("NaN".into()),
                None if *d > 0.0 => Json::String("Infinity".into()),
                None => Json::String("-Infinity".into()),
            },
        ),
        OwnedValue::Bytes(b) => ("bytes", Json::String(hex::encode(b))),
        OwnedValue::Array(a) => ("array", Json::Array(a.iter().map(value_to_json).collect())),
        OwnedValue::KvList(kvs) => ("kvlist", to_json(kvs)),
    };
    Json::Object(Map::from_iter([(kind.to_owned(), x)]))
}

/// A `KeyValue` as the vectors write it, for the derive to refuse a missing or unknown
/// member; its value is turned into an [`OwnedValue`] at once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireKeyValue {
    key: String,
    value: Json,
}

fn key_values_from_json(json: Json) -> Result<Vec<OwnedKeyValue>, String> {
    let Json::Array(items) = json else {
        return Err(format!("a key-value list must be a JSON array, not {json}"));
    };
    items.into_iter().map(key_value_from_json).collect()
}

fn key_value_from_json(json: Json) -> Result<OwnedKeyValue, String> {
    let WireKeyValue { key, value } = serde_json::from_value(json).map_err(|e| e.to_string())?;
    Ok(OwnedKeyValue {
        key,
        value: value_from_json(value)?,
    })
}

fn value_from_json(json: Json) -> Result<OwnedValue, String> {
    let Json::Object(map) = json else {
        return Err(format!("a value must be a JSON object, not {json}"));
    };
    let mut members = map.into_iter();
    let Some((kind, x)) = members.next() else {
        return Ok(OwnedValue::Empty);
    };
    if let Some((second, _)) = members.next() {
        return Err(format!(
            "a value has one member, not `{kind}` and `{second}`"
        ));
    }
    let wrong = |what: &str| format!("`{kind}` must be {what}, not {x}");
    Ok(match kind.as_str() {
        "string" => OwnedValue::String(x.as_str().ok_or_else(|| wrong("a string"))?.to_owned()),
        "bool" => OwnedValue::Bool(x.as_bool().ok_or_else(|| wrong("a boolean"))?),
        "int" => OwnedValue::Int(
            x.as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| wrong("an int64 written as a decimal string"))?,
        ),
        "double" => OwnedValue::Double(match &x {
            Json::Number(n) => n.as_f64().ok_or_else(|| wrong("a number"))?,
            Json::String(s) if s == "NaN" => f64::NAN,
            Json::String(s) if s == "Infinity" => f64::INFINITY,
            Json::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
            _ => return Err(wrong("a number, \"NaN\", \"Infinity\" or \"-Infinity\"")),
        }),
        "bytes" => OwnedValue::Bytes(hex::decode(x.as_str().ok_or_else(|| wrong("hex"))?)?),
        "array" => match x {
            Json::Array(items) => OwnedValue::Array(
                items
                    .into_iter()
                    .map(value_from_json)
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(wrong("an array")),
        },
        "kvlist" => OwnedValue::KvList(key_values_from_json(x)?),
        other => return Err(format!("unknown value kind `{other}`")),
    })
}

/// serde `with` functions for a key-value list in the vectors' JSON shape.
mod key_values_serde {
    use otel_ctx_codec::owned::OwnedKeyValue;
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value as Json;

    pub fn serialize<S: Serializer>(kvs: &[OwnedKeyValue], s: S) -> Result<S::Ok, S::Error> {
        super::to_json(kvs).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OwnedKeyValue>, D::Error> {
        super::key_values_from_json(Json::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `threadlocal` as the vectors write it: the codec's `attribute_key_map` is `key_map`
/// there.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireThreadlocal {
    schema_version: Option<String>,
    key_map: Option<Vec<String>>,
}

/// serde `with` functions for the codec's [`Threadlocal`] through [`WireThreadlocal`].
mod threadlocal_serde {
    use otel_ctx_codec::owned::Threadlocal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::WireThreadlocal;

    pub fn serialize<S: Serializer>(tl: &Option<Threadlocal>, s: S) -> Result<S::Ok, S::Error> {
        tl.as_ref()
            .map(|t| WireThreadlocal {
                schema_version: t.schema_version.clone(),
                key_map: t.attribute_key_map.clone(),
            })
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Threadlocal>, D::Error> {
        Ok(
            Option::<WireThreadlocal>::deserialize(d)?.map(|w| Threadlocal {
                schema_version: w.schema_version,
                attribute_key_map: w.key_map,
            }),
        )
    }
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

/// Decodes a payload the way a reader does, then reads its reference data; an error is
/// its kind.
pub fn run(vector: &Vector<PayloadExpected>) -> Result<PayloadExpected, &'static str> {
    let view = ProcessContextView::decode(&vector.bytes, &limits(vector)).map_err(|e| e.kind())?;
    let (threadlocal, threadlocal_error) = match Threadlocal::from_view(&view) {
        Ok(t) if !t.is_present() => (None, None),
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(e.kind().to_owned())),
    };
    let OwnedProcessContext {
        resource,
        attributes,
    } = OwnedProcessContext::from_view(&view);
    Ok(PayloadExpected {
        resource,
        attributes,
        threadlocal,
        threadlocal_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<OwnedValue, String> {
        value_from_json(serde_json::from_str(json).map_err(|e| e.to_string())?)
    }

    #[test]
    fn values_read_and_write_their_json_shape() {
        let cases = [
            (r#"{}"#, OwnedValue::Empty),
            (r#"{"string":"x"}"#, OwnedValue::from("x")),
            (r#"{"bool":false}"#, OwnedValue::Bool(false)),
            (
                r#"{"int":"-9223372036854775808"}"#,
                OwnedValue::Int(i64::MIN),
            ),
            (r#"{"double":-0.0}"#, OwnedValue::Double(-0.0)),
            (r#"{"double":5e-324}"#, OwnedValue::Double(5e-324)),
            (
                r#"{"double":"Infinity"}"#,
                OwnedValue::Double(f64::INFINITY),
            ),
            (
                r#"{"double":"-Infinity"}"#,
                OwnedValue::Double(f64::NEG_INFINITY),
            ),
            (r#"{"double":"NaN"}"#, OwnedValue::Double(f64::NAN)),
            (r#"{"bytes":"00ff"}"#, OwnedValue::Bytes(vec![0, 0xff])),
            (
                r#"{"array":[{},{"int":"1"}]}"#,
                OwnedValue::Array(vec![OwnedValue::Empty, OwnedValue::Int(1)]),
            ),
            (
                r#"{"kvlist":[{"key":"k","value":{"bool":true}}]}"#,
                OwnedValue::KvList(vec![OwnedKeyValue::new("k", true)]),
            ),
        ];
        for (json, value) in cases {
            let read = parse(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert!(same_value(&read, &value), "{json} read as {read:?}");
            assert_eq!(value_to_json(&value).to_string(), json);
        }
    }

    #[test]
    fn malformed_values_are_refused() {
        for json in [
            r#"{"int":5}"#,
            r#"{"string":"a","bool":true}"#,
            r#"{"float":1.0}"#,
            r#"{"double":"nan"}"#,
            r#"{"bytes":"0"}"#,
            r#"{"array":{}}"#,
            r#"{"kvlist":[{"key":"k"}]}"#,
            r#"{"kvlist":[{"key":"k","value":{},"extra":1}]}"#,
            r#"{"kvlist":[{"key":"k","value":null}]}"#,
            r#"[]"#,
        ] {
            assert!(parse(json).is_err(), "{json} was accepted");
        }
    }

    #[test]
    fn doubles_compare_by_bits_and_nan_equals_nan() {
        let d = OwnedValue::Double;
        assert!(!same_value(&d(0.0), &d(-0.0)));
        assert!(same_value(&d(f64::NAN), &d(-f64::NAN)));
        assert!(same_value(
            &d(f64::NAN),
            &d(f64::from_bits(0x7ff0_0000_0000_0001))
        ));
        assert!(!same_value(&d(1.0), &OwnedValue::Int(1)));
        let nested = |x| {
            vec![OwnedKeyValue::new(
                "m",
                vec![OwnedKeyValue::new("a", OwnedValue::Array(vec![d(x)]))],
            )]
        };
        assert!(same_values(&nested(f64::NAN), &nested(f64::NAN)));
        assert!(!same_values(&nested(0.0), &nested(-0.0)));
        assert!(!same_values(&nested(1.0), &nested(1.0)[..0]));
        assert!(!same_values(
            &[OwnedKeyValue::new("a", 1)],
            &[OwnedKeyValue::new("b", 1)]
        ));
    }

    #[test]
    fn expected_reads_and_writes_its_json_shape() {
        let json = concat!(
            r#"{"resource":[{"key":"d","value":{"double":"NaN"}}],"#,
            r#""attributes":[{"key":"threadlocal.schema_version","value":{"string":"s"}}],"#,
            r#""threadlocal":{"schema_version":"s","key_map":null}}"#
        );
        let read: PayloadExpected = serde_json::from_str(json).unwrap();
        assert!(same_values(
            &read.resource,
            &[OwnedKeyValue::new("d", f64::NAN)]
        ));
        assert_eq!(
            read.threadlocal,
            Some(Threadlocal {
                schema_version: Some("s".into()),
                attribute_key_map: None,
            })
        );
        assert_eq!(read, read.clone());
        assert_eq!(serde_json::to_string(&read).unwrap(), json);

        // A missing key of the reference data reads as null.
        let read: PayloadExpected = serde_json::from_str(
            r#"{"resource":[],"attributes":[],"threadlocal":{"key_map":["a"]}}"#,
        )
        .unwrap();
        let tl = read.threadlocal.unwrap();
        assert_eq!(tl.schema_version, None);
        assert_eq!(tl.attribute_key_map, Some(vec!["a".to_owned()]));

        for bad in [
            r#"{"resource":[],"attributes":[],"extra":1}"#,
            r#"{"resource":[],"attributes":[],"threadlocal":{"attribute_key_map":null}}"#,
            r#"{"resource":[{"key":"k","value":{"int":1}}],"attributes":[]}"#,
            r#"{"resource":{},"attributes":[]}"#,
        ] {
            assert!(
                serde_json::from_str::<PayloadExpected>(bad).is_err(),
                "{bad} was accepted"
            );
        }
    }
}
