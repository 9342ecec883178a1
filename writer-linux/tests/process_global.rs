//! The process-wide context (`process::global`) and the thread-context reference data.

mod process_support;

use otel_ctx_codec::proto::AnyValueView;
use otel_ctx_codec::threadlocal::{MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_writer::process::{global, Error, OwnedValue, Publisher, Resource};
use process_support::*;

fn resource(version: &str) -> Resource {
    Resource::builder()
        .service_name("global")
        .service_version(version)
        .build()
        .expect("build the resource")
}

/// Reads the global context back by name.
fn read_global() -> ReadBack {
    global::with_publisher(|publisher| {
        // SAFETY: the publisher is alive and the global lock is held for the whole read.
        unsafe { read_back_published(publisher.address()) }.expect("read back")
    })
    .expect("a context is published")
}

// One test: the global state lives for the whole process, so its steps depend on order.
#[test]
fn global_publish_reference_data_update_unpublish() {
    let _serial = lock();
    assert!(!global::is_published());
    assert_eq!(
        global::update(|_, _| {}).unwrap_err(),
        Error::NotPublished,
        "update before publish"
    );

    // Reference data set before publishing is published with the context.
    global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route"]).unwrap();
    assert!(
        !global::is_published(),
        "setting reference data does not publish"
    );
    global::publish(resource("1")).expect("publish");
    assert!(global::is_published());
    let first = read_global();
    assert_eq!(
        first.key_map(),
        (
            Some(SCHEMA_TLSDESC_V1_DEV.to_string()),
            vec!["http.route".to_string()]
        )
    );
    assert!(
        first
            .view()
            .resource_value("threadlocal.attribute_key_map")
            .is_none(),
        "reference data stays out of the resource"
    );

    // Registering a key updates the published context.
    global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user.id"]).unwrap();
    let second = read_global();
    assert!(second.header.monotonic_published_at_ns > first.header.monotonic_published_at_ns);
    assert_eq!(second.key_map().1, ["http.route", "user.id"]);

    // The key map is append-only and bounded.
    let err = global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &["user.id"]).unwrap_err();
    assert_eq!(
        err,
        Error::KeyMapNotAppendOnly {
            index: 0,
            published: "http.route".to_string(),
            given: Some("user.id".to_string()),
        }
    );
    let err =
        global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route"]).unwrap_err();
    assert_eq!(err.kind(), "key_map_not_append_only", "{err}");
    let names: Vec<String> = (0..=MAX_KEY_MAP_LEN).map(|i| format!("k{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &names).unwrap_err(),
        Error::KeyMapTooLong {
            len: MAX_KEY_MAP_LEN + 1
        }
    );
    let unchanged = read_global();
    assert_eq!(
        unchanged.header, second.header,
        "refused changes publish nothing"
    );

    // The caller's extra attributes and the resource change through `update`; a
    // `threadlocal.*` key set by the caller is replaced by the reference data.
    global::update(|resource, extra| {
        resource.set("service.version", "2");
        extra.set("deployment.slot", "blue");
        extra.set("threadlocal.schema_version", "bogus");
    })
    .expect("update");
    let third = read_global();
    let view = third.view();
    assert_eq!(
        view.resource_value("service.version"),
        Some(AnyValueView::String("2"))
    );
    assert_eq!(
        view.attribute_value("deployment.slot"),
        Some(AnyValueView::String("blue"))
    );
    assert_eq!(third.key_map().0.as_deref(), Some(SCHEMA_TLSDESC_V1_DEV));
    let schema_keys = view
        .attributes()
        .filter(|kv| kv.key == "threadlocal.schema_version")
        .count();
    assert_eq!(schema_keys, 1, "extra attribute keys stay unique");

    // publish again = update with a new resource (the context is a singleton).
    let address = global::with_publisher(Publisher::address).unwrap();
    global::publish(resource("3")).expect("publish again");
    assert_eq!(global::with_publisher(Publisher::address), Some(address));
    let fourth = read_global();
    assert_eq!(
        fourth.view().resource_value("service.version"),
        Some(AnyValueView::String("3"))
    );
    assert_eq!(
        fourth.view().attribute_value("deployment.slot"),
        Some(AnyValueView::String("blue"))
    );

    // While the global context is published, a second publisher is refused.
    let other = Publisher::publish(resource("x"), Default::default());
    assert_eq!(other.unwrap_err().kind(), "already_published");

    global::unpublish().expect("unpublish");
    assert!(!global::is_published());
    assert_eq!(context_mappings(), [], "mapping gone");
    global::unpublish().expect("unpublishing twice is fine");

    // Reference data and extra attributes are kept for the next publish.
    global::publish(resource("4")).expect("publish after unpublish");
    let fifth = read_global();
    assert_eq!(fifth.key_map().1, ["http.route", "user.id"]);
    assert_eq!(
        OwnedValue::from(fifth.view().attribute_value("deployment.slot").unwrap()),
        OwnedValue::from("blue")
    );

    // In a forked child the parent's context counts as not published.
    let outcome = in_child(|| {
        if global::is_published() {
            return Err("the child sees the parent's context as published".to_string());
        }
        match global::update(|_, _| {}) {
            Err(Error::NotPublished) => {}
            other => return Err(format!("update in the child: {other:?}")),
        }
        global::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user.id", "c"])
            .map_err(|e| format!("reference data in the child: {e}"))?;
        global::publish(resource("child")).map_err(|e| format!("publish in the child: {e}"))?;
        // Read at its address: under qemu-user the child also has the parent's mapping.
        let back = global::with_publisher(|publisher| {
            // SAFETY: the publisher is alive and the global lock is held for the read.
            unsafe { read_context(publisher.address()) }
        })
        .ok_or("not published in the child")??;
        if back.key_map().1 != ["http.route", "user.id", "c"] {
            return Err(format!("child key map {:?}", back.key_map()));
        }
        global::unpublish().map_err(|e| format!("unpublish in the child: {e}"))?;
        Ok(ChildOutcome::Passed)
    });
    assert_eq!(outcome, Ok(ChildOutcome::Passed));
    let after_fork = read_global();
    assert_eq!(
        after_fork.header, fifth.header,
        "the parent's context is intact"
    );
    global::unpublish().expect("unpublish");
}
