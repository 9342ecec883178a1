//! The operations of `process_publish.rs`, with `libdd-library-config` 5.0.1's process
//! context writer (`otel_process_ctx::publish` publishes, or updates once published;
//! `unpublish` withdraws). Same payload bytes as `process_publish.rs`, checked before
//! measuring. Its own binary: libdd's writer is a process-wide singleton.
//!
//! As in `process_publish.rs`, each call gets a fresh copy of its input, made outside the
//! timed routine, and freeing that input is timed: this crate's `Publisher` frees the
//! previous resource and attributes inside `update` and `unpublish`; libdd's caller frees
//! the `ProcessContext` it built once `publish` returns.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use libdd_library_config::otel_process_ctx;
use libdd_trace_protobuf::opentelemetry::proto::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, ProcessContext,
};
use libdd_trace_protobuf::opentelemetry::proto::resource::v1::Resource;
use prost::Message;

#[path = "criterion_config.rs"]
mod criterion_config;
#[path = "process_inputs.rs"]
mod inputs;

const NAME: &str = "libdd-library-config";

fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

fn string(s: &str) -> Option<AnyValue> {
    Some(string_value(s))
}

fn kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value,
        key_ref: 0,
    }
}

fn context(extra_attributes: Vec<KeyValue>) -> ProcessContext {
    ProcessContext {
        resource: Some(Resource {
            attributes: inputs::RESOURCE
                .iter()
                .map(|&(key, value)| kv(key, string(value)))
                .collect(),
            dropped_attributes_count: 0,
            entity_refs: vec![],
        }),
        extra_attributes,
    }
}

fn key_map_context() -> ProcessContext {
    let names = inputs::key_map_names();
    context(vec![
        kv(inputs::SCHEMA_KEY, string(inputs::SCHEMA_VERSION)),
        kv(
            inputs::KEY_MAP_KEY,
            Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: names.iter().map(|name| string_value(name)).collect(),
                })),
            }),
        ),
    ])
}

fn publish_unpublish(c: &mut Criterion) {
    let context = context(vec![]);
    assert_eq!(
        context.encode_to_vec(),
        inputs::resource_payload(),
        "the payload differs from the shared inputs"
    );
    c.benchmark_group("process_publish_unpublish")
        .bench_function(NAME, |b| {
            b.iter_batched(
                || context.clone(),
                |context| {
                    otel_process_ctx::publish(black_box(&context)).expect("publish");
                    otel_process_ctx::unpublish().expect("unpublish");
                    drop(context);
                },
                BatchSize::SmallInput,
            )
        });
}

fn update(c: &mut Criterion) {
    let context = context(vec![]);
    let key_map_context = key_map_context();
    assert_eq!(
        key_map_context.encode_to_vec(),
        inputs::key_map_payload(),
        "the key-map payload differs from the shared inputs"
    );
    // The first call publishes; every later one follows the update protocol.
    otel_process_ctx::publish(&context).expect("publish");
    let mut group = c.benchmark_group("process_update");
    for (id, context) in [("300B", &context), ("key_map_256", &key_map_context)] {
        group.bench_function(format!("{NAME}/{id}"), |b| {
            b.iter_batched(
                || context.clone(),
                |context| {
                    otel_process_ctx::publish(black_box(&context)).expect("update");
                    drop(context);
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    otel_process_ctx::unpublish().expect("unpublish");
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = publish_unpublish, update
}
criterion_main!(benches);
