//! The context observer outside Linux, where there is no thread-context slot: the same
//! builder and `install`, so that a service sets it up the same way everywhere; nothing is
//! installed, and `Context::attach` stays as it is.

pub use crate::install::InstallError;
use crate::RegistryError;

/// Keeps the calling thread's `otel_thread_ctx_v1` record on the OpenTelemetry `Context`
/// it has attached; outside Linux, where that record does not exist, it does nothing.
#[derive(Debug, Clone, Default)]
pub struct ThreadContextObserver {
    _private: (),
}

/// Builds a [`ThreadContextObserver`] with the attributes it takes from baggage.
#[derive(Debug, Default)]
pub struct ThreadContextObserverBuilder {
    _private: (),
}

impl ThreadContextObserverBuilder {
    /// Takes the baggage entry `name` as the attribute key of the same name (outside
    /// Linux: nothing registered).
    pub fn baggage_attribute(self, name: &str) -> Result<Self, RegistryError> {
        self.baggage_attribute_as(name, name)
    }

    /// Takes the baggage entry `name` as the attribute key `key` (outside Linux: nothing
    /// registered).
    pub fn baggage_attribute_as(self, _name: &str, _key: &str) -> Result<Self, RegistryError> {
        Ok(self)
    }

    /// Publishes no process context when installed (outside Linux none is, anyway).
    #[must_use]
    pub fn without_process_context(self) -> Self {
        self
    }

    /// The observer.
    pub fn build(self) -> ThreadContextObserver {
        ThreadContextObserver::default()
    }
}

impl ThreadContextObserver {
    /// An observer that records ids and flags.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder, to take attributes from baggage.
    pub fn builder() -> ThreadContextObserverBuilder {
        ThreadContextObserverBuilder::default()
    }

    /// Outside Linux: installs nothing, and succeeds (there is no thread context to keep).
    pub fn install(self) -> Result<(), InstallError> {
        Ok(())
    }

    /// Whether a [`ThreadContextObserver`] is this process's context observer: never,
    /// outside Linux.
    pub fn is_installed() -> bool {
        false
    }
}
