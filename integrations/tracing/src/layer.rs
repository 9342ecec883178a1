//! The layer, on Linux, where the thread-context slot exists.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::ids::{SpanIds, GENERATED_TRACE_FLAGS};
use otel_ctx_writer::thread::{
    self, attached_record_address, Attached, Key, RegistryError, ThreadContext,
};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The longest attribute value a record entry holds (its length is a `u8`).
const MAX_VALUE_LEN: usize = 255;

/// A span field whose value becomes a thread-context attribute.
#[derive(Debug, Clone)]
struct Mapped {
    field: String,
    key: Key,
}

/// Keeps each thread's `otel_thread_ctx_v1` record on the `tracing` span it has entered.
///
/// Install it over a [`tracing_subscriber::Registry`] (any subscriber that implements
/// [`LookupSpan`]), above `tracing-opentelemetry`'s layer when that one gives the ids.
///
/// When it is installed and no process context is published yet, it publishes one with
/// the resource the OpenTelemetry SDK detects by default ([`default_resource`]), so that
/// a reader finds the key map its records need; an SDK `Resource` published later (by
/// `otel-ctx-opentelemetry`'s `ProcessContextProcessor`) replaces it.
/// [`without_process_context`](Self::without_process_context) turns that off.
#[derive(Debug, Clone)]
pub struct ThreadContextLayer {
    mapped: Vec<Mapped>,
    publish_default: bool,
}

impl Default for ThreadContextLayer {
    fn default() -> Self {
        Self {
            mapped: Vec::new(),
            publish_default: true,
        }
    }
}

/// The resource the layer publishes when no process context is: what the OpenTelemetry
/// SDK's default detectors find (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`,
/// `service.name` defaulting to `unknown_service:<executable>`), a `service.instance.id`,
/// and `telemetry.sdk.*` naming this crate.
pub fn default_resource(
) -> Result<otel_ctx_writer::process::Resource, otel_ctx_writer::process::Error> {
    otel_ctx_writer::process::Resource::builder()
        .from_environment()
        .telemetry_sdk(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
        .build()
}

impl ThreadContextLayer {
    /// A layer that records ids and flags only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes no process context when it is installed (the application publishes its
    /// own, or wants none until its OpenTelemetry SDK does).
    #[must_use]
    pub fn without_process_context(mut self) -> Self {
        self.publish_default = false;
        self
    }

    /// Records the span field `field` as the attribute key of the same name (field
    /// `http.route` -> key `http.route`), registering the key in the process context's
    /// `threadlocal.attribute_key_map`.
    pub fn with_attribute(self, field: &str) -> Result<Self, RegistryError> {
        self.with_attribute_as(field, field)
    }

    /// Records the span field `field` as the attribute key `key`, registering the key.
    pub fn with_attribute_as(mut self, field: &str, key: &str) -> Result<Self, RegistryError> {
        let key = thread::register(key)?;
        self.mapped.retain(|m| m.field != field);
        self.mapped.push(Mapped {
            field: field.to_owned(),
            key,
        });
        Ok(self)
    }

    fn state_for(&self, trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> SpanState {
        SpanState {
            shared: Arc::new(Shared::default()),
            trace_id,
            span_id,
            trace_flags: flags,
            values: vec![None; self.mapped.len()],
            version: 0,
            spare: None,
            #[cfg(feature = "opentelemetry")]
            ids_from_otel: true,
        }
    }

    fn record_values(&self, state: &mut SpanState, record: &dyn RecordFields) {
        let mut visitor = Values {
            mapped: &self.mapped,
            values: &mut state.values,
            changed: false,
        };
        record.record_into(&mut visitor);
        if visitor.changed {
            state.bump();
        }
    }

    /// A new record built from the span's current values.
    fn build(&self, state: &SpanState) -> Option<ThreadContext> {
        let mut record = ThreadContext::with_capacity(ThreadContext::CAPACITY).ok()?;
        self.fill(&mut record, state);
        Some(record)
    }

    /// Rewrites a detached record from the span's current values, without allocating.
    fn fill(&self, record: &mut ThreadContext, state: &SpanState) {
        if record
            .update(state.trace_id, state.span_id, state.trace_flags, &[])
            .is_err()
        {
            // Only one id, or flags without ids: a record with no trace rather than none.
            // An empty record with no ids always fits and is always allowed.
            let _ = record.update([0; 16], [0; 8], 0, &[]);
        }
        for (mapped, value) in self.mapped.iter().zip(&state.values) {
            if let Some(value) = value {
                // A full record keeps the attributes that fit; a reader stops at the end.
                if record.append_truncated(mapped.key, value).is_err() {
                    break;
                }
            }
        }
    }
}

/// What the threads that hold a span's record need to know of the span without looking
/// it up: shared by the span's state and the records parked on threads.
#[derive(Debug, Default)]
struct Shared {
    /// The span's [`SpanState::version`].
    version: AtomicU32,
    /// Set when the span closes: its id may then be reused for another span.
    closed: AtomicBool,
}

/// The per-span data, kept in the span's extensions.
struct SpanState {
    shared: Arc<Shared>,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    trace_flags: u8,
    /// One value per mapped field, in the layer's order.
    values: Vec<Option<String>>,
    /// Bumped by every change of ids or values.
    version: u32,
    /// The span's record while it is attached nowhere and parked nowhere, with the
    /// version it was built from.
    spare: Option<(ThreadContext, u32)>,
    /// Whether the ids are still to be taken from `tracing-opentelemetry`'s context.
    #[cfg(feature = "opentelemetry")]
    ids_from_otel: bool,
}

impl SpanState {
    fn bump(&mut self) {
        self.version = self.version.wrapping_add(1);
        self.shared.version.store(self.version, Ordering::Release);
    }
}

/// A span's record on this thread, with what identifies its span.
struct Held {
    span: u64,
    shared: Arc<Shared>,
    /// The [`SpanState::version`] the record was last written from.
    version: u32,
    record: ThreadContext,
}

impl Held {
    /// Whether the record can be attached for `span` as it is.
    fn is_current_for(&self, span: u64) -> bool {
        self.span == span
            && !self.shared.closed.load(Ordering::Acquire)
            && self.shared.version.load(Ordering::Acquire) == self.version
    }
}

/// One enter of a span on this thread, not yet exited.
struct Entered {
    span: u64,
    shared: Arc<Shared>,
    /// The record this enter attached (it may have left the slot since).
    record: *const u8,
    version: u32,
    /// What the slot held before this enter: restored by the matching exit.
    previous: Option<Attached>,
}

/// What a thread keeps of the spans it has entered, in one thread-local (one lookup per
/// enter or exit).
struct ThreadState {
    /// This thread's entered spans, innermost last. The vector grows to the deepest
    /// nesting once and is reused after: enter and exit do not allocate.
    entered: Vec<Entered>,
    /// The record of the span this thread exited last, kept here rather than given back to
    /// the span: the next enter of the same span on this thread (the next poll of the same
    /// task, most often) attaches it without looking the span up. It goes back to its span
    /// when another span's record takes its place.
    parked: Option<Held>,
}

thread_local! {
    static STATE: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            entered: Vec::new(),
            parked: None,
        })
    };
    /// A xorshift state for generated ids, seeded from the process's random hasher keys.
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    // `RandomState` keys are random per process and differ per instance; the thread id
    // keeps threads apart even if they were not.
    let mut hasher = RandomState::new().build_hasher();
    std::hash::Hash::hash(&std::thread::current().id(), &mut hasher);
    hasher.finish() | 1
}

/// A non-zero random `u64` (xorshift64*: never zero from a non-zero state).
fn random_u64() -> u64 {
    RNG.with(|rng| {
        let mut x = rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        rng.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D).max(1)
    })
}

fn new_trace_id() -> [u8; 16] {
    let mut id = [0; 16];
    id[..8].copy_from_slice(&random_u64().to_be_bytes());
    id[8..].copy_from_slice(&random_u64().to_be_bytes());
    id
}

fn new_span_id() -> [u8; 8] {
    random_u64().to_be_bytes()
}

/// The two ways tracing hands over field values.
trait RecordFields {
    fn record_into(&self, visitor: &mut dyn Visit);
}

impl RecordFields for Attributes<'_> {
    fn record_into(&self, visitor: &mut dyn Visit) {
        self.record(visitor);
    }
}

impl RecordFields for Record<'_> {
    fn record_into(&self, visitor: &mut dyn Visit) {
        self.record(visitor);
    }
}

/// Takes the values of the mapped fields, cut to what a record entry holds.
struct Values<'a> {
    mapped: &'a [Mapped],
    values: &'a mut [Option<String>],
    changed: bool,
}

impl Values<'_> {
    fn slot(&mut self, field: &Field) -> Option<&mut String> {
        let index = self.mapped.iter().position(|m| m.field == field.name())?;
        self.changed = true;
        let value = self.values[index].get_or_insert_with(String::new);
        value.clear();
        Some(value)
    }
}

fn cut(value: &mut String) {
    if value.len() > MAX_VALUE_LEN {
        let mut end = MAX_VALUE_LEN;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
}

impl Visit for Values<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(slot) = self.slot(field) {
            slot.push_str(value);
            cut(slot);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if let Some(slot) = self.slot(field) {
            // Writing into a String cannot fail.
            let _ = write!(slot, "{value:?}");
            cut(slot);
        }
    }
}

impl<S> Layer<S> for ThreadContextLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_layer(&mut self, _subscriber: &mut S) {
        if self.publish_default && !otel_ctx_writer::process::global::is_published() {
            // A failure leaves the process without a context, as before the layer: the
            // records still work, and `otel-ctx check` says what is missing.
            if let Ok(resource) = default_resource() {
                let _ = otel_ctx_writer::process::global::publish(resource);
            }
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent_trace = span.parent().and_then(|parent| {
            let extensions = parent.extensions();
            let state = extensions.get::<SpanState>()?;
            (state.trace_id != [0; 16]).then_some(state.trace_id)
        });
        let trace_id = parent_trace.unwrap_or_else(new_trace_id);
        let mut state = self.state_for(trace_id, new_span_id(), GENERATED_TRACE_FLAGS);
        self.record_values(&mut state, attrs);
        let record = self.build(&state);
        state.spare = record.map(|record| (record, state.version));
        span.extensions_mut().insert(state);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(state) = extensions.get_mut::<SpanState>() else {
            return;
        };
        self.record_values(state, values);
        if let Some((mut spare, _)) = state.spare.take() {
            self.fill(&mut spare, state);
            state.spare = Some((spare, state.version));
        }
        // The record attached here now, if it is this span's, changes in place so that
        // a reader sees the new values at once; records attached or parked elsewhere take
        // them at their next enter.
        let attrs: Vec<(Key, &str)> = self
            .mapped
            .iter()
            .zip(&state.values)
            .filter_map(|(m, v)| Some((m.key, v.as_deref()?)))
            .collect();
        STATE.with(|thread_state| {
            let mut thread_state = thread_state.borrow_mut();
            if let Some(top) = thread_state.entered.last_mut() {
                if Arc::ptr_eq(&top.shared, &state.shared)
                    && top.record == attached_record_address()
                    && thread::update(state.trace_id, state.span_id, state.trace_flags, &attrs)
                        .is_ok()
                {
                    top.version = state.version;
                }
            }
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let span = id.into_u64();
        STATE.with(|state| {
            let mut state = state.borrow_mut();
            let parked = match &state.parked {
                Some(held) if held.is_current_for(span) => state.parked.take(),
                _ => None,
            };
            let held = match parked {
                Some(held) => held,
                None => match self.take_record(id, &ctx) {
                    Some(held) => held,
                    None => return,
                },
            };
            let address = held.record.as_ptr();
            let previous = held.record.attach();
            state.entered.push(Entered {
                span,
                shared: held.shared,
                record: address,
                version: held.version,
                previous,
            });
        });
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let evicted = STATE.with(|state| {
            let mut state = state.borrow_mut();
            let (returned, entry) = unlink(&mut state.entered, id)?;
            // Only the record this enter attached is kept: anything else that came out of
            // the slot was left there by other code after the enter.
            let record = returned
                .and_then(Attached::into_context)
                .filter(|record| record.as_ptr() == entry.record)?;
            if entry.shared.closed.load(Ordering::Acquire) {
                return None;
            }
            state.parked.replace(Held {
                span: entry.span,
                shared: entry.shared,
                version: entry.version,
                record,
            })
        });
        if let Some(evicted) = evicted {
            give_back(evicted, &ctx);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            // Frees the spare record now. A record attached or parked on a thread sees
            // `closed` and is freed there, at its exit or when it leaves the parking place.
            if let Some(state) = span.extensions_mut().remove::<SpanState>() {
                state.shared.closed.store(true, Ordering::Release);
            }
        }
    }
}

impl ThreadContextLayer {
    /// The span's record out of its state (or a new one, when it is attached or parked
    /// on another thread), up to date with the span's values.
    fn take_record<S>(&self, id: &Id, ctx: &Context<'_, S>) -> Option<Held>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let span = ctx.span(id)?;
        let mut extensions = span.extensions_mut();
        let state = extensions.get_mut::<SpanState>()?;
        #[cfg(feature = "opentelemetry")]
        otel::take_ids(state);
        let record = match state.spare.take() {
            Some((record, version)) if version == state.version => record,
            Some((mut record, _)) => {
                self.fill(&mut record, state);
                record
            }
            None => self.build(state)?,
        };
        Some(Held {
            span: id.into_u64(),
            shared: Arc::clone(&state.shared),
            version: state.version,
            record,
        })
    }
}

/// Returns a record that leaves this thread's parking place to its span, as the span's
/// spare; frees it if the span is closed or already has one.
fn give_back<S>(held: Held, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if held.shared.closed.load(Ordering::Acquire) {
        return;
    }
    let Some(span) = ctx.span(&Id::from_u64(held.span)) else {
        return;
    };
    let mut extensions = span.extensions_mut();
    if let Some(state) = extensions.get_mut::<SpanState>() {
        if Arc::ptr_eq(&state.shared, &held.shared) && state.spare.is_none() {
            state.spare = Some((held.record, held.version));
        }
    }
}

/// Removes the innermost enter of `id` from this thread's stack and returns what came
/// back from the slot for it, with the entry.
fn unlink(entered: &mut Vec<Entered>, id: &Id) -> Option<(Option<Attached>, Entered)> {
    let span = id.into_u64();
    let index = entered.iter().rposition(|e| e.span == span)?;
    let mut entry = entered.remove(index);
    let previous = entry.previous.take();
    let returned = match entered.get_mut(index) {
        // The innermost enter: the slot goes back to what it held before.
        None => thread::swap(previous),
        // An exit out of order: the enter just above took this span's record out of the
        // slot as its own `previous`. It inherits this entry's `previous` instead, so the
        // slot keeps the innermost record and later exits restore the right one.
        Some(above) => core::mem::replace(&mut above.previous, previous),
    };
    Some((returned, entry))
}

/// The ids [`ThreadContextLayer`] put in `span`'s record, when the span's subscriber is a
/// [`tracing_subscriber::Registry`] with the layer installed (and the span still open).
///
/// With the `opentelemetry` feature, the ids of `tracing-opentelemetry` replace the
/// generated ones at the span's first enter: ask after it.
pub fn span_ids(span: &tracing::Span) -> Option<SpanIds> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
        let data = registry.span(id)?;
        let extensions = data.extensions();
        let state = extensions.get::<SpanState>()?;
        Some(SpanIds {
            trace_id: state.trace_id,
            span_id: state.span_id,
            trace_flags: state.trace_flags,
        })
    })
    .flatten()
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::trace::TraceContextExt;

    use super::SpanState;

    /// Takes the ids of the span context `tracing-opentelemetry` activated for this span,
    /// on its first enter. That layer, installed below this one, runs its enter first and
    /// makes the span's OpenTelemetry context current; when it did not (no such layer, or
    /// context activation off), the generated ids stay.
    pub(super) fn take_ids(state: &mut SpanState) {
        if !state.ids_from_otel {
            return;
        }
        state.ids_from_otel = false;
        let ids = opentelemetry::Context::map_current(|cx| {
            let span = cx.span();
            let context = span.span_context();
            context.is_valid().then(|| {
                (
                    context.trace_id().to_bytes(),
                    context.span_id().to_bytes(),
                    context.trace_flags().to_u8(),
                )
            })
        });
        if let Some((trace_id, span_id, flags)) = ids {
            state.trace_id = trace_id;
            state.span_id = span_id;
            state.trace_flags = flags;
            state.bump();
        }
    }
}
