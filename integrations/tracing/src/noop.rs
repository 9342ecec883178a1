//! The layer outside Linux, where there is no thread-context slot: it keeps the builder
//! methods, so that a service builds the same subscriber everywhere, and does nothing.

use tracing_core::Subscriber;
use tracing_subscriber::layer::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::ids::SpanIds;
use crate::RegistryError;

/// Keeps each thread's `otel_thread_ctx_v1` record on the `tracing` span it has entered;
/// outside Linux, where that record does not exist, it does nothing.
#[derive(Debug, Clone, Default)]
pub struct ThreadContextLayer {
    _private: (),
}

impl ThreadContextLayer {
    /// A layer that records ids and flags only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the span field `field` as the attribute key of the same name (outside
    /// Linux: nothing to record, nothing registered).
    pub fn with_attribute(self, field: &str) -> Result<Self, RegistryError> {
        self.with_attribute_as(field, field)
    }

    /// Records the span field `field` as the attribute key `key` (outside Linux: nothing
    /// to record, nothing registered).
    pub fn with_attribute_as(self, _field: &str, _key: &str) -> Result<Self, RegistryError> {
        Ok(self)
    }

    /// Publishes no process context when installed (outside Linux none is, anyway).
    #[must_use]
    pub fn without_process_context(self) -> Self {
        self
    }
}

/// Every callback is the trait's default, which does nothing.
impl<S> Layer<S> for ThreadContextLayer where S: Subscriber + for<'a> LookupSpan<'a> {}

/// The ids the layer put in `span`'s record: outside Linux there is none.
pub fn span_ids(_span: &tracing::Span) -> Option<SpanIds> {
    None
}
