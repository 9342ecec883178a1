//! The OpenTelemetry SDK's state, shared with out-of-process readers: its `Resource` as the
//! process context (OTEP 4719) and its active span as the thread context (OTEP 4947).
//!
//! ```no_run
//! use opentelemetry::trace::{Tracer, TracerProvider as _};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let provider = SdkTracerProvider::builder()
//!     .with_span_processor(otel_ctx_opentelemetry::ProcessContextProcessor::new())
//!     .build(); // publishes the provider's Resource
//! provider.tracer("checkout").in_span("request", |cx| {
//!     let _guard = otel_ctx_opentelemetry::attach(&cx); // a profiler sees this span
//! });
//! ```
//!
//! - [`ProcessContextProcessor`]: a [`SpanProcessor`] that does nothing per span; the
//!   tracer provider hands it the `Resource` when it is built
//!   ([`SpanProcessor::set_resource`]), and it publishes it.
//! - [`publish_resource`]: the same, called by hand (with a `Resource` of the SDK, or one
//!   built for the purpose).
//! - [`attach`]: makes a `Context`'s span the calling thread's context until the returned
//!   [`Guard`] drops.
//! - `observer::ThreadContextObserver` (feature `context-observer`): the OpenTelemetry
//!   API's context observer, so that the thread context follows every `Context::attach`
//!   and guard drop (including those of `tracing-opentelemetry` and of futures wrapped
//!   with `FutureExt::with_context`) with no call in the service's code.
//! - [`ThreadAttributes`]: attribute values a `Context` carries into its record.
//!
//! Outside Linux there is no process context and no thread-context slot: the same API
//! builds and does nothing.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource as SdkResource;
#[cfg(target_os = "linux")]
use otel_ctx_writer::thread::{self, Attached};

mod attributes;
#[cfg(feature = "context-observer")]
mod install;
#[cfg(feature = "context-observer")]
#[cfg_attr(not(target_os = "linux"), path = "observer_noop.rs")]
pub mod observer;
mod resource;

#[cfg(target_os = "linux")]
use attributes::record_for;
pub use attributes::{ThreadAttributes, ThreadAttributesExt};
#[cfg(feature = "context-observer")]
pub use observer::ThreadContextObserver;
pub use resource::{publish_resource, PublishError};
#[cfg(target_os = "linux")]
pub use resource::{to_owned_value, to_process_resource};

/// The writer's `otel_ctx_writer::thread::RegistryError`: outside Linux no key is
/// registered and nothing fails.
pub use otel_ctx_writer::thread::RegistryError;

/// An attribute key of thread contexts (a position of the process context's
/// `threadlocal.attribute_key_map`), for [`ThreadAttributesExt::with_thread_attribute`].
pub use otel_ctx_writer::thread::Key;

/// Registers `name` as an attribute key of thread contexts (appending it to the key map
/// the process context publishes, once), and returns its [`Key`]. Outside Linux nothing is
/// registered.
pub fn register(name: &str) -> Result<Key, RegistryError> {
    #[cfg(target_os = "linux")]
    return otel_ctx_writer::thread::register(name);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        Ok(Key::from_index(0))
    }
}

/// A [`SpanProcessor`] that publishes the tracer provider's `Resource` as the process
/// context, when the provider hands it over ([`SpanProcessor::set_resource`], called as
/// the provider is built). It does nothing per span.
///
/// Clones share the outcome of the last publication ([`last_error`](Self::last_error)),
/// so a clone kept before giving the processor to the provider can report it.
#[derive(Debug, Clone, Default)]
pub struct ProcessContextProcessor {
    last_error: Arc<Mutex<Option<String>>>,
}

impl ProcessContextProcessor {
    /// A processor that publishes the resource it is given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Why the last publication failed, or `None` if it succeeded (or none was made).
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl SpanProcessor for ProcessContextProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, _span: SpanData) {}

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, resource: &SdkResource) {
        // `set_resource` cannot fail; the error is kept for whoever asks.
        let outcome = publish_resource(resource).err().map(|e| e.to_string());
        *self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = outcome;
    }
}

/// Restores, when dropped, what the calling thread's slot held before [`attach`]; the
/// record `attach` made is freed then.
///
/// It stays on the thread that made it (neither `Send` nor `Sync`).
#[must_use = "dropping the guard at once puts the previous context back"]
pub struct Guard {
    #[cfg(target_os = "linux")]
    previous: Option<Attached>,
    _not_send: PhantomData<*mut ()>,
}

#[cfg(target_os = "linux")]
impl Drop for Guard {
    fn drop(&mut self) {
        drop(thread::swap(self.previous.take()));
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut guard = f.debug_struct("Guard");
        #[cfg(target_os = "linux")]
        guard.field("previous", &self.previous);
        guard.finish()
    }
}

/// Makes the span of `cx` the calling thread's context (trace id, span id, trace flags)
/// until the returned guard drops. When its span context is not valid (no span, or an
/// invalid one), the thread has no context until then: a reader must not take the
/// previous span for this one.
///
/// The record carries the attribute values the context holds ([`ThreadAttributes`]).
/// Each call allocates one record (a compact, 64-byte one when there are no attributes);
/// a service that switches spans often installs the observer (feature `context-observer`),
/// which builds the record once per `Context`, or uses the `tracing` layer.
///
/// Outside Linux there is no thread context: it does nothing.
pub fn attach(cx: &Context) -> Guard {
    attach_with_attributes(cx, &[])
}

/// [`attach`], with attributes (keys registered with `otel_ctx_writer::thread::register`),
/// after those the context carries ([`ThreadAttributes`]). Attributes that do not fit the
/// 640-byte record are left out.
pub fn attach_with_attributes(cx: &Context, attrs: &[(Key, &str)]) -> Guard {
    #[cfg(target_os = "linux")]
    return Guard {
        previous: thread::swap(record_for(cx, &[], attrs).map(Attached::Context)),
        _not_send: PhantomData,
    };
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (cx, attrs);
        Guard {
            _not_send: PhantomData,
        }
    }
}
