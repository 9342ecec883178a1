//! The thread context that follows the OpenTelemetry [`Context`] a thread has attached,
//! through the API's context observer (`opentelemetry`'s `experimental_context_observer`).
//!
//! Once [`ThreadContextObserver::install`] has run, every `Context` the API creates (a new
//! span's, one with a value or baggage added) gets the observer's view of it: the thread
//! context's record for it, built there, once (trace id, span id, trace flags, and the
//! chosen attributes). Then:
//!
//! - **enter** (`Context::attach`, or a poll of a future wrapped with
//!   `FutureExt::with_context`): the context's record goes into the calling thread's
//!   `otel_thread_ctx_v1` slot, and what the slot held is kept on a per-thread stack. A
//!   context whose span context is not valid (no span) attaches nothing: the slot is NULL
//!   until it is exited, so a reader does not take the enclosing span for this code.
//! - **exit** (the drop of the `ContextGuard`): the slot gets back what it held before the
//!   matching enter, and the record is kept on the thread for the next enter of the same
//!   `Context` (or of a clone: clones share the view), the next poll of the same task most
//!   often; it returns to its view when another context's record takes its place there.
//!
//! A record is in one place at a time: an enter of a context whose record is attached or
//! kept on another thread, or lower on this thread's stack, attaches a copy, made then
//! (one allocation). Every other enter and exit makes no allocation, takes no lock that
//! waits, and makes no system call; an enter of the context exited last on the thread
//! takes no lock at all.
//!
//! Guards dropped out of order: the API notifies only when the innermost context is
//! exited, naming the context that becomes current; the observer then restores what the
//! slot held before that context's enter, skipping the enters whose guards were dropped
//! earlier. Contexts created before the observer was installed have no view: their record
//! is built at each enter, and they cannot be told apart from one another in that
//! skipping, so out-of-order drops among them may restore an outer one of them early.
//!
//! Only one context observer can be installed in a process (the API's rule): the first
//! one installed stays.
//!
//! Use it or the `tracing` layer (`otel-ctx-tracing`) for a span, not both: each keeps
//! the slot on its own notion of the current span.

use std::any::Any;
use std::cell::RefCell;
use std::ptr;
use std::sync::{Arc, Mutex, TryLockError};

use opentelemetry::context::{ContextObserver, GlobalContextObserver, ObserverContextView};
use opentelemetry::Context;
use otel_ctx_writer::thread::{self, Attached, Key, RegistryError, ThreadContext};

use crate::attributes::record_for;
pub use crate::install::InstallError;

/// Keeps the calling thread's `otel_thread_ctx_v1` record on the OpenTelemetry `Context`
/// it has attached; see the [module documentation](self).
///
/// ```no_run
/// use otel_ctx_opentelemetry::observer::ThreadContextObserver;
///
/// ThreadContextObserver::builder()
///     .baggage_attribute("tenant.id")? // the baggage entry `tenant.id`, as attribute
///     .build()
///     .install()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ThreadContextObserver {
    /// Baggage entries taken as attributes: (baggage name, attribute key).
    from_baggage: Arc<[(String, Key)]>,
    /// Publish the SDK's default resource at install when nothing is published.
    publish_default: bool,
}

impl Default for ThreadContextObserver {
    fn default() -> Self {
        ThreadContextObserverBuilder::default().build()
    }
}

/// Builds a [`ThreadContextObserver`] with the attributes it takes from baggage.
#[derive(Debug, Default)]
pub struct ThreadContextObserverBuilder {
    from_baggage: Vec<(String, Key)>,
    without_process_context: bool,
}

impl ThreadContextObserverBuilder {
    /// Takes the baggage entry `name` as the attribute key of the same name, registering
    /// the key in the process context's `threadlocal.attribute_key_map`.
    pub fn baggage_attribute(self, name: &str) -> Result<Self, RegistryError> {
        self.baggage_attribute_as(name, name)
    }

    /// Takes the baggage entry `name` as the attribute key `key`, registering the key.
    pub fn baggage_attribute_as(mut self, name: &str, key: &str) -> Result<Self, RegistryError> {
        let key = thread::register(key)?;
        self.from_baggage.retain(|(n, _)| n != name);
        self.from_baggage.push((name.to_owned(), key));
        Ok(self)
    }

    /// Publishes no process context when the observer is installed (the application
    /// publishes its own, or wants none until its tracer provider does).
    #[must_use]
    pub fn without_process_context(mut self) -> Self {
        self.without_process_context = true;
        self
    }

    /// The observer.
    pub fn build(self) -> ThreadContextObserver {
        ThreadContextObserver {
            from_baggage: self.from_baggage.into(),
            publish_default: !self.without_process_context,
        }
    }
}

impl ThreadContextObserver {
    /// An observer that records ids and flags, and the attributes contexts carry
    /// ([`ThreadAttributes`](crate::ThreadAttributes)).
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder, to take attributes from baggage.
    pub fn builder() -> ThreadContextObserverBuilder {
        ThreadContextObserverBuilder::default()
    }

    /// Makes this the process's context observer. Contexts created from then on get their
    /// record; enters and exits from then on move them in and out of the slot.
    ///
    /// When no process context is published yet, it publishes one with the resource the
    /// SDK detects by default (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
    /// `unknown_service:<executable>`, `telemetry.sdk.*`), so that a reader finds the key
    /// map the records need; the provider's own `Resource` replaces it when
    /// [`ProcessContextProcessor`](crate::ProcessContextProcessor) publishes it.
    /// [`ThreadContextObserverBuilder::without_process_context`] turns that off.
    pub fn install(self) -> Result<(), InstallError> {
        match probe() {
            Probe::Ours => return Err(InstallError::AlreadyInstalled),
            Probe::Other => return Err(InstallError::OtherObserver),
            Probe::None => {}
        }
        if self.publish_default && !otel_ctx_writer::process::global::is_published() {
            // A failure leaves the process without a context, as before the observer.
            let _ =
                crate::resource::publish_resource(&opentelemetry_sdk::Resource::builder().build());
        }
        GlobalContextObserver::set(Arc::new(self));
        match probe() {
            Probe::Ours => Ok(()),
            // Another thread installed one in between: ours was ignored.
            Probe::Other | Probe::None => Err(InstallError::OtherObserver),
        }
    }

    /// Whether a [`ThreadContextObserver`] is this process's context observer.
    pub fn is_installed() -> bool {
        matches!(probe(), Probe::Ours)
    }
}

enum Probe {
    Ours,
    Other,
    None,
}

/// What the installed observer makes of a new context.
fn probe() -> Probe {
    struct Marker;
    let cx = Context::new().with_value(Marker);
    match cx.observer_view() {
        Some(view) if view.as_any().is::<View>() => Probe::Ours,
        Some(_) => Probe::Other,
        // An observer that makes no view is not ours either, but cannot be told from none.
        None => Probe::None,
    }
}

/// The observer's view of one `Context`, shared by its clones.
struct View {
    /// `None` when the context's span context is not valid: entering it detaches.
    record: Option<Cached>,
}

struct Cached {
    /// The record while it is in no slot.
    spare: Mutex<Option<ThreadContext>>,
    /// The record as built: to tell a record changed in place.
    bytes: Box<[u8]>,
}

impl ObserverContextView for View {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl View {
    /// The record to attach for `cx` (the context this view belongs to): the spare one, or
    /// a new one when it is in a slot already.
    fn take(&self, cx: &Context, from_baggage: &[(String, Key)]) -> Option<ThreadContext> {
        let cached = self.record.as_ref()?;
        let spare = match cached.spare.try_lock() {
            Ok(mut spare) => spare.take(),
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().take(),
            // Another thread is taking or returning it right now: make a copy rather
            // than wait.
            Err(TryLockError::WouldBlock) => None,
        };
        spare.or_else(|| record_for(cx, from_baggage, &[]))
    }

    /// Takes back a record this view gave out; a record changed in place since (through
    /// `otel_ctx_writer::thread::update` or `append`) is freed instead, and so is a
    /// second copy.
    fn give_back(&self, record: ThreadContext) {
        let Some(cached) = &self.record else { return };
        if record.as_bytes() != &*cached.bytes {
            return;
        }
        let mut spare = match cached.spare.try_lock() {
            Ok(spare) => spare,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        if spare.is_none() {
            *spare = Some(record);
        }
    }
}

/// A view of this observer's, from the one a context holds.
fn ours(view: &Arc<dyn ObserverContextView>) -> Option<&View> {
    view.as_any().downcast_ref::<View>()
}

/// What identifies a context with a view (the view's address, shared by its clones); `0`
/// for every context without one.
fn identity(cx: &Context) -> usize {
    cx.observer_view().as_ref().map_or(0, address)
}

fn address(view: &Arc<dyn ObserverContextView>) -> usize {
    Arc::as_ptr(view).cast::<()>() as usize
}

/// One enter on this thread, not yet exited.
struct Entered {
    /// The [`identity`] of the context that was current before the enter.
    before: usize,
    /// The record the enter attached, or null.
    record: *const u8,
    /// The view that record came from, to go back to at the exit.
    owner: Option<Arc<dyn ObserverContextView>>,
    /// What the slot held before the enter.
    previous: Option<Attached>,
}

/// A record kept on the thread that exited its context last, with its view.
struct Parked {
    owner: Arc<dyn ObserverContextView>,
    record: ThreadContext,
}

/// What a thread keeps between notifications, in one thread-local.
struct ThreadState {
    /// This thread's enters, innermost last. It grows to the deepest nesting once and is
    /// reused after: enter and exit do not allocate.
    entered: Vec<Entered>,
    /// The record of the context this thread exited last, kept here rather than given back
    /// to its view: the next enter of the same context on this thread (the next poll of
    /// the same task, most often) attaches it without taking the view's lock. It goes back
    /// to its view when another record takes its place.
    parked: Option<Parked>,
}

thread_local! {
    static STATE: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            entered: Vec::new(),
            parked: None,
        })
    };
}

impl ThreadContextObserver {
    /// The record to attach for `to`, and the view it goes back to at the exit.
    fn record_to_attach(
        &self,
        state: &mut ThreadState,
        to: &Context,
    ) -> (Option<ThreadContext>, Option<Arc<dyn ObserverContextView>>) {
        let Some(owner) = to.observer_view() else {
            // Made before the observer was installed: built now, freed at the exit.
            return (record_for(to, &self.from_baggage, &[]), None);
        };
        let Some(view) = ours(owner) else {
            return (record_for(to, &self.from_baggage, &[]), None);
        };
        if view.record.is_none() {
            return (None, None);
        }
        match state.parked.take() {
            Some(parked) if address(&parked.owner) == address(owner) => {
                (Some(parked.record), Some(parked.owner))
            }
            other => {
                state.parked = other;
                (view.take(to, &self.from_baggage), Some(Arc::clone(owner)))
            }
        }
    }
}

impl ContextObserver for ThreadContextObserver {
    fn make_view(&self, cx: &Context) -> Option<Arc<dyn ObserverContextView>> {
        let record = record_for(cx, &self.from_baggage, &[]).map(|record| Cached {
            bytes: record.as_bytes().into(),
            spare: Mutex::new(Some(record)),
        });
        Some(Arc::new(View { record }))
    }

    fn on_context_enter(&self, from: &Context, to: &Context) {
        // Called with the API's own thread-local state borrowed: nothing here calls back
        // into `Context::current` or `attach`.
        // While the thread's locals are being destroyed there is no stack to keep the
        // previous value on: nothing is attached then, and the exit finds no enter.
        let _ = STATE.try_with(|state| {
            let mut state = state.borrow_mut();
            let (record, owner) = self.record_to_attach(&mut state, to);
            let address = record.as_ref().map_or(ptr::null(), ThreadContext::as_ptr);
            let previous = thread::swap(record.map(Attached::Context));
            state.entered.push(Entered {
                before: identity(from),
                record: address,
                owner,
                previous,
            });
        });
    }

    fn on_context_exit(&self, _from: &Context, to: &Context) {
        let evicted = STATE.try_with(|state| {
            let mut state = state.borrow_mut();
            let Some(top) = state.entered.pop() else {
                // An enter from before the observer was installed: nothing to restore.
                return None;
            };
            let target = identity(to);
            let mut restore = top.previous;
            if top.before != target {
                // Guards dropped out of order: the contexts entered between `to` and
                // `from` were exited without a notification. Their enters go too, down to
                // the one made from `to`; if there is none, only the innermost one.
                if let Some(position) = state.entered.iter().rposition(|e| e.before == target) {
                    for entered in state.entered.drain(position..).rev() {
                        // The record of an exited context: freed.
                        drop(std::mem::replace(&mut restore, entered.previous));
                    }
                }
            }
            let returned = thread::swap(restore);
            let (Some(Attached::Context(record)), Some(owner)) = (returned, top.owner) else {
                return None;
            };
            // Kept only if it is the record this enter attached, unchanged since.
            let unchanged = ours(&owner)
                .and_then(|view| view.record.as_ref())
                .is_some_and(|cached| record.as_bytes() == &*cached.bytes);
            if record.as_ptr() != top.record || !unchanged {
                return None;
            }
            state.parked.replace(Parked { owner, record })
        });
        // Back to its view, outside the borrow of this thread's state.
        if let Ok(Some(evicted)) = evicted {
            if let Some(view) = ours(&evicted.owner) {
                view.give_back(evicted.record);
            }
        }
    }
}
