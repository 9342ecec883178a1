//! Owned records, attach/detach/swap, and updates of the attached record.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use otel_ctx_codec::record::{COMPACT_RECORD_SIZE, MAX_RECORD_SIZE};

use super::record::{Record, RecordPtr};
use super::{slot, ContextError, Key};

/// One thread-context record, owned: trace id, span id, trace flags and attributes.
///
/// The record is allocated once, when the context is created, with a fixed capacity
/// ([`ThreadContext::CAPACITY`] = 640 bytes, [`ThreadContext::COMPACT_CAPACITY`] = 64 bytes
/// — one cache line — or any size from 28 to 640 bytes); updates, appends, attach and
/// detach never allocate, lock or make a system call.
///
/// # Ownership
///
/// A context is either owned by a value of this type, or attached: owned by the calling
/// thread's `otel_thread_ctx_v1` slot. [`ThreadContext::attach`] moves the context into the
/// slot and hands back the one it replaces; [`detach`] takes it back out. While attached,
/// the record is changed with the free functions of this module ([`update`], [`append`],
/// [`truncate_attrs`]) that act on the calling thread's attached record. So the record the
/// slot points at can never be freed or moved while it is reachable, and dropping a context
/// is always safe. With the `std` feature a thread that exits with a context attached sets
/// its slot to NULL and then frees the record; without `std` there is no thread-exit hook,
/// so detach before the thread ends or the record leaks.
///
/// A detached context is a plain buffer: it may be sent to another thread and attached
/// there (the pattern of async runtimes, where a task carries its context from poll to
/// poll).
pub struct ThreadContext {
    record: RecordPtr,
}

// SAFETY: a detached context exclusively owns its heap block, like a `Box<[u8]>`; nothing
// else refers to it (an attached context is not a value of this type).
unsafe impl Send for ThreadContext {}
// SAFETY: `&ThreadContext` only allows reading the record.
unsafe impl Sync for ThreadContext {}

impl ThreadContext {
    /// Default capacity: the largest record the specification recommends (the eBPF
    /// profiler reads no more).
    pub const CAPACITY: usize = MAX_RECORD_SIZE;
    /// Capacity of a compact record, which fits one cache line.
    pub const COMPACT_CAPACITY: usize = COMPACT_RECORD_SIZE;

    /// A record of [`CAPACITY`](Self::CAPACITY) bytes with these ids and attributes.
    ///
    /// `trace_id` and `span_id` are W3C bytes; both zero (and `trace_flags` zero) means no
    /// trace. Errors if only one of the ids is set or `trace_flags` is set without ids
    /// (OTEP 4947: both ids or neither, and no flags without ids), if a value is over 255
    /// bytes, or if the attributes do not fit.
    pub fn new(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        trace_flags: u8,
        attrs: &[(Key, &str)],
    ) -> Result<Self, ContextError> {
        let mut context = Self::with_capacity(Self::CAPACITY)?;
        context.update(trace_id, span_id, trace_flags, attrs)?;
        Ok(context)
    }

    /// A record of [`COMPACT_CAPACITY`](Self::COMPACT_CAPACITY) bytes (36 bytes of
    /// attributes) with these ids and attributes.
    pub fn compact(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        trace_flags: u8,
        attrs: &[(Key, &str)],
    ) -> Result<Self, ContextError> {
        let mut context = Self::with_capacity(Self::COMPACT_CAPACITY)?;
        context.update(trace_id, span_id, trace_flags, attrs)?;
        Ok(context)
    }

    /// An empty, valid record (no trace, no attributes) of `capacity` bytes, 28 to 640.
    pub fn with_capacity(capacity: usize) -> Result<Self, ContextError> {
        Ok(Self {
            record: RecordPtr::allocate(capacity)?,
        })
    }

    /// The most bytes this record can take, header included.
    pub fn capacity(&self) -> usize {
        self.record.capacity()
    }

    /// `28 + attrs_data_size`: the bytes a reader copies.
    pub fn record_size(&self) -> usize {
        self.as_bytes().len()
    }

    /// The record as a reader sees it: the 28-byte header and `attrs_data_size` bytes of
    /// attrs-data (parse it with `otel_ctx_codec::record::RecordView`).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: a detached record is only written through `&mut self`.
        unsafe { self.record.bytes() }
    }

    /// The address of the record's first byte: the value the slot holds while attached.
    pub fn as_ptr(&self) -> *const u8 {
        self.record.as_ptr()
    }

    /// Number of attribute entries.
    pub fn attr_count(&self) -> usize {
        self.record.attr_count()
    }

    /// Replaces ids, flags and attributes. Errors (one id without the other, flags without
    /// ids, value over 255 bytes, record full) leave the record unchanged.
    pub fn update(
        &mut self,
        trace_id: [u8; 16],
        span_id: [u8; 8],
        trace_flags: u8,
        attrs: &[(Key, &str)],
    ) -> Result<(), ContextError> {
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.record.update(&trace_id, &span_id, trace_flags, attrs) }
    }

    /// Appends one attribute. Errors (value over 255 bytes, record full) leave the record
    /// unchanged. A later entry of the same key wins for readers.
    pub fn append(&mut self, key: Key, value: &str) -> Result<(), ContextError> {
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.record.append(key, value) }
    }

    /// Appends one attribute, cutting the value at a UTF-8 character boundary so that it
    /// fits (255 bytes at most). Returns the bytes of the value kept; errors only when not
    /// even an empty entry fits.
    pub fn append_truncated(&mut self, key: Key, value: &str) -> Result<usize, ContextError> {
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.record.append_truncated(key, value) }
    }

    /// Keeps the first `keep` attribute entries and drops the others. Returns the number
    /// of entries left.
    pub fn truncate_attrs(&mut self, keep: usize) -> usize {
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.record.truncate_attrs(keep) }
    }

    /// Makes this the calling thread's context and returns the one it replaces.
    ///
    /// This is the swap of async runtimes: attach the task's context before a poll, and
    /// attach (or [`detach`]) the returned one after it.
    #[inline]
    pub fn attach(self) -> Option<ThreadContext> {
        swap(Some(self))
    }

    /// Attaches this context until the returned guard is dropped, which restores the
    /// context attached before (or none).
    #[inline]
    pub fn attach_scoped(self) -> AttachGuard {
        AttachGuard {
            previous: self.attach(),
            _not_send: PhantomData,
        }
    }

    fn into_record(self) -> *mut Record {
        ManuallyDrop::new(self).record.as_record()
    }

    /// # Safety
    /// `record` must be NULL or come from [`ThreadContext::into_record`] (through the
    /// slot) and be owned by nothing else.
    unsafe fn from_record(record: *mut Record) -> Option<Self> {
        // SAFETY: guaranteed by the caller.
        NonNull::new(record).map(|r| Self {
            record: unsafe { RecordPtr::from_record(r) },
        })
    }
}

impl Drop for ThreadContext {
    fn drop(&mut self) {
        // SAFETY: a value of this type is never reachable from a slot (attaching consumes
        // it), so nothing else can use the record.
        unsafe { self.record.free() }
    }
}

impl fmt::Debug for ThreadContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.as_bytes();
        f.debug_struct("ThreadContext")
            .field("capacity", &self.capacity())
            .field("trace_id", &&bytes[..16])
            .field("span_id", &&bytes[16..24])
            .field("trace_flags", &bytes[25])
            .field("attrs_data", &&bytes[28..])
            .finish()
    }
}

/// Attaches `next` (or detaches, with `None`) and returns the context it replaces.
#[inline]
pub fn swap(next: Option<ThreadContext>) -> Option<ThreadContext> {
    let next = next.map_or(core::ptr::null_mut(), ThreadContext::into_record);
    let previous = slot::replace(next);
    #[cfg(feature = "std")]
    {
        if previous.is_null() && !next.is_null() {
            super::cleanup::arm();
        }
    }
    // SAFETY: the slot only ever holds NULL or records from `into_record`, and replacing
    // it gave up the slot's ownership of `previous`.
    unsafe { ThreadContext::from_record(previous) }
}

/// Detaches the calling thread's context (the slot becomes NULL) and returns it.
#[inline]
pub fn detach() -> Option<ThreadContext> {
    swap(None)
}

/// Whether a context is attached to the calling thread.
#[inline]
pub fn is_attached() -> bool {
    !slot::load().is_null()
}

/// The calling thread's attached record.
#[inline(always)]
fn attached() -> Result<RecordPtr, ContextError> {
    NonNull::new(slot::load())
        // SAFETY: a non-NULL slot holds a record from `into_record` that the slot owns;
        // it stays live until this thread replaces it.
        .map(|r| unsafe { RecordPtr::from_record(r) })
        .ok_or(ContextError::NotAttached)
}

/// Updates the attached record in place (`valid = 0`, write, `valid = 1`): ids, flags
/// and attributes. Errors leave the record unchanged and valid.
#[inline]
pub fn update(
    trace_id: [u8; 16],
    span_id: [u8; 8],
    trace_flags: u8,
    attrs: &[(Key, &str)],
) -> Result<(), ContextError> {
    let record = attached()?;
    // SAFETY: the attached record belongs to this thread's slot; only this thread writes it.
    unsafe { record.update(&trace_id, &span_id, trace_flags, attrs) }
}

/// Appends one attribute to the attached record (the bytes first, then the new
/// `attrs_data_size`). Errors leave the record unchanged and valid.
#[inline]
pub fn append(key: Key, value: &str) -> Result<(), ContextError> {
    let record = attached()?;
    // SAFETY: the attached record belongs to this thread's slot; only this thread writes it.
    unsafe { record.append(key, value) }
}

/// Appends one attribute to the attached record, cutting the value at a UTF-8 character
/// boundary so that it fits. Returns the bytes of the value kept.
#[inline]
pub fn append_truncated(key: Key, value: &str) -> Result<usize, ContextError> {
    let record = attached()?;
    // SAFETY: the attached record belongs to this thread's slot; only this thread writes it.
    unsafe { record.append_truncated(key, value) }
}

/// Keeps the first `keep` attribute entries of the attached record (by lowering
/// `attrs_data_size`). Returns the number of entries left.
#[inline]
pub fn truncate_attrs(keep: usize) -> Result<usize, ContextError> {
    let record = attached()?;
    // SAFETY: the attached record belongs to this thread's slot; only this thread writes it.
    Ok(unsafe { record.truncate_attrs(keep) })
}

/// Number of attribute entries of the attached record.
pub fn attached_attr_count() -> Result<usize, ContextError> {
    Ok(attached()?.attr_count())
}

/// Restores, when dropped, the context that was attached before
/// [`ThreadContext::attach_scoped`]; the context attached at that moment is dropped.
///
/// It stays on the thread that made it (neither `Send` nor `Sync`).
#[must_use = "dropping the guard at once detaches the context again"]
pub struct AttachGuard {
    previous: Option<ThreadContext>,
    _not_send: PhantomData<*mut ()>,
}

impl AttachGuard {
    /// Restores the previous context now and returns the one that was attached (to keep
    /// it for a later attach, e.g. the next poll of the same task).
    pub fn detach(mut self) -> Option<ThreadContext> {
        let current = swap(self.previous.take());
        // `previous` is `None` now: forgetting the guard skips its `Drop` and leaks nothing.
        core::mem::forget(self);
        current
    }
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        drop(swap(self.previous.take()));
    }
}

impl fmt::Debug for AttachGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttachGuard")
            .field("previous", &self.previous)
            .finish()
    }
}
