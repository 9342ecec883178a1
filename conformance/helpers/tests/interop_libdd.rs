//! Interoperability with libdatadog's `libdd-library-config` 5.0.1, both directions:
//! its writer publishes in a helper process and this project's reader reads it; this
//! project's writer publishes in this process and its reader decodes it.

use std::process::{Command, Stdio};

use libdd_library_config::otel_process_ctx::ProcessContextSelfReader;
use libdd_trace_protobuf::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
use otel_ctx_reader::process::{OwnedKeyValue, OwnedValue};
use otel_ctx_reader::ProcessContextReader;
use otel_ctx_writer::process::{Attributes, Publisher, Resource};

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

#[test]
fn their_writer_our_reader() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_otel-ctx-libdd-publish"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let line = bounded::Lines::new("otel-ctx-libdd-publish", child.stdout.take().unwrap())
        .line("its `ready`", bounded::DEADLINE);
    assert_eq!(line.trim(), "ready");

    let result = ProcessContextReader::open(child.id()).and_then(|mut r| r.read());
    drop(child.stdin.take());
    let what = "otel-ctx-libdd-publish, its stdin closed,";
    let status = bounded::wait(&mut child, what, bounded::DEADLINE);
    let s = result.unwrap();
    assert!(status.success(), "{status}");

    assert_eq!(s.version, 2);
    assert!(s.monotonic_published_at_ns > 0);
    let ctx = &s.context;
    // The helper updated once: the reader sees the second version.
    assert_eq!(ctx.service_name(), Some("libdd-interop"));
    assert_eq!(ctx.service_version(), Some("1.0.1"));
    let expect = |key: &str, value: OwnedValue| {
        assert_eq!(ctx.resource_value(key), Some(&value), "{key}");
    };
    expect(
        "telemetry.sdk.name",
        OwnedValue::String("libdatadog".into()),
    );
    expect("interop.int", OwnedValue::Int(i64::MIN));
    expect("interop.double", OwnedValue::Double(-2.25));
    expect("interop.bool", OwnedValue::Bool(true));
    expect("interop.bytes", OwnedValue::Bytes(vec![0xde, 0xad]));
    expect(
        "interop.array",
        OwnedValue::Array(vec![OwnedValue::String("one".into()), OwnedValue::Int(2)]),
    );
    expect(
        "interop.kvlist",
        OwnedValue::KvList(vec![OwnedKeyValue {
            key: "nested".into(),
            value: OwnedValue::String("yes".into()),
        }]),
    );
    assert_eq!(ctx.resource.len(), 10);
    let tl = s.threadlocal().unwrap();
    assert_eq!(tl.schema_version.as_deref(), Some("tlsdesc_v1_dev"));
    assert_eq!(tl.attribute_key_map, Some(vec!["http.route".to_owned()]));
}

fn string_of(kv: &KeyValue) -> Option<&str> {
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn value_of<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

#[test]
fn our_writer_their_reader() {
    let resource = Resource::builder()
        .service_name("otel-ctx-interop")
        .service_version("3.1.4")
        .deployment_environment_name("interop")
        .attribute("interop.int", -5_i64)
        .attribute("interop.double", 1.5)
        .attribute("interop.bytes", OwnedValue::Bytes(vec![1, 2, 3]))
        .attribute(
            "interop.kvlist",
            OwnedValue::KvList(vec![OwnedKeyValue::new("k", "v")]),
        )
        .build()
        .unwrap();
    let extra = Attributes::new().with("interop.extra", OwnedValue::string_array(["a", "b"]));
    let mut publisher = Publisher::publish(resource, extra).unwrap();

    let reader = ProcessContextSelfReader::new().expect("their reader finds our mapping");
    let first = reader.read().expect("their reader decodes our payload");
    let attrs = &first.resource.as_ref().expect("a resource").attributes;
    let service = attrs
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(string_of);
    assert_eq!(service, Some("otel-ctx-interop"));
    assert_eq!(
        value_of(attrs, "interop.int"),
        Some(&any_value::Value::IntValue(-5))
    );
    assert_eq!(
        value_of(attrs, "interop.double"),
        Some(&any_value::Value::DoubleValue(1.5))
    );
    assert_eq!(
        value_of(attrs, "interop.bytes"),
        Some(&any_value::Value::BytesValue(vec![1, 2, 3]))
    );
    match value_of(attrs, "interop.kvlist") {
        Some(any_value::Value::KvlistValue(list)) => {
            assert_eq!(list.values.len(), 1);
            assert_eq!(list.values[0].key, "k");
            assert_eq!(string_of(&list.values[0]), Some("v"));
        }
        other => panic!("interop.kvlist is {other:?}"),
    }
    assert!(attrs.iter().any(|kv| kv.key == "service.instance.id"));
    match value_of(&first.extra_attributes, "interop.extra") {
        Some(any_value::Value::ArrayValue(array)) => assert_eq!(array.values.len(), 2),
        other => panic!("interop.extra is {other:?}"),
    }

    // An update is visible to their reader too.
    publisher
        .update_with(|resource, _| {
            resource.set("service.version", "3.1.5");
        })
        .unwrap();
    let second = reader.read().expect("their reader decodes the update");
    let attrs = &second.resource.as_ref().expect("a resource").attributes;
    let version = attrs
        .iter()
        .find(|kv| kv.key == "service.version")
        .and_then(string_of);
    assert_eq!(version, Some("3.1.5"));
    publisher.unpublish().unwrap();
    assert!(
        reader.read().is_err(),
        "their reader sees the unpublication"
    );
}
