//! The process-wide context, behind a mutex (feature `std`).
//!
//! One [`Publisher`] for the whole process, shared by the SDK and the thread-context
//! writer. The extra attributes it publishes are the caller's (changed through [`update`])
//! followed by the thread-context reference data (`threadlocal.schema_version` and
//! `threadlocal.attribute_key_map`); a `threadlocal.*` key set by the caller is replaced by
//! the reference data.
//!
//! [`publish`] announces the thread contexts (OTEP 4947, publication step 1): its context
//! carries `threadlocal.schema_version = "tlsdesc_v1_dev"` and the key map registered so
//! far, empty if no key is registered yet, so a reader looks for the TLS slot even in a
//! process that attaches contexts without attributes. New keys
//! ([`set_thread_reference_data`], which `thread::register` calls) update it.
//!
//! A context inherited by a forked child counts as not published there: in the child,
//! [`publish`] publishes a new context, [`update`] fails with [`Error::NotPublished`], and
//! [`set_thread_reference_data`] keeps the data for the child's next [`publish`]. A fork
//! while another thread holds the mutex leaves it locked in the child, as with any mutex.

use std::sync::{Mutex, MutexGuard};

use super::{Attributes, Error, Publisher, Resource};

/// The process's thread reference data, whichever publisher the process uses; here too
/// for the users of this module.
pub use super::set_thread_reference_data;

struct State {
    publisher: Option<Publisher>,
    /// The caller's extra attributes.
    attributes: Attributes,
}

static STATE: Mutex<State> = Mutex::new(State {
    publisher: None,
    attributes: Attributes::new(),
});

fn state() -> MutexGuard<'static, State> {
    // A panic while the lock was held cannot leave the state torn: every change is a
    // whole-value assignment after the fallible work, so the poison is ignored.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The publisher, if this process published it (not inherited across a fork).
    fn own_publisher(&mut self) -> Option<&mut Publisher> {
        if self.publisher.as_ref().is_some_and(Publisher::is_inherited) {
            // Dropping an inherited publisher neither writes nor unmaps anything.
            self.publisher = None;
        }
        self.publisher.as_mut()
    }
}

/// Publishes `resource` as this process's context, or, if this process already published
/// one, updates it with `resource` (the process context is a singleton). The extra
/// attributes set so far are published with it, and the thread reference data: the key
/// map registered so far, or an empty one with `threadlocal.schema_version =
/// "tlsdesc_v1_dev"` if none is.
///
/// Fails with [`Error::AlreadyPublished`] while a standalone [`Publisher`] holds the
/// context.
pub fn publish(resource: Resource) -> Result<(), Error> {
    let mut state = state();
    let attributes = state.attributes.clone();
    match state.own_publisher() {
        Some(publisher) => publisher.update(resource, attributes),
        None => {
            state.publisher = Some(Publisher::publish_announcing(resource, attributes)?);
            Ok(())
        }
    }
}

/// Changes the published resource and the caller's extra attributes through `change`,
/// then updates the context. Fails with [`Error::NotPublished`] when nothing is published;
/// on error nothing was changed.
pub fn update(change: impl FnOnce(&mut Resource, &mut Attributes)) -> Result<(), Error> {
    let mut guard = state();
    let state = &mut *guard;
    let mut attributes = state.attributes.clone();
    let Some(publisher) = state.own_publisher() else {
        return Err(Error::NotPublished);
    };
    let mut resource = publisher.resource();
    change(&mut resource, &mut attributes);
    publisher.update(resource, attributes.clone())?;
    state.attributes = attributes;
    Ok(())
}

/// Unpublishes the context, if this process published one. The extra attributes and the
/// thread reference data are kept for a later [`publish`].
pub fn unpublish() -> Result<(), Error> {
    let publisher = state().publisher.take();
    match publisher {
        Some(publisher) => publisher.unpublish(),
        None => Ok(()),
    }
}

/// Whether this process publishes a context through this module.
pub fn is_published() -> bool {
    state().own_publisher().is_some()
}

/// Calls `f` with the publisher, if this process publishes a context through this module
/// (for its address, timestamp or payload).
pub fn with_publisher<R>(f: impl FnOnce(&Publisher) -> R) -> Option<R> {
    state().own_publisher().map(|publisher| f(publisher))
}
