//! The process-wide context, behind a mutex (feature `std`).
//!
//! One [`Publisher`] for the whole process, shared by the SDK and the thread-context
//! writer. The extra attributes it publishes are the caller's (changed through
//! [`update`]) followed by the thread-context reference data (set through
//! [`set_thread_reference_data`]); a `threadlocal.*` key set by the caller is replaced by
//! the reference data.
//!
//! A context inherited by a forked child counts as not published there: in the child,
//! [`publish`] publishes a new context, [`update`] fails with [`Error::NotPublished`], and
//! [`set_thread_reference_data`] keeps the data for the child's next [`publish`]. A fork
//! while another thread holds the mutex leaves it locked in the child, as with any mutex.

use std::string::{String, ToString};
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use otel_ctx_codec::owned::OwnedValue;
use otel_ctx_codec::threadlocal::{reference_data, MAX_KEY_MAP_LEN};

use super::{Attributes, Error, Publisher, Resource};

struct State {
    publisher: Option<Publisher>,
    /// The caller's extra attributes.
    attributes: Attributes,
    /// `threadlocal.schema_version` and `threadlocal.attribute_key_map`, once set.
    thread_reference: Option<(String, Vec<String>)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    publisher: None,
    attributes: Attributes::new(),
    thread_reference: None,
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

    /// The extra attributes to publish: the caller's, then the reference data.
    fn published_attributes(
        attributes: &Attributes,
        thread_reference: Option<&(String, Vec<String>)>,
    ) -> Attributes {
        let mut published = attributes.clone();
        if let Some((schema_version, key_map)) = thread_reference {
            let key_map: Vec<&str> = key_map.iter().map(String::as_str).collect();
            for kv in reference_data(schema_version, &key_map) {
                published.set(kv.key, OwnedValue::from(kv.value));
            }
        }
        published
    }
}

/// Publishes `resource` as this process's context, or, if this process already published
/// one, updates it with `resource` (the process context is a singleton). The extra
/// attributes and the thread reference data set so far are published with it.
pub fn publish(resource: Resource) -> Result<(), Error> {
    let mut state = state();
    let attributes =
        State::published_attributes(&state.attributes, state.thread_reference.as_ref());
    match state.own_publisher() {
        Some(publisher) => publisher.update(resource, attributes),
        None => {
            state.publisher = Some(Publisher::publish(resource, attributes)?);
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
    let thread_reference = state.thread_reference.clone();
    let Some(publisher) = state.own_publisher() else {
        return Err(Error::NotPublished);
    };
    let mut resource = publisher.resource().clone();
    change(&mut resource, &mut attributes);
    let published = State::published_attributes(&attributes, thread_reference.as_ref());
    publisher.update(resource, published)?;
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

/// Sets the thread-context reference data, `threadlocal.schema_version = schema_version`
/// and `threadlocal.attribute_key_map = key_map`, in the extra attributes (field 2).
///
/// The thread-context writer calls this each time it registers attribute keys, with the
/// whole key map: position `i` is the name of key index `i`. If a context is published it
/// is updated now; otherwise the data is published with the next [`publish`].
///
/// The key map is append-only: fails with [`Error::KeyMapNotAppendOnly`] if a name already
/// set changes or disappears, and with [`Error::KeyMapTooLong`] beyond 256 names. On error
/// nothing was changed.
pub fn set_thread_reference_data(schema_version: &str, key_map: &[&str]) -> Result<(), Error> {
    if key_map.len() > MAX_KEY_MAP_LEN {
        return Err(Error::KeyMapTooLong { len: key_map.len() });
    }
    let mut guard = state();
    let state = &mut *guard;
    if let Some((_, published)) = &state.thread_reference {
        if let Some(index) = published
            .iter()
            .zip(
                key_map
                    .iter()
                    .copied()
                    .map(Some)
                    .chain(core::iter::repeat(None)),
            )
            .position(|(published, given)| given != Some(published.as_str()))
        {
            return Err(Error::KeyMapNotAppendOnly {
                index,
                published: published[index].clone(),
                given: key_map.get(index).map(|s| s.to_string()),
            });
        }
    }
    let thread_reference = (
        schema_version.to_string(),
        key_map.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let published = State::published_attributes(&state.attributes, Some(&thread_reference));
    if let Some(publisher) = state.own_publisher() {
        let resource = publisher.resource().clone();
        publisher.update(resource, published)?;
    }
    state.thread_reference = Some(thread_reference);
    Ok(())
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
