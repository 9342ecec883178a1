//! Process-context writes of this crate: first publish (with the unpublish that lets it
//! repeat), update with a ~300-byte payload, update with a 256-name key map.
//! `process_publish_libdd.rs` measures the same operations with `libdd-library-config`
//! 5.0.1, in its own binary: both writers keep a process-wide singleton. Both publish the
//! same payload bytes (checked before measuring).
//!
//! This crate's [`Publisher`] takes its resource and attributes by value; libdd's `publish`
//! borrows a prost `ProcessContext`. Both benchmarks give each call a fresh copy of its
//! input, made outside the timed routine (`iter_batched`), and both time freeing it: the
//! publisher frees the previous resource and attributes inside `update` (and the last ones
//! in `unpublish`), libdd's caller frees its `ProcessContext` after `publish`. So the rows
//! time encoding, the protocol's writes and syscalls, and the caller's input going away.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use otel_ctx_writer::process::{Attributes, OwnedValue, Publisher, Resource};

#[path = "criterion_config.rs"]
mod criterion_config;
#[path = "process_inputs.rs"]
mod inputs;

const NAME: &str = "otel-ctx-writer";

fn resource() -> Resource {
    Resource::from_attributes(inputs::RESOURCE.iter().copied().collect())
}

fn key_map_attributes() -> Attributes {
    Attributes::new()
        .with(inputs::SCHEMA_KEY, inputs::SCHEMA_VERSION)
        .with(
            inputs::KEY_MAP_KEY,
            OwnedValue::string_array(inputs::key_map_names()),
        )
}

/// Publishes `resource` and `attributes`, and checks the payload is `expected`.
fn publish_checked(resource: Resource, attributes: Attributes, expected: &[u8]) -> Publisher {
    let publisher = match Publisher::publish(resource, attributes) {
        Ok(publisher) => publisher,
        Err(e) => panic!("publish: {e}"),
    };
    assert_eq!(
        publisher.payload(),
        expected,
        "the payload differs from the shared inputs"
    );
    publisher
}

fn publish_unpublish(c: &mut Criterion) {
    // Once outside the measurement: the payload is the one libdd publishes.
    drop(publish_checked(
        resource(),
        Attributes::new(),
        &inputs::resource_payload(),
    ));
    c.benchmark_group("process_publish_unpublish")
        .bench_function(NAME, |b| {
            b.iter_batched(
                resource,
                |resource| {
                    let publisher = Publisher::publish(black_box(resource), Attributes::new())
                        .expect("publish");
                    publisher.unpublish().expect("unpublish");
                },
                BatchSize::SmallInput,
            )
        });
}

fn update(c: &mut Criterion) {
    let mut publisher = publish_checked(resource(), Attributes::new(), &inputs::resource_payload());
    let mut group = c.benchmark_group("process_update");
    group.bench_function(format!("{NAME}/300B"), |b| {
        b.iter_batched(
            resource,
            |resource| {
                publisher
                    .update(black_box(resource), Attributes::new())
                    .expect("update")
            },
            BatchSize::SmallInput,
        )
    });
    publisher
        .update(resource(), key_map_attributes())
        .expect("update");
    assert_eq!(
        publisher.payload(),
        inputs::key_map_payload(),
        "the key-map payload differs from the shared inputs"
    );
    group.bench_function(format!("{NAME}/key_map_256"), |b| {
        b.iter_batched(
            || (resource(), key_map_attributes()),
            |(resource, attributes)| {
                publisher
                    .update(black_box(resource), black_box(attributes))
                    .expect("update")
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    publisher.unpublish().expect("unpublish");
}

criterion_group! {
    name = benches;
    config = criterion_config::config();
    targets = publish_unpublish, update
}
criterion_main!(benches);
