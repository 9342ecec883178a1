//! Inputs shared by `process_publish.rs` (this crate) and `process_publish_libdd.rs`
//! (`libdd-library-config` 5.0.1): both publish payloads of exactly the same bytes, which
//! each benchmark checks against the codec's encoding of these inputs before measuring.

use otel_ctx_codec::proto::{AnyValue, KeyValue, ProcessContext};
use otel_ctx_codec::threadlocal::{
    ATTRIBUTE_KEY_MAP_KEY, SCHEMA_TLSDESC_V1_DEV, SCHEMA_VERSION_KEY,
};

/// Resource attributes of every payload: a typical service, about 300 bytes encoded.
pub const RESOURCE: [(&str, &str); 8] = [
    ("service.name", "checkout"),
    ("service.version", "2.14.3"),
    (
        "service.instance.id",
        "0b6f1c5e-8d1f-4f7a-9c57-3d2f6f1a9e42",
    ),
    ("deployment.environment.name", "production"),
    ("telemetry.sdk.language", "rust"),
    ("telemetry.sdk.name", "opentelemetry"),
    ("telemetry.sdk.version", "0.31.0"),
    ("host.arch", "amd64"),
];

/// `threadlocal.schema_version` of the key-map payload.
pub const SCHEMA_VERSION: &str = SCHEMA_TLSDESC_V1_DEV;
/// Key of the schema version in the extra attributes.
pub const SCHEMA_KEY: &str = SCHEMA_VERSION_KEY;
/// Key of the key map in the extra attributes.
pub const KEY_MAP_KEY: &str = ATTRIBUTE_KEY_MAP_KEY;
/// Names in the key map: the most the specification allows.
pub const KEY_MAP_LEN: usize = 256;

/// The 256 names of the key map: `app.attribute.000` to `app.attribute.255`.
pub fn key_map_names() -> Vec<String> {
    (0..KEY_MAP_LEN)
        .map(|i| format!("app.attribute.{i:03}"))
        .collect()
}

/// The payload of [`RESOURCE`] with no extra attributes, encoded by the codec.
pub fn resource_payload() -> Vec<u8> {
    encode(&[])
}

/// The payload of [`RESOURCE`] with the key map of [`key_map_names`], encoded by the codec.
pub fn key_map_payload() -> Vec<u8> {
    let names = key_map_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    encode(&[
        KeyValue {
            key: SCHEMA_KEY,
            value: AnyValue::String(SCHEMA_VERSION),
        },
        KeyValue {
            key: KEY_MAP_KEY,
            value: AnyValue::StringArray(&names),
        },
    ])
}

fn encode(attributes: &[KeyValue<'_>]) -> Vec<u8> {
    let resource: Vec<KeyValue<'_>> = RESOURCE
        .iter()
        .map(|&(key, value)| KeyValue {
            key,
            value: AnyValue::String(value),
        })
        .collect();
    let context = ProcessContext {
        resource: &resource,
        attributes,
    };
    let mut payload = vec![0; context.encoded_len()];
    match context.encode(&mut payload) {
        Ok(len) => payload.truncate(len),
        Err(e) => panic!("the benchmark inputs do not encode: {e}"),
    }
    payload
}
