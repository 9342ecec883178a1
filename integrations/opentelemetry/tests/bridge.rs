//! The SDK's Resource as this process's context (read back with the reader, as another
//! process would), and `attach` seen through the thread's `otel_thread_ctx_v1` slot.

use std::thread as std_thread;

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use otel_ctx_opentelemetry::{
    attach, attach_with_attributes, publish_resource, to_owned_value, ProcessContextProcessor,
};
use otel_ctx_reader::ProcessContextReader;
use otel_ctx_writer::process::OwnedValue;
use otel_ctx_writer::thread::{attached_record_address, Key, ThreadContext};

mod support;

use support::{remote, seen};

#[test]
fn values_keep_their_types() {
    assert_eq!(to_owned_value(&Value::Bool(true)), OwnedValue::Bool(true));
    assert_eq!(to_owned_value(&Value::I64(-3)), OwnedValue::Int(-3));
    assert_eq!(to_owned_value(&Value::F64(1.5)), OwnedValue::Double(1.5));
    assert_eq!(
        to_owned_value(&Value::from("s")),
        OwnedValue::String("s".into())
    );
    assert_eq!(
        to_owned_value(&Value::Array(Array::I64(vec![1, 2]))),
        OwnedValue::Array(vec![OwnedValue::Int(1), OwnedValue::Int(2)])
    );
    assert_eq!(
        to_owned_value(&Value::Array(Array::Bool(vec![false]))),
        OwnedValue::Array(vec![OwnedValue::Bool(false)])
    );
    assert_eq!(
        to_owned_value(&Value::Array(Array::F64(vec![0.25]))),
        OwnedValue::Array(vec![OwnedValue::Double(0.25)])
    );
    assert_eq!(
        to_owned_value(&Value::Array(Array::String(vec![StringValue::from("a")]))),
        OwnedValue::Array(vec![OwnedValue::String("a".into())])
    );
}

/// One test for the process context: it is a singleton of the test process.
#[test]
fn the_provider_resource_is_published_and_republished_as_the_same_instance() {
    let processor = ProcessContextProcessor::new();
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "bridge-test"),
            KeyValue::new("service.version", "1.2.3"),
            KeyValue::new("example.enabled", true),
            KeyValue::new("example.workers", 4_i64),
            KeyValue::new("example.ratio", 0.5),
            KeyValue::new(
                "example.zones",
                Value::Array(Array::String(vec!["a".into(), "b".into()])),
            ),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor.clone())
        .build();
    assert_eq!(processor.last_error(), None);

    let pid = std::process::id();
    let mut reader = ProcessContextReader::open(pid).expect("a context is published");
    let snapshot = reader.read().unwrap();
    let context = &snapshot.context;
    assert_eq!(context.service_name(), Some("bridge-test"));
    assert_eq!(
        context.resource_value("service.version"),
        Some(&OwnedValue::String("1.2.3".into()))
    );
    assert_eq!(
        context.resource_value("example.enabled"),
        Some(&OwnedValue::Bool(true))
    );
    assert_eq!(
        context.resource_value("example.workers"),
        Some(&OwnedValue::Int(4))
    );
    assert_eq!(
        context.resource_value("example.ratio"),
        Some(&OwnedValue::Double(0.5))
    );
    assert_eq!(
        context.resource_value("example.zones"),
        Some(&OwnedValue::Array(vec![
            OwnedValue::String("a".into()),
            OwnedValue::String("b".into())
        ]))
    );
    let instance = context
        .resource_value("service.instance.id")
        .cloned()
        .expect("filled in");

    // Publishing again (by hand, a new version) updates the same context and instance.
    let next = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "bridge-test"),
            KeyValue::new("service.version", "1.2.4"),
        ])
        .build();
    publish_resource(&next).unwrap();
    let snapshot = reader.read().unwrap();
    assert_eq!(
        snapshot.context.resource_value("service.version"),
        Some(&OwnedValue::String("1.2.4".into()))
    );
    assert_eq!(
        snapshot.context.resource_value("service.instance.id"),
        Some(&instance)
    );
    drop(provider);
}

#[test]
fn attach_puts_the_span_context_in_the_slot_until_the_guard_drops() {
    std_thread::spawn(|| {
        assert_eq!(seen(), None);
        {
            let _guard = attach(&remote(0x11, 0x22, 0x01));
            assert_eq!(seen(), Some(([0x11; 16], [0x22; 8], 0x01, vec![])));
            {
                let _inner = attach_with_attributes(
                    &remote(0x33, 0x44, 0x00),
                    &[(Key::from_index(0), "/inner")],
                );
                assert_eq!(
                    seen(),
                    Some(([0x33; 16], [0x44; 8], 0x00, vec![(0, "/inner".into())]))
                );
            }
            assert_eq!(seen(), Some(([0x11; 16], [0x22; 8], 0x01, vec![])));
        }
        assert_eq!(seen(), None);
    })
    .join()
    .unwrap();
}

#[test]
fn an_invalid_span_context_detaches_until_the_guard_drops() {
    std_thread::spawn(|| {
        let own = ThreadContext::new([9; 16], [9; 8], 1, &[]).unwrap();
        let address = own.as_ptr();
        let _own = own.attach_scoped();
        {
            let _guard = attach(&Context::new());
            assert_eq!(seen(), None, "no span: no context, not the previous one");
        }
        assert_eq!(attached_record_address(), address);
        {
            let cx = Context::new().with_remote_span_context(SpanContext::empty_context());
            let _guard = attach(&cx);
            assert_eq!(seen(), None);
        }
        assert_eq!(attached_record_address(), address);
    })
    .join()
    .unwrap();
}
