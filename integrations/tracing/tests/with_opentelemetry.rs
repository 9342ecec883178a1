//! With `tracing-opentelemetry` below the layer (feature `opentelemetry`), a span's record
//! carries the OpenTelemetry span context's ids and flags.
#![cfg(feature = "opentelemetry")]

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use otel_ctx_codec::record::{RecordView, MAX_RECORD_SIZE};
use otel_ctx_tracing::{span_ids, ThreadContextLayer};
use otel_ctx_writer::thread::attached_record_address;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

/// Trace id, span id and trace flags of the calling thread's record.
fn seen_ids() -> Option<([u8; 16], [u8; 8], u8)> {
    let record = attached_record_address();
    if record.is_null() {
        return None;
    }
    // SAFETY: the slot points at a record attached on this thread, live while attached;
    // this thread does not write it while the test reads it.
    let bytes = unsafe { std::slice::from_raw_parts(record, 28) };
    let view = RecordView::parse(bytes, MAX_RECORD_SIZE).expect("record parses");
    Some((
        view.header.trace_id,
        view.header.span_id,
        view.header.trace_flags,
    ))
}

#[test]
fn the_record_has_the_opentelemetry_span_ids() {
    let provider = SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
        .with(ThreadContextLayer::new());
    tracing::subscriber::with_default(subscriber, || {
        let outer = tracing::info_span!("outer");
        outer.in_scope(|| {
            let inner = tracing::info_span!("inner");
            inner.in_scope(|| {
                let cx = inner.context();
                let otel = cx.span().span_context().clone();
                assert!(otel.is_valid());
                let expected = (
                    otel.trace_id().to_bytes(),
                    otel.span_id().to_bytes(),
                    otel.trace_flags().to_u8(),
                );
                assert_eq!(seen_ids(), Some(expected));
                let ids = span_ids(&inner).unwrap();
                assert_eq!((ids.trace_id, ids.span_id, ids.trace_flags), expected);
            });
            let outer_otel = outer.context().span().span_context().clone();
            assert_eq!(
                seen_ids().map(|(_, span, _)| span),
                Some(outer_otel.span_id().to_bytes())
            );
        });
    });
}
