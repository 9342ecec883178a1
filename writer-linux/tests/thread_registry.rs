//! The attribute-key registry: same name same key, append-only, at most 256 names, and
//! the key map published in the process context's extra attributes. One test, because the
//! registry and the process context are process-wide.

use otel_ctx_codec::proto::{Limits, ProcessContextView};
use otel_ctx_codec::threadlocal::{ThreadlocalView, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{self, register, register_all, registered_keys, ThreadContext};

/// The key map and schema version in the currently published payload.
fn published_key_map() -> (Option<String>, Vec<String>) {
    let payload = global::with_publisher(|p| p.payload().to_vec()).expect("published");
    let view = ProcessContextView::decode(&payload, &Limits::default()).expect("decodes");
    assert!(
        view.resource()
            .all(|kv| !kv.key.starts_with("threadlocal.")),
        "threadlocal.* keys stay out of the resource"
    );
    let tl = ThreadlocalView::from_context(&view).expect("reference data is well-formed");
    let names = tl
        .key_map
        .map(|m| m.iter().map(str::to_owned).collect())
        .unwrap_or_default();
    (tl.schema_version.map(str::to_owned), names)
}

#[test]
fn registry_hands_out_stable_keys_and_publishes_the_key_map() {
    // Before any context is published, registration keeps the key map for the publish.
    let route = register("http.route").unwrap();
    assert_eq!(route.index(), 0);
    assert_eq!(register("http.route").unwrap(), route);

    let resource = Resource::builder()
        .service_name("thread-registry-test")
        .build()
        .unwrap();
    global::publish(resource).unwrap();
    assert_eq!(
        published_key_map(),
        (
            Some(SCHEMA_TLSDESC_V1_DEV.to_owned()),
            vec!["http.route".to_owned()]
        )
    );

    // New names are appended and published; known ones keep their index.
    let [method, route_again, user, method_again] =
        register_all(["http.method", "http.route", "user.id", "http.method"]).unwrap();
    assert_eq!(
        [method.index(), route_again.index(), user.index()],
        [1, 0, 2]
    );
    assert_eq!(method_again, method);
    assert_eq!(
        published_key_map().1,
        ["http.route", "http.method", "user.id"]
    );

    // Keys registered from several threads at once are all distinct and all published.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| register(&format!("attr.{t}.{i}")).unwrap().index())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut indexes: Vec<u8> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (3..43).collect::<Vec<u8>>());
    let published = published_key_map().1;
    assert_eq!(published, registered_keys());
    assert_eq!(published.len(), 43);

    // Keys are used in records like any other.
    let ctx = ThreadContext::new([1; 16], [2; 8], 1, &[(route, "/a"), (user, "u")]).unwrap();
    ctx.attach();
    thread::append(method, "GET").unwrap();
    assert_eq!(thread::attached_attr_count().unwrap(), 3);
    drop(thread::detach());

    // Up to 256 names; the 257th is refused and nothing changes.
    for i in 43..256 {
        assert_eq!(register(&format!("fill.{i}")).unwrap().index(), i as u8);
    }
    let err = register("one.too.many").unwrap_err();
    assert_eq!(err.kind(), "too_many_keys");
    assert!(err.to_string().contains("256"));
    assert_eq!(
        register("http.method").unwrap(),
        method,
        "known names still resolve"
    );
    let published = published_key_map().1;
    assert_eq!(published.len(), 256);
    assert_eq!(published, registered_keys());
    assert!(!published.iter().any(|n| n == "one.too.many"));

    global::unpublish().unwrap();
}
