//! Publishes a process context with libdatadog's `libdd-library-config` writer, for the
//! interoperability tests: `otel-ctx-libdd-publish` publishes a first context, updates it
//! once (so the reader sees an update, not only a publication), prints `ready`, and waits
//! until stdin closes.

use std::io::{Read, Write};

use libdd_library_config::otel_process_ctx;
use libdd_trace_protobuf::opentelemetry::proto::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList, ProcessContext,
};
use libdd_trace_protobuf::opentelemetry::proto::resource::v1::Resource;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        key_ref: 0,
    }
}

fn string(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.to_owned())
}

fn context(version: &str) -> ProcessContext {
    ProcessContext {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", string("libdd-interop")),
                kv("service.version", string(version)),
                kv("telemetry.sdk.language", string("rust")),
                kv("telemetry.sdk.name", string("libdatadog")),
                kv("interop.int", any_value::Value::IntValue(i64::MIN)),
                kv("interop.double", any_value::Value::DoubleValue(-2.25)),
                kv("interop.bool", any_value::Value::BoolValue(true)),
                kv(
                    "interop.bytes",
                    any_value::Value::BytesValue(vec![0xde, 0xad]),
                ),
                kv(
                    "interop.array",
                    any_value::Value::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(string("one")),
                            },
                            AnyValue {
                                value: Some(any_value::Value::IntValue(2)),
                            },
                        ],
                    }),
                ),
                kv(
                    "interop.kvlist",
                    any_value::Value::KvlistValue(KeyValueList {
                        values: vec![kv("nested", string("yes"))],
                    }),
                ),
            ],
            dropped_attributes_count: 0,
            entity_refs: vec![],
        }),
        extra_attributes: vec![
            kv("threadlocal.schema_version", string("tlsdesc_v1_dev")),
            kv(
                "threadlocal.attribute_key_map",
                any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(string("http.route")),
                    }],
                }),
            ),
        ],
    }
}

fn main() {
    if let Err(e) = otel_process_ctx::publish(&context("1.0.0")) {
        eprintln!("otel-ctx-libdd-publish: publish: {e}");
        std::process::exit(1);
    }
    if let Err(e) = otel_process_ctx::publish(&context("1.0.1")) {
        eprintln!("otel-ctx-libdd-publish: update: {e}");
        std::process::exit(1);
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    let _ = otel_process_ctx::unpublish();
}
