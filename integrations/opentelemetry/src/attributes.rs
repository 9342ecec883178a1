//! Attribute values a `Context` carries for the thread context, and the record made for a
//! `Context`.

#[cfg(target_os = "linux")]
use opentelemetry::baggage::BaggageExt;
#[cfg(target_os = "linux")]
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
#[cfg(target_os = "linux")]
use otel_ctx_writer::thread::ThreadContext;

use crate::Key;

/// Attribute values a [`Context`] carries for the thread context, set by the service: the
/// attributes of the record [`attach`](crate::attach) (or the observer) makes for the context, and for
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
