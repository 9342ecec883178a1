//! Futures that carry a thread context from poll to poll.
//!
//! A task of a multi-thread runtime runs a little on one worker thread, yields, and may be
//! polled next on another. The `otel_thread_ctx_v1` slot is per thread, so the task's
//! context has to be attached on whichever worker polls it, and the worker's own slot
//! put back when the poll returns. [`WithThreadContext`] does that around every
//! [`Future::poll`]: one [`swap`] in, one [`swap`] out, no allocation, lock or system
//! call per poll.
//!
//! Outside Linux there is no slot: [`ThreadContextExt::in_current_thread_context`] then
//! polls the future as it is, and `with_thread_context` (which takes a record, a Linux
//! type) is not built.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use otel_ctx_writer::thread::{Key, ThreadContext, ThreadContextExt};
//!
//! let context = ThreadContext::new([1; 16], [2; 8], 0x01, &[(Key::from_index(0), "/cart")])?;
//! let task = async { /* attached here, on every poll */ }.with_thread_context(context);
//! # drop(task);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::boxed::Box;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

#[cfg(target_os = "linux")]
use otel_ctx_codec::record::RecordView;

#[cfg(target_os = "linux")]
use super::{detach, swap, Attached, Key, ThreadContext};

/// Adapters that attach a thread context around every poll of a future.
///
/// Implemented for every [`Future`].
pub trait ThreadContextExt: Future + Sized {
    /// Attaches `context` around every poll of this future, on whatever thread polls it,
    /// and puts back what the slot held before when each poll returns.
    #[cfg(target_os = "linux")]
    fn with_thread_context(self, context: ThreadContext) -> WithThreadContext<Self> {
        WithThreadContext::new(self, Some(context))
    }

    /// Attaches, around every poll, a copy of the context attached to the calling thread
    /// now; or, when none is, runs every poll with no context (the slot NULL) rather than
    /// with whatever the polling thread happens to hold.
    ///
    /// The pattern of spawning: a task started inside a request keeps the request's
    /// context when the runtime moves it to another worker. The copy is made here, once
    /// (one allocation); another library's record in the slot is opaque to this crate and
    /// is not copied, so the task then runs with none.
    ///
    /// Outside Linux, the future is polled as it is.
    fn in_current_thread_context(self) -> WithThreadContext<Self> {
        #[cfg(target_os = "linux")]
        return WithThreadContext::new(self, current_copy());
        #[cfg(not(target_os = "linux"))]
        return WithThreadContext::new(self);
    }
}

impl<F: Future> ThreadContextExt for F {}

/// A future that attaches its own thread context around every poll of the one it wraps.
///
/// Made by [`ThreadContextExt::with_thread_context`] and
/// [`ThreadContextExt::in_current_thread_context`]. Each poll swaps the context into the
/// calling thread's slot, polls, and swaps the previous value back, which hands the context
/// back to the wrapper for the next poll: the context is owned by the slot exactly while
/// the wrapped future runs, and by the wrapper in between. In-place changes the wrapped
/// future makes to the attached record ([`update`](super::update),
/// [`append`](super::append)) therefore persist to the next poll. A panic in the wrapped
/// poll restores the slot too.
///
/// The wrapped future is boxed once, when the wrapper is made: that keeps the writer's
/// `unsafe` code in the files that own the slot and the records (a pinned field would
/// need an unsafe projection here) at the cost of one allocation per wrapper, none per
/// poll.
pub struct WithThreadContext<F> {
    inner: Pin<Box<F>>,
    /// `None` while a poll runs, or when the task runs with no context.
    #[cfg(target_os = "linux")]
    context: Option<ThreadContext>,
}

#[cfg(not(target_os = "linux"))]
impl<F: Future> WithThreadContext<F> {
    fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
        }
    }

    /// The wrapped future (pinned, as it may have been polled).
    pub fn into_inner(self) -> Pin<Box<F>> {
        self.inner
    }
}

#[cfg(not(target_os = "linux"))]
impl<F: Future> Future for WithThreadContext<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // No slot outside Linux: the wrapped future is polled as it is.
        self.get_mut().inner.as_mut().poll(cx)
    }
}

#[cfg(not(target_os = "linux"))]
impl<F> fmt::Debug for WithThreadContext<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithThreadContext").finish_non_exhaustive()
    }
}

#[cfg(target_os = "linux")]
impl<F: Future> WithThreadContext<F> {
    fn new(inner: F, context: Option<ThreadContext>) -> Self {
        Self {
            inner: Box::pin(inner),
            context,
        }
    }

    /// The context attached around each poll, if any.
    pub fn context(&self) -> Option<&ThreadContext> {
        self.context.as_ref()
    }

    /// The context, taken back, and the wrapped future (pinned, as it may have been polled).
    pub fn into_parts(self) -> (Pin<Box<F>>, Option<ThreadContext>) {
        (self.inner, self.context)
    }
}

#[cfg(target_os = "linux")]
impl<F: Future> Future for WithThreadContext<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Both fields are `Unpin` (the future is boxed), so the wrapper is too.
        let this = self.get_mut();
        let restore = Restore {
            previous: swap(this.context.take().map(Attached::Context)),
            context: &mut this.context,
        };
        let poll = this.inner.as_mut().poll(cx);
        drop(restore);
        poll
    }
}

#[cfg(target_os = "linux")]
impl<F> fmt::Debug for WithThreadContext<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithThreadContext")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

#[cfg(target_os = "linux")]
/// Puts back what the slot held before a poll, and takes the task's context back, when
/// dropped: at the end of the poll, or while a panic in it unwinds.
struct Restore<'a> {
    previous: Option<Attached>,
    context: &'a mut Option<ThreadContext>,
}

#[cfg(target_os = "linux")]
impl Drop for Restore<'_> {
    #[inline]
    fn drop(&mut self) {
        // What comes back is what the task left attached: its own context, possibly
        // updated in place or replaced by one it attached itself; another library's record
        // it left there is not this crate's to carry, and is forgotten.
        *self.context = swap(self.previous.take()).and_then(Attached::into_context);
    }
}

#[cfg(target_os = "linux")]
/// A copy of the context of this crate attached to the calling thread, if any.
fn current_copy() -> Option<ThreadContext> {
    // The attached record belongs to the slot; taking it out for the copy and putting the
    // same record straight back reads it without touching the slot's memory from here.
    // A reader that stops the thread between the two sees no context for that instant.
    let attached = detach()?;
    let copy = copy_of(&attached);
    drop(attached.attach());
    copy
}

#[cfg(target_os = "linux")]
/// A new record with the same capacity, ids, flags and attribute entries.
fn copy_of(context: &ThreadContext) -> Option<ThreadContext> {
    let view = RecordView::parse(context.as_bytes(), ThreadContext::CAPACITY).ok()?;
    let mut copy = ThreadContext::with_capacity(context.capacity()).ok()?;
    let header = &view.header;
    copy.update(header.trace_id, header.span_id, header.trace_flags, &[])
        .ok()?;
    for (key, value) in view.entries() {
        // Values were written from `&str`s, and the copy has the same capacity, so neither
        // step fails for a record of this crate.
        copy.append(Key::from_index(key), core::str::from_utf8(value).ok()?)
            .ok()?;
    }
    Some(copy)
}
