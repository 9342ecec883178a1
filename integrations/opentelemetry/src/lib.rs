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

#[cfg(target_os = "linux")]
use opentelemetry::baggage::BaggageExt;
#[cfg(target_os = "linux")]
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
#[cfg(target_os = "linux")]
use opentelemetry::{Array, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource as SdkResource;
#[cfg(target_os = "linux")]
use otel_ctx_writer::process::{self, global, OwnedValue};
#[cfg(target_os = "linux")]
use otel_ctx_writer::thread::{self, Attached, ThreadContext};

#[cfg(feature = "context-observer")]
mod install;
#[cfg(feature = "context-observer")]
#[cfg_attr(not(target_os = "linux"), path = "observer_noop.rs")]
pub mod observer;
#[cfg(feature = "context-observer")]
pub use observer::ThreadContextObserver;

/// Why the process context could not be published (see `otel_ctx_writer::process`).
#[cfg(target_os = "linux")]
pub type PublishError = process::Error;
/// Why the process context could not be published. Outside Linux nothing is published and
/// nothing fails.
#[cfg(not(target_os = "linux"))]
pub type PublishError = std::convert::Infallible;

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

/// `service.instance.id`, which the SDK's default resource leaves out.
#[cfg(target_os = "linux")]
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// The process context's resource for an SDK `Resource`: every attribute, with its typed
/// value (bool, int, double, string, and arrays of them).
///
/// The semantic-convention keys the SDK left out are filled in as
/// `otel_ctx_writer::process::ResourceBuilder::build` does; `service.instance.id` keeps the
/// value of the context this process already published, if any, so that publishing again
/// does not make the process look like a new instance.
#[cfg(target_os = "linux")]
pub fn to_process_resource(resource: &SdkResource) -> Result<process::Resource, process::Error> {
    let mut builder = process::Resource::builder();
    for (key, value) in resource.iter() {
        builder = builder.attribute(key.as_str(), to_owned_value(value));
    }
    if resource
        .get(&opentelemetry::Key::from_static_str(SERVICE_INSTANCE_ID))
        .is_none()
    {
        let published = global::with_publisher(|publisher| {
            publisher.resource().get(SERVICE_INSTANCE_ID).cloned()
        });
        if let Some(Some(id)) = published {
            builder = builder.attribute(SERVICE_INSTANCE_ID, id);
        }
    }
    builder.build()
}

/// An SDK attribute value in the codec's owned model.
#[cfg(target_os = "linux")]
pub fn to_owned_value(value: &Value) -> OwnedValue {
    match value {
        Value::Bool(v) => OwnedValue::Bool(*v),
        Value::I64(v) => OwnedValue::Int(*v),
        Value::F64(v) => OwnedValue::Double(*v),
        Value::String(v) => OwnedValue::String(v.as_str().to_owned()),
        Value::Array(Array::Bool(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Bool).collect())
        }
        Value::Array(Array::I64(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Int).collect())
        }
        Value::Array(Array::F64(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Double).collect())
        }
        Value::Array(Array::String(v)) => OwnedValue::Array(
            v.iter()
                .map(|s| OwnedValue::String(s.as_str().to_owned()))
                .collect(),
        ),
        // The SDK's value kinds are open to additions (`non_exhaustive`): a kind this crate
        // does not know yet is published as its text rather than dropped.
        other => OwnedValue::String(other.to_string()),
    }
}

/// Publishes `resource` as this process's context, through the writer's process-wide
/// publisher (`otel_ctx_writer::process::global`): the first call publishes, later ones
/// update. The extra attributes and the thread reference data (the key map) are kept.
///
/// Outside Linux there is no process context: it does nothing.
pub fn publish_resource(resource: &SdkResource) -> Result<(), PublishError> {
    #[cfg(target_os = "linux")]
    return global::publish(to_process_resource(resource)?);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = resource;
        Ok(())
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

/// Attribute values a [`Context`] carries for the thread context, set by the service: the
/// attributes of the record [`attach`] (or the observer) makes for the context, and for
/// the contexts derived from it (a child span's context keeps its parent's values).
///
/// Put them in a context with [`ThreadAttributesExt::with_thread_attribute`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadAttributes {
    entries: Vec<(Key, String)>,
}

impl ThreadAttributes {
    /// No attributes.
    pub fn new() -> Self {
        Self::default()
    }

    /// These attributes with `key` set to `value` (replacing an earlier value of `key`).
    #[must_use]
    pub fn with(mut self, key: Key, value: &str) -> Self {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => {
                v.clear();
                v.push_str(value);
            }
            None => self.entries.push((key, value.to_owned())),
        }
        self
    }

    /// The attributes, in the order they were first set.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &str)> {
        self.entries.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// Whether no attribute is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Sets thread-context attribute values on a [`Context`].
pub trait ThreadAttributesExt {
    /// A copy of this context whose [`ThreadAttributes`] have `key` set to `value` (the
    /// other values it carries are kept).
    fn with_thread_attribute(&self, key: Key, value: &str) -> Context;
}

impl ThreadAttributesExt for Context {
    fn with_thread_attribute(&self, key: Key, value: &str) -> Context {
        let attributes = self
            .get::<ThreadAttributes>()
            .cloned()
            .unwrap_or_default()
            .with(key, value);
        self.with_value(attributes)
    }
}

/// The record for `cx`: its span context's ids and flags, then the attributes `explicit`,
/// those the context carries ([`ThreadAttributes`]) and the baggage entries of
/// `from_baggage` (baggage name, attribute key), each key once (the first value wins).
/// `None` when the span context is not valid.
#[cfg(target_os = "linux")]
pub(crate) fn record_for(
    cx: &Context,
    from_baggage: &[(String, Key)],
    explicit: &[(Key, &str)],
) -> Option<ThreadContext> {
    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return None;
    }
    let (trace_id, span_id, flags) = (
        context.trace_id().to_bytes(),
        context.span_id().to_bytes(),
        context.trace_flags().to_u8(),
    );
    let carried = cx.get::<ThreadAttributes>().filter(|a| !a.is_empty());
    if explicit.is_empty() && carried.is_none() && from_baggage.is_empty() {
        return ThreadContext::compact(trace_id, span_id, flags, &[]).ok();
    }
    let mut record = ThreadContext::new(trace_id, span_id, flags, &[]).ok()?;
    let baggage = cx.baggage();
    let from_baggage = from_baggage
        .iter()
        .filter_map(|(name, key)| Some((*key, baggage.get(name)?.as_str())));
    let all = explicit
        .iter()
        .copied()
        .chain(carried.into_iter().flat_map(ThreadAttributes::iter))
        .chain(from_baggage);
    let mut written: Vec<Key> = Vec::new();
    for (key, value) in all {
        if written.contains(&key) {
            continue;
        }
        if record.append_truncated(key, value).is_err() {
            break;
        }
        written.push(key);
    }
    Some(record)
}
