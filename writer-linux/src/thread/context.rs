//! Owned records, attach/detach/swap, and updates of the attached record.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use otel_ctx_codec::record::{COMPACT_RECORD_SIZE, MAX_RECORD_SIZE, RECORD_HEADER_SIZE};

use super::record::{Record, RecordPtr};
use super::slot::{self, Held};
use super::{ContextError, Key, RecordStorage};

/// A context [`ThreadContext::in_storage`] could not make: why, and the caller's storage,
/// handed back untouched.
#[derive(Debug)]
pub struct InStorageError {
    /// Why: the capacity was out of range.
    pub error: ContextError,
    /// The storage, for another try or another context.
    pub storage: &'static mut RecordStorage,
}

impl fmt::Display for InStorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InStorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The error alone, for callers that let the storage go with it (`?` in a function that
/// returns [`ContextError`]).
impl From<InStorageError> for ContextError {
    fn from(e: InStorageError) -> Self {
        e.error
    }
}

/// One thread-context record, owned: trace id, span id, trace flags and attributes.
///
/// The record is allocated once, when the context is created, with a fixed capacity
/// ([`ThreadContext::CAPACITY`] = 640 bytes, [`ThreadContext::COMPACT_CAPACITY`] = 64 bytes
/// — one cache line — or any size from 28 to 640 bytes); updates, appends, attach and
/// detach never allocate, lock or make a system call.
///
/// Without a heap (or without the `alloc` feature), the record lives in a
/// [`RecordStorage`] the caller provides ([`ThreadContext::in_storage`], for example from a
/// [`RecordPool`](super::RecordPool)): the same record, written by the same code, attached,
/// detached and swapped by the same functions; dropping such a context forgets its storage
/// rather than freeing it, and [`ThreadContext::into_storage`] gives the storage back.
///
/// # Ownership
///
/// A context is either owned by a value of this type, or attached: owned by the calling
/// thread's `otel_thread_ctx_v1` slot. [`ThreadContext::attach`] moves the context into the
/// slot and hands back what it replaces; [`detach`] takes it back out. While attached,
/// the record is changed with the free functions of this module ([`update`], [`append`],
/// [`truncate_attrs`]) that act on the calling thread's attached record. So the record the
/// slot points at can never be freed or moved while it is reachable, and dropping a context
/// is always safe. With the `std` feature a thread that exits with a context attached sets
/// its slot to NULL and then frees the record; without `std` there is no thread-exit hook,
/// so detach before the thread ends or the record leaks.
///
/// # Other libraries on the same slot
///
/// `otel_thread_ctx_v1` is one slot per thread for the whole process: a C library or
/// another SDK may attach its own records to it. This crate tells its own records apart
/// from theirs without touching their memory, and never reads, writes or frees a record it
/// did not allocate. Attaching over another library's record hands it back as
/// [`Attached::Foreign`], to be put back afterwards ([`swap`], [`Attached::attach`], or
/// the drop of an [`AttachGuard`]); [`detach`] and the thread-exit hook leave it in the
/// slot; the in-place changes refuse it with [`ContextError::ForeignRecordAttached`].
///
/// A detached context is a plain buffer: it may be sent to another thread and attached
/// there (the pattern of async runtimes, where a task carries its context from poll to
/// poll).
pub struct ThreadContext {
    record: RecordPtr,
}

// SAFETY: a detached context exclusively owns its block (on the heap, like a `Box<[u8]>`,
// or the caller's `&'static mut RecordStorage`); nothing else refers to it (an attached
// context is not a value of this type).
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
    #[cfg(feature = "alloc")]
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
    #[cfg(feature = "alloc")]
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
    #[cfg(feature = "alloc")]
    pub fn with_capacity(capacity: usize) -> Result<Self, ContextError> {
        Ok(Self {
            record: RecordPtr::allocate(capacity)?,
        })
    }

    /// An empty, valid record (no trace, no attributes) of `capacity` bytes, 28 to 640, in
    /// the caller's `storage`, which the context owns from now on: no allocation.
    ///
    /// Whatever `storage` held before is overwritten. Errors only for a capacity out of
    /// range, and then the storage is handed back with the error, untouched.
    pub fn in_storage(
        storage: &'static mut RecordStorage,
        capacity: usize,
    ) -> Result<Self, InStorageError> {
        if !(RECORD_HEADER_SIZE..=MAX_RECORD_SIZE).contains(&capacity) {
            return Err(InStorageError {
                error: ContextError::CapacityOutOfRange { capacity },
                storage,
            });
        }
        // The block's first byte: the storage is `repr(C)`, its bytes at offset 0.
        let block = NonNull::from(storage).cast::<u8>();
        Ok(Self {
            // SAFETY: the `&'static mut` is given up here: the block is the record's alone
            // until `into_storage` rebuilds it; the capacity is in range (checked above).
            record: unsafe { RecordPtr::in_storage(block, capacity) },
        })
    }

    /// The storage of a context made with [`in_storage`](Self::in_storage), given back
    /// (for another context); `None` for a context on the heap, which is freed.
    pub fn into_storage(self) -> Option<&'static mut RecordStorage> {
        let this = ManuallyDrop::new(self);
        match this.record.storage() {
            // SAFETY: the block of a context made in a `&'static mut RecordStorage`,
            // which the record owned alone and which nothing reaches any more: the context
            // is consumed and was not attached (an attached context is not a value).
            Some(block) => Some(unsafe { &mut *block.as_ptr().cast::<RecordStorage>() }),
            None => {
                #[cfg(feature = "alloc")]
                // SAFETY: as in `drop`: a heap record reachable from no slot.
                unsafe {
                    this.record.free()
                };
                None
            }
        }
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

    /// Makes this the calling thread's context and returns what the slot held before: a
    /// context of this crate, another library's record, or `None`.
    ///
    /// This is the swap of async runtimes: attach the task's context before a poll, and
    /// put the returned value back after it with [`swap`], which hands the task's context
    /// back. [`Attached::into_context`] turns the returned value into a context of this
    /// crate where nothing else is expected.
    #[inline]
    pub fn attach(self) -> Option<Attached> {
        swap(Some(Attached::Context(self)))
    }

    /// Attaches this context until the returned guard is dropped, which restores what the
    /// slot held before (a context, another library's record, or nothing).
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
    /// `record` must come from [`ThreadContext::into_record`] (through the slot) and be
    /// owned by nothing else.
    unsafe fn from_record(record: NonNull<Record>) -> Self {
        Self {
            // SAFETY: guaranteed by the caller.
            record: unsafe { RecordPtr::from_record(record) },
        }
    }
}

impl Drop for ThreadContext {
    fn drop(&mut self) {
        // A record in a caller's storage is forgotten: the storage is `'static`.
        #[cfg(feature = "alloc")]
        if self.record.storage().is_none() {
            // SAFETY: a value of this type is never reachable from a slot (attaching
            // consumes it), so nothing else can use the record.
            unsafe { self.record.free() }
        }
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

/// What the calling thread's slot held, taken out of it: a context of this crate, or a
/// record another library attached.
///
/// Returned by [`ThreadContext::attach`] and [`swap`]; put it back with
/// [`Attached::attach`] or [`swap`]. Dropping it drops a context of this crate (freeing
/// its record) and forgets another library's record (whose memory stays its owner's).
pub enum Attached {
    /// A context of this crate, owned again.
    Context(ThreadContext),
    /// A record another library attached to the same slot.
    Foreign(ForeignRecord),
}

impl Attached {
    /// The context of this crate, or `None` for another library's record (which is then
    /// forgotten, not freed).
    #[inline]
    pub fn into_context(self) -> Option<ThreadContext> {
        match self {
            Self::Context(context) => Some(context),
            Self::Foreign(_) => None,
        }
    }

    /// Puts this back in the calling thread's slot and returns what the slot held.
    #[inline]
    pub fn attach(self) -> Option<Attached> {
        swap(Some(self))
    }

    /// The address of the record: the value the slot holds while it is attached.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            Self::Context(context) => context.as_ptr(),
            Self::Foreign(foreign) => foreign.as_ptr(),
        }
    }
}

impl From<ThreadContext> for Attached {
    fn from(context: ThreadContext) -> Self {
        Self::Context(context)
    }
}

impl From<ForeignRecord> for Attached {
    fn from(foreign: ForeignRecord) -> Self {
        Self::Foreign(foreign)
    }
}

impl fmt::Debug for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Context(context) => f.debug_tuple("Context").field(context).finish(),
            Self::Foreign(foreign) => f.debug_tuple("Foreign").field(foreign).finish(),
        }
    }
}

/// A record another library attached to the calling thread's `otel_thread_ctx_v1`, taken
/// out of the slot to attach one of this crate's: an opaque pointer.
///
/// Its memory belongs to the other library: this crate never reads it, writes it or frees
/// it, and dropping this value only forgets the pointer. Attaching it again
/// ([`Attached::attach`], [`swap`], the drop of an [`AttachGuard`]) restores the slot as
/// it was, including which context of this crate the other library had replaced, so that
/// one is recognised as this crate's again when the other library puts it back. It stays
/// on the thread whose slot held it (neither `Send` nor `Sync`).
pub struct ForeignRecord {
    record: NonNull<Record>,
    /// The shadow when the record was taken out (see `slot.rs`).
    below: *mut Record,
}

impl ForeignRecord {
    /// The address of the record: the value the slot held.
    pub fn as_ptr(&self) -> *const u8 {
        self.record.as_ptr().cast_const().cast()
    }
}

impl fmt::Debug for ForeignRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ForeignRecord")
            .field(&self.as_ptr())
            .finish()
    }
}

/// Attaches `next` (or detaches, with `None`) and returns what the slot held: a context
/// of this crate, another library's record, or `None`.
///
/// Unlike [`detach`], `swap(None)` also takes another library's record out of the slot,
/// and hands it back to be put back later.
#[inline]
pub fn swap(next: Option<Attached>) -> Option<Attached> {
    // The shadow is the record itself for a context of this crate, the `below` of another
    // library's record being put back, NULL for none.
    let (record, shadow) = match next {
        None => (core::ptr::null_mut(), core::ptr::null_mut()),
        Some(Attached::Context(context)) => {
            let record = context.into_record();
            (record, record)
        }
        Some(Attached::Foreign(foreign)) => (foreign.record.as_ptr(), foreign.below),
    };
    let previous = slot::swap(record, shadow);
    // A slot that held no context of this crate gets one: arm the exit hook. (One of this
    // crate's contexts that comes back later from under a foreign record was attached on
    // this thread first, since `ForeignRecord` is not `Send`: armed then.)
    #[cfg(feature = "std")]
    if !record.is_null() && record == shadow && !matches!(previous, Held::Ours(_)) {
        exit_hook::arm();
    }
    match previous {
        Held::Empty => None,
        // SAFETY: a record the slot held and the shadow names is a record of this crate
        // from `into_record`, owned by the slot; replacing it gave up that ownership.
        Held::Ours(record) => Some(Attached::Context(unsafe {
            ThreadContext::from_record(record)
        })),
        Held::Foreign { record, below } => Some(Attached::Foreign(ForeignRecord { record, below })),
    }
}

/// Detaches the calling thread's context (the slot becomes NULL) and returns it.
///
/// Only a context of this crate is detached: when the slot holds a record another library
/// attached, it stays there and `None` is returned ([`swap`] takes it out, if that is
/// really meant).
#[inline]
pub fn detach() -> Option<ThreadContext> {
    // SAFETY: `detach_ours` returns a record of this crate that the slot owned and no
    // longer holds.
    slot::detach_ours().map(|record| unsafe { ThreadContext::from_record(record) })
}

/// Whether a context of this crate is attached to the calling thread (a record another
/// library attached does not count).
#[inline]
pub fn is_attached() -> bool {
    matches!(slot::held(), Held::Ours(_))
}

/// The calling thread's attached record, if it is one of this crate's.
#[inline(always)]
fn attached() -> Result<RecordPtr, ContextError> {
    match slot::held() {
        // SAFETY: a record of this crate held by the slot stays live until this thread
        // replaces it.
        Held::Ours(record) => Ok(unsafe { RecordPtr::from_record(record) }),
        Held::Empty => Err(ContextError::NotAttached),
        Held::Foreign { .. } => Err(ContextError::ForeignRecordAttached),
    }
}

/// Updates the attached record in place (`valid = 0`, write, `valid = 1`): ids, flags
/// and attributes. Errors leave the record unchanged and valid.
///
/// Like every in-place change below, it refuses another library's record in the slot
/// ([`ContextError::ForeignRecordAttached`]) and leaves it untouched.
// Always inlined: the caller's attribute list is then written straight from where the
// caller built it, and the result needs no memory.
#[inline(always)]
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

/// Restores, when dropped, what the slot held before [`ThreadContext::attach_scoped`] (a
/// context, another library's record, or nothing); the context attached at that moment is
/// dropped.
///
/// It stays on the thread that made it (neither `Send` nor `Sync`).
#[must_use = "dropping the guard at once detaches the context again"]
pub struct AttachGuard {
    previous: Option<Attached>,
    _not_send: PhantomData<*mut ()>,
}

impl AttachGuard {
    /// Restores the previous context now and returns the one that was attached (to keep
    /// it for a later attach, e.g. the next poll of the same task). A record another
    /// library attached meanwhile is taken out of the slot and forgotten, not returned.
    pub fn detach(mut self) -> Option<ThreadContext> {
        let current = swap(self.previous.take()).and_then(Attached::into_context);
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

/// Thread exit with a context attached (feature `std`): the slot is set to NULL, then the
/// record is freed. A record another library attached is left in the slot: it is not this
/// crate's to free (its owner's own exit hook may still look for it there).
#[cfg(feature = "std")]
mod exit_hook {
    use std::thread_local;

    /// A thread-local value whose destructor detaches and frees the thread's context.
    struct DetachOnExit;

    impl Drop for DetachOnExit {
        fn drop(&mut self) {
            // `detach` stores NULL in the slot before the record is freed (the returned
            // context drops after the store), so a reader never follows the slot to freed
            // memory. It takes only a context of this crate: another library's record
            // stays.
            drop(super::detach());
        }
    }

    thread_local! {
        static DETACH_ON_EXIT: DetachOnExit = const { DetachOnExit };
    }

    /// Registers the exit hook of the calling thread; called when a context gets attached
    /// to a thread that had none, so detach-then-attach cycles pay one thread-local access.
    ///
    /// During the thread's own thread-local destruction the hook may already be gone: a
    /// context attached then is never freed (it is not reachable from freed memory either).
    #[inline]
    pub(super) fn arm() {
        let _ = DETACH_ON_EXIT.try_with(|_| ());
    }
}
