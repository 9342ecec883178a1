//! The thread-context reference data (OTEP 4947, publication step 1) is in the process
//! context as soon as it is published through `process::global`, before any attribute key
//! is registered: a process that attaches thread contexts without attributes announces
//! them too, so readers look for the TLS slot. One test: the key map is process-wide and
//! must still be empty here, so nothing else in this binary registers a key.

mod process_support;

use otel_ctx_codec::threadlocal::{ThreadlocalView, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{self, ThreadContext};
use process_support::*;

/// The schema version and key map of the global context, read back by name.
fn published_reference_data() -> (Option<String>, Option<Vec<String>>) {
    let back = global::with_publisher(|publisher| {
        // SAFETY: the publisher is alive and the global lock is held for the whole read.
        unsafe { read_back_published(publisher.address()) }.expect("read back")
    })
    .expect("a context is published");
    let view = back.view();
    assert!(
        view.resource()
            .all(|kv| !kv.key.starts_with("threadlocal.")),
        "threadlocal.* keys stay out of the resource"
    );
    let threadlocal = ThreadlocalView::from_context(&view).expect("well-formed reference data");
    (
        threadlocal.schema_version.map(str::to_owned),
        threadlocal
            .key_map
            .map(|map| map.iter().map(str::to_owned).collect()),
    )
}

#[test]
fn publish_and_attach_without_keys_announce_thread_contexts() {
    let _serial = lock();
    let resource = Resource::builder()
        .service_name("reference-data")
        .build()
        .expect("build the resource");
    global::publish(resource).expect("publish");

    // Three threads attach contexts with ids only: no attribute, so no key is registered.
    let threads: Vec<_> = (1..=3u8)
        .map(|n| {
            std::thread::spawn(move || {
                let context = ThreadContext::new([n; 16], [n; 8], 0x01, &[]).expect("context");
                assert!(context.attach().is_none(), "nothing attached before");
                assert!(thread::is_attached());
                assert_eq!(thread::attached_attr_count().unwrap(), 0);
                drop(thread::detach());
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("the attaching thread");
    }
    assert!(thread::registered_keys().is_empty(), "no key registered");

    assert_eq!(
        published_reference_data(),
        (Some(SCHEMA_TLSDESC_V1_DEV.to_owned()), Some(Vec::new())),
        "threadlocal.schema_version and an empty threadlocal.attribute_key_map"
    );
    global::unpublish().expect("unpublish");
}
