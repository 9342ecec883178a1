//! With `tracing-opentelemetry` below the layer (feature `opentelemetry`), a span's record
//! carries the OpenTelemetry span context's ids and flags.
#![cfg(feature = "opentelemetry")]

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use otel_ctx_tracing::{span_ids, ThreadContextLayer};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

#[path = "../../../writer-linux/tests/thread_support/mod.rs"]
mod thread_support;
use thread_support::own_record;

/// Trace id, span id and trace flags of the calling thread's record.
fn seen_ids() -> Option<([u8; 16], [u8; 8], u8)> {
    own_record().map(|record| (record.trace_id, record.span_id, record.trace_flags))
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
