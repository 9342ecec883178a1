//! Attribute keys registered with `thread::register` reach the process context whichever
//! publisher the process uses: a standalone `process::Publisher` here (`process_global.rs`
//! and `thread_registry.rs` cover `process::global`). One test: the key map and the process
//! context are process-wide, so its steps depend on order.

mod process_support;

use otel_ctx_codec::proto::AnyValueView;
use otel_ctx_codec::threadlocal::SCHEMA_TLSDESC_V1_DEV;
use otel_ctx_writer::process::{global, Attributes, Publisher, Resource};
use otel_ctx_writer::thread::{register, register_all};
use process_support::*;

fn resource(version: &str) -> Resource {
    Resource::builder()
        .service_name("key-map")
        .service_version(version)
        .build()
        .expect("build the resource")
}

/// The schema version and key map published at `address`, read back by name, and the
/// timestamp they were published with.
fn published_key_map(address: usize) -> (Option<String>, Vec<String>, u64) {
    // SAFETY: the caller's publisher is alive and not changed during the read.
    let back = unsafe { read_back_published(address) }.expect("read back");
    let (schema_version, key_map) = back.key_map();
    (
        schema_version,
        key_map,
        back.header.monotonic_published_at_ns,
    )
}

#[test]
fn keys_registered_with_a_standalone_publisher_are_published() {
    let _serial = lock();
    let schema = Some(SCHEMA_TLSDESC_V1_DEV.to_owned());

    // A key registered before publishing is in the first publication.
    let route = register("http.route").expect("register before publishing");
    let extra = Attributes::new().with("deployment.slot", "blue");
    let mut publisher = Publisher::publish(resource("1"), extra).expect("publish");
    let address = publisher.address();
    let (first_schema, first_keys, first_at) = published_key_map(address);
    assert_eq!(
        (first_schema, first_keys),
        (schema.clone(), vec!["http.route".to_owned()])
    );

    // A key registered while the standalone publisher is live updates its context now.
    let method = register("http.method").expect("register while published");
    assert_eq!([route.index(), method.index()], [0, 1]);
    let (second_schema, second_keys, second_at) = published_key_map(address);
    assert_eq!(
        (second_schema, second_keys),
        (
            schema.clone(),
            vec!["http.route".to_owned(), "http.method".to_owned()]
        )
    );
    assert!(second_at > first_at, "registering updated the context");

    // Several at once: one update; known names keep their index.
    let [user, route_again] = register_all(["user.id", "http.route"]).expect("register_all");
    assert_eq!([user.index(), route_again.index()], [2, 0]);
    assert_eq!(
        published_key_map(address).1,
        ["http.route", "http.method", "user.id"]
    );

    // The publisher's own updates keep the key map and the caller's extra attributes.
    publisher
        .update_with(|resource, _| {
            resource.set("service.version", "2");
        })
        .expect("update");
    // SAFETY: `publisher` is alive and unchanged during the read.
    let back = unsafe { read_back_published(address) }.expect("read back");
    let view = back.view();
    assert_eq!(
        view.resource_value("service.version"),
        Some(AnyValueView::String("2"))
    );
    assert_eq!(
        view.attribute_value("deployment.slot"),
        Some(AnyValueView::String("blue"))
    );
    assert_eq!(
        published_key_map(address).1,
        ["http.route", "http.method", "user.id"]
    );
    publisher
        .update(resource("3"), Attributes::new())
        .expect("update with new attributes");
    assert_eq!(
        published_key_map(address).1,
        ["http.route", "http.method", "user.id"]
    );

    // The singleton: the global context cannot be published beside it...
    let err = global::publish(resource("global")).unwrap_err();
    assert_eq!(err.kind(), "already_published", "{err}");
    // ...and once the standalone one is gone, it is, with the same key map.
    publisher.unpublish().expect("unpublish");
    global::publish(resource("global")).expect("publish the global context");
    let address = global::with_publisher(Publisher::address).expect("published");
    let (global_schema, global_keys, _) = published_key_map(address);
    assert_eq!(
        (global_schema, global_keys),
        (
            schema,
            vec![
                "http.route".to_owned(),
                "http.method".to_owned(),
                "user.id".to_owned()
            ]
        )
    );
    global::unpublish().expect("unpublish the global context");
}
