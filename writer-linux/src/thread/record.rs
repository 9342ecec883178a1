//! The memory of one record and the writes of the writer protocol.
//!
//! A record lives in one block, on the heap (feature `alloc`) or in a caller's
//! [`RecordStorage`](super::RecordStorage), laid out the same way: a 64-byte prefix that
//! holds the record's capacity and where the block came from, then the record itself,
//! which therefore starts on a cache line (a 64-byte compact record is one line) and is
//! 2-aligned as the specification requires. The slot points at the record, not at the
//! block, so that an external reader sees exactly the bytes of the specification; the
//! prefix lets the writer turn a pointer taken back from the slot into an owned context
//! again.
//!
//! Every write goes through raw pointers, never through a `&mut` to the bytes: a signal
//! handler on this thread may read the record between any two instructions. A reader
//! runs while the thread is stopped, so what it sees is the stores the compiler emitted
//! before the stop, in the order it emitted them: the writer protocol is a matter of
//! signal-fence semantics (C++'s `atomic_signal_fence`, Rust's `compiler_fence`), with
//! no CPU barrier. By the language's rules a fence orders only atomic (and, for the
//! compiler, volatile) accesses, and a release fence orders nothing before a *later*
//! store. So every store a reader can see is atomic, volatile or an `asm!` store, and
//! every step is separated by `compiler_fence(SeqCst)`:
//!
//! - `valid` and `attrs_data_size`: atomic stores (`attrs_data_size` is one 16-bit store,
//!   never two bytes);
//! - trace id, span id and trace flags: atomic stores (the record is 64-aligned, so the
//!   ids are two, then one, aligned 8-byte words);
//! - attribute entries, at any offset: stores of 1, 2, 8 or 16 bytes that the compiler
//!   emits as they are (volatile, or one store instruction in `asm!`, which the compiler
//!   treats as an opaque memory access), composed in registers (`store.rs`:
//!   [`write_entry_at`]).
//!
//! The ids and entries are written only where the protocol makes them invisible (inside
//! `valid = 0`, or past `attrs_data_size`). An entry's 8-byte store may run up to
//! `WRITE_AHEAD` bytes past the entry: those bytes are just as invisible (the next entry
//! of an update overwrites them, the rest is past `attrs_data_size`), and the record's heap
//! block has room for them past its capacity. A record is only ever written by one thread
//! at a time.
//!
//! The protocol's steps ([`write_update`], [`write_append`], [`write_truncate`]) write
//! through [`RecordWrites`]: [`RecordPtr`] writes the heap record, and the loom model
//! (`loom/`, under `--cfg loom`) runs the same functions on a model record to check them
//! against a reader that stops the thread anywhere.

#[cfg(feature = "alloc")]
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{compiler_fence, AtomicU16, AtomicU64, AtomicU8, Ordering};

use otel_ctx_codec::attrs::{ENTRY_OVERHEAD, MAX_VALUE_LEN};
use otel_ctx_codec::record::{
    ATTRS_DATA_OFFSET, ATTRS_DATA_SIZE_OFFSET, MAX_RECORD_SIZE, RECORD_HEADER_SIZE, SPAN_ID_OFFSET,
    TRACE_FLAGS_OFFSET, TRACE_ID_OFFSET, VALID, VALID_OFFSET,
};

use super::store::write_entry_at;
#[cfg(feature = "alloc")]
use super::store::WRITE_AHEAD;
use super::{ContextError, Key};

/// Opaque type of the bytes the slot points at (only ever used behind a pointer).
pub(crate) enum Record {}

/// Bytes before the record in its block.
pub(crate) const PREFIX: usize = 64;
/// Alignment of the block, hence of the record: one cache line.
pub(crate) const BLOCK_ALIGN: usize = 64;
/// Offset in the prefix of the byte that says where the block came from.
const ORIGIN_OFFSET: usize = 2;
/// The block is the heap's (zero-filled by the allocation).
#[cfg(feature = "alloc")]
const ORIGIN_HEAP: u8 = 0;
/// The block is a caller's [`RecordStorage`](super::RecordStorage).
const ORIGIN_STORAGE: u8 = 1;

const _: () = {
    assert!(PREFIX.is_multiple_of(BLOCK_ALIGN));
    assert!(ATTRS_DATA_SIZE_OFFSET.is_multiple_of(2));
    assert!(MAX_RECORD_SIZE <= u16::MAX as usize);
    // The ids are written as aligned 8-byte words of a 64-aligned record.
    assert!(TRACE_ID_OFFSET.is_multiple_of(8) && SPAN_ID_OFFSET.is_multiple_of(8));
};

#[cfg(feature = "alloc")]
/// Layout of the heap block of a record of `capacity` bytes, with room for the bytes an
/// entry's write may store past the end of the record ([`WRITE_AHEAD`]).
fn block_layout(capacity: usize) -> Layout {
    match Layout::from_size_align(PREFIX + capacity + WRITE_AHEAD, BLOCK_ALIGN) {
        Ok(layout) => layout,
        // `capacity` is at most `MAX_RECORD_SIZE`, checked by every caller.
        Err(_) => unreachable!("record capacity is bounded by MAX_RECORD_SIZE"),
    }
}

/// An owned pointer to a record's first byte; freeing is explicit ([`RecordPtr::free`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordPtr(NonNull<u8>);

impl RecordPtr {
    /// Allocates an empty record (no ids, no attributes, `valid = 1`) of `capacity` bytes.
    #[cfg(feature = "alloc")]
    pub(crate) fn allocate(capacity: usize) -> Result<Self, ContextError> {
        if !(RECORD_HEADER_SIZE..=MAX_RECORD_SIZE).contains(&capacity) {
            return Err(ContextError::CapacityOutOfRange { capacity });
        }
        let layout = block_layout(capacity);
        // SAFETY: the layout has a non-zero size (at least PREFIX + 28 bytes).
        let block = unsafe { alloc::alloc::alloc_zeroed(layout) };
        let Some(block) = NonNull::new(block) else {
            alloc::alloc::handle_alloc_error(layout);
        };
        // SAFETY: the block is `PREFIX + capacity` bytes and 64-aligned: the prefix holds
        // the capacity as a u16 at its start, the record starts at `PREFIX`.
        unsafe {
            block.as_ptr().cast::<u16>().write(capacity as u16);
            let record = block.add(PREFIX);
            // Zeroed memory is a record with zero ids, zero flags and no attributes: it
            // only lacks `valid = 1`. Nothing can see it yet, so no ordering is needed.
            record.as_ptr().add(VALID_OFFSET).write(VALID);
            Ok(Self(record))
        }
    }

    /// Makes an empty record (no ids, no attributes, `valid = 1`) of `capacity` bytes in
    /// the caller's block `storage`, which must be `PREFIX + MAX_RECORD_SIZE +
    /// WRITE_AHEAD` bytes, 64-aligned.
    ///
    /// # Safety
    /// `storage` must be exclusively the record's from now on, until it is given back by
    /// [`RecordPtr::storage`]; `capacity` must be 28 to 640 (the caller checked it, so
    /// that it can hand the storage back when it is not).
    pub(crate) unsafe fn in_storage(storage: NonNull<u8>, capacity: usize) -> Self {
        debug_assert!((RECORD_HEADER_SIZE..=MAX_RECORD_SIZE).contains(&capacity));
        // SAFETY: the block is the caller's, large enough for the prefix and a record of
        // the largest capacity, and 64-aligned: the prefix holds the capacity as a u16 at
        // its start and the origin byte, the record starts at `PREFIX`. Nothing can see the
        // record yet, so plain writes need no ordering.
        unsafe {
            storage.as_ptr().cast::<u16>().write(capacity as u16);
            storage.as_ptr().add(ORIGIN_OFFSET).write(ORIGIN_STORAGE);
            let record = storage.add(PREFIX);
            // A record with zero ids, zero flags and no attributes, whatever the storage
            // held before.
            record.as_ptr().write_bytes(0, RECORD_HEADER_SIZE);
            record.as_ptr().add(VALID_OFFSET).write(VALID);
            Self(record)
        }
    }

    /// The caller's block the record lives in, or `None` for a heap block.
    pub(crate) fn storage(self) -> Option<NonNull<u8>> {
        // SAFETY: the prefix of a live block: the origin byte never changes after the
        // block was made.
        let block = unsafe { self.0.sub(PREFIX) };
        // SAFETY: as above.
        (unsafe { block.add(ORIGIN_OFFSET).read() } == ORIGIN_STORAGE).then_some(block)
    }

    /// Rebuilds the pointer from the address the slot held.
    ///
    /// # Safety
    /// `record` must come from [`RecordPtr::as_record`] on a record not freed since: a
    /// record of this crate, never one another library attached to the slot (it has no
    /// capacity prefix, and is not ours to write or free).
    pub(crate) unsafe fn from_record(record: NonNull<Record>) -> Self {
        Self(record.cast())
    }

    /// The address to store in the slot.
    pub(crate) fn as_record(self) -> *mut Record {
        self.0.as_ptr().cast()
    }

    /// The record's first byte.
    pub(crate) fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// Frees the block, which must be a heap block.
    ///
    /// # Safety
    /// The record must be live, reachable from no slot, and not used afterwards.
    #[cfg(feature = "alloc")]
    pub(crate) unsafe fn free(self) {
        let capacity = self.capacity();
        debug_assert_eq!(
            // SAFETY: the prefix of a live block.
            unsafe { self.0.as_ptr().sub(PREFIX).add(ORIGIN_OFFSET).read() },
            ORIGIN_HEAP
        );
        // SAFETY: the block starts `PREFIX` bytes before the record and was allocated
        // with this layout (the capacity in its prefix never changes).
        unsafe { alloc::alloc::dealloc(self.0.as_ptr().sub(PREFIX), block_layout(capacity)) }
    }

    /// Bytes the record may take, header included.
    pub(crate) fn capacity(self) -> usize {
        // SAFETY: the prefix of a live block holds the capacity as a 2-aligned u16.
        usize::from(unsafe { self.0.as_ptr().sub(PREFIX).cast::<u16>().read() })
    }

    fn valid(&self) -> &AtomicU8 {
        // SAFETY: byte 24 of a live record, only ever accessed atomically. The reference
        // lives as long as this borrow, during which the record stays live.
        unsafe { AtomicU8::from_ptr(self.0.as_ptr().add(VALID_OFFSET)) }
    }

    fn attrs_data_size_atomic(&self) -> &AtomicU16 {
        // SAFETY: bytes 26..28 of a live record, 2-aligned because the record is 64-aligned,
        // only ever accessed atomically after allocation. The reference lives as long as
        // this borrow, during which the record stays live.
        unsafe { AtomicU16::from_ptr(self.0.as_ptr().add(ATTRS_DATA_SIZE_OFFSET).cast()) }
    }

    /// The current `attrs_data_size`.
    pub(crate) fn attrs_data_size(self) -> usize {
        usize::from(self.attrs_data_size_atomic().load(Ordering::Relaxed))
    }

    /// The bytes a reader copies: the header and `attrs_data_size` bytes of attrs-data.
    ///
    /// # Safety
    /// No write to the record may happen while the returned slice is alive.
    pub(crate) unsafe fn bytes<'a>(self) -> &'a [u8] {
        let len = RECORD_HEADER_SIZE + self.attrs_data_size();
        // SAFETY: `attrs_data_size` never exceeds `capacity - 28`, so the slice is inside
        // the record; the caller excludes writes for its lifetime.
        unsafe { core::slice::from_raw_parts(self.0.as_ptr(), len) }
    }

    /// In-place update: `valid = 0`, write ids, flags and attrs-data, `valid = 1`.
    ///
    /// Everything is checked before the first write (the ids and flags against the rules
    /// of the specification, the entries against the capacity): on error the record is
    /// untouched (and stays valid).
    ///
    /// # Safety
    /// The record must be live and written by no other thread.
    #[inline(always)]
    pub(crate) unsafe fn update(
        self,
        trace_id: &[u8; 16],
        span_id: &[u8; 8],
        trace_flags: u8,
        attrs: &[(Key, &str)],
    ) -> Result<(), ContextError> {
        check_ids(trace_id, span_id, trace_flags)?;
        let attrs_data_size = checked_attrs_len(attrs, self.capacity())?;
        // SAFETY: the caller's guarantees; `checked_attrs_len` bounded the entries by the
        // capacity and every value by 255 bytes.
        unsafe {
            write_update(
                self,
                trace_id,
                span_id,
                trace_flags,
                attrs,
                attrs_data_size as u16,
            )
        };
        Ok(())
    }

    /// Appends one entry past `attrs_data_size`, then publishes the new size.
    ///
    /// # Safety
    /// The record must be live and written by no other thread.
    #[inline]
    pub(crate) unsafe fn append(self, key: Key, value: &str) -> Result<(), ContextError> {
        let len = value.len();
        if len > MAX_VALUE_LEN {
            return Err(ContextError::ValueTooLong {
                key: key.index(),
                len,
            });
        }
        let size = self.attrs_data_size();
        let needed = RECORD_HEADER_SIZE + size + ENTRY_OVERHEAD + len;
        let capacity = self.capacity();
        if needed > capacity {
            return Err(ContextError::RecordFull { needed, capacity });
        }
        // SAFETY: `needed <= capacity`, so the entry fits inside the record.
        unsafe { self.publish_entry(size, key, value.as_bytes()) };
        Ok(())
    }

    /// Like [`RecordPtr::append`], but cuts the value at the last UTF-8 character
    /// boundary that fits (in 255 bytes and in the record). Returns the bytes kept.
    ///
    /// # Safety
    /// The record must be live and written by no other thread.
    pub(crate) unsafe fn append_truncated(
        self,
        key: Key,
        value: &str,
    ) -> Result<usize, ContextError> {
        let size = self.attrs_data_size();
        let capacity = self.capacity();
        let used = RECORD_HEADER_SIZE + size + ENTRY_OVERHEAD;
        if used > capacity {
            return Err(ContextError::RecordFull {
                needed: used,
                capacity,
            });
        }
        let room = (capacity - used).min(MAX_VALUE_LEN);
        let mut keep = value.len().min(room);
        while !value.is_char_boundary(keep) {
            keep -= 1;
        }
        // SAFETY: `used + keep <= capacity`, so the entry fits inside the record.
        unsafe { self.publish_entry(size, key, &value.as_bytes()[..keep]) };
        Ok(keep)
    }

    /// Writes one entry at attrs-data offset `at` (the current size), then stores the new
    /// size.
    ///
    /// # Safety
    /// The entry must fit in the record, `value` must be at most 255 bytes.
    #[inline(always)]
    unsafe fn publish_entry(self, at: usize, key: Key, value: &[u8]) {
        // SAFETY: guaranteed by the caller.
        unsafe { write_append(self, at, key, value) }
    }

    /// Keeps the first `keep` entries (all of them when there are fewer) by lowering
    /// `attrs_data_size`. Returns the number of entries kept.
    ///
    /// # Safety
    /// The record must be live and written by no other thread.
    pub(crate) unsafe fn truncate_attrs(self, keep: usize) -> usize {
        // SAFETY: guaranteed by the caller.
        unsafe { write_truncate(self, keep) }
    }

    /// Number of entries in attrs-data.
    pub(crate) fn attr_count(self) -> usize {
        let size = self.attrs_data_size();
        let data = self.0.as_ptr().wrapping_add(ATTRS_DATA_OFFSET);
        let mut at = 0;
        let mut count = 0;
        while at + ENTRY_OVERHEAD <= size {
            // SAFETY: `at + 1 < size`, inside the attrs-data this writer produced.
            let len = usize::from(unsafe { data.add(at + 1).read() });
            at += ENTRY_OVERHEAD + len;
            count += 1;
        }
        count
    }
}

/// Checks the ids and flags against OTEP 4947: "if either trace-id or span-id is set,
/// both MUST be set", and trace flags are "zero when trace-id/span-id are not set".
#[inline(always)]
fn check_ids(trace_id: &[u8; 16], span_id: &[u8; 8], trace_flags: u8) -> Result<(), ContextError> {
    let has_trace = u128::from_ne_bytes(*trace_id) != 0;
    let has_span = u64::from_ne_bytes(*span_id) != 0;
    match (has_trace, has_span) {
        (true, true) => Ok(()),
        (true, false) => Err(ContextError::TraceIdWithoutSpanId),
        (false, true) => Err(ContextError::SpanIdWithoutTraceId),
        (false, false) if trace_flags != 0 => {
            Err(ContextError::TraceFlagsWithoutIds { trace_flags })
        }
        (false, false) => Ok(()),
    }
}

/// Checks every value length and the total, and returns the `attrs_data_size` the
/// entries take.
#[inline(always)]
fn checked_attrs_len(attrs: &[(Key, &str)], capacity: usize) -> Result<usize, ContextError> {
    // The lengths summed, and OR-ed together, which is over 255 exactly when one of them
    // is. Up to 4 entries (most updates), one straight run of loads and adds for the
    // count at hand: no loop to set up.
    let len = |i: usize| attrs[i].1.len();
    let (values, any_len) = match attrs.len() {
        0 => (0, 0),
        1 => (len(0), len(0)),
        2 => (len(0) + len(1), len(0) | len(1)),
        3 => (len(0) + len(1) + len(2), len(0) | len(1) | len(2)),
        4 => (
            len(0) + len(1) + len(2) + len(3),
            len(0) | len(1) | len(2) | len(3),
        ),
        _ => attrs.iter().fold((0, 0), |(values, any_len), (_, value)| {
            (values + value.len(), any_len | value.len())
        }),
    };
    let total = values + ENTRY_OVERHEAD * attrs.len();
    if any_len > MAX_VALUE_LEN {
        return Err(value_too_long(attrs));
    }
    let needed = RECORD_HEADER_SIZE + total;
    if needed > capacity {
        return Err(ContextError::RecordFull { needed, capacity });
    }
    Ok(total)
}

/// The error for the first entry of `attrs` whose value is over 255 bytes (there is one).
#[cold]
#[inline(never)]
fn value_too_long(attrs: &[(Key, &str)]) -> ContextError {
    let (key, len) = attrs
        .iter()
        .map(|(key, value)| (key.index(), value.len()))
        .find(|&(_, len)| len > MAX_VALUE_LEN)
        .unwrap_or((0, 0));
    ContextError::ValueTooLong { key, len }
}

/// The stores of the writer protocol on one record: the atomic `valid` and
/// `attrs_data_size`, the atomic ids, the entries (volatile or `asm!` stores), and the
/// compiler fences between the steps. [`RecordPtr`] implements it on the heap record; the loom model, on a model
/// record that sees every store and fence.
pub(crate) trait RecordWrites: Copy {
    /// Stores `valid` with one atomic byte store.
    fn store_valid(self, valid: u8);
    /// `attrs_data_size`, as this thread last stored it.
    fn load_attrs_data_size(self) -> u16;
    /// Stores `attrs_data_size` with one atomic 16-bit store, never two bytes.
    fn store_attrs_data_size(self, attrs_data_size: u16);
    /// Writes `trace_id`, `span_id` and `trace_flags` with atomic stores (of any width:
    /// the protocol puts them inside `valid = 0`).
    ///
    /// # Safety
    /// The record must be live and written by no other thread.
    unsafe fn write_ids(self, trace_id: &[u8; 16], span_id: &[u8; 8], trace_flags: u8);
    /// Writes the entry `key, len, value` at attrs-data offset `at` with volatile or `asm!`
    /// stores (of any width: the protocol puts them inside `valid = 0` or past
    /// `attrs_data_size`).
    /// They may also store up to [`WRITE_AHEAD`] bytes past the entry, as invisible as
    /// the entry and overwritten by the next one (or past the capacity, inside the heap
    /// block).
    ///
    /// # Safety
    /// The record must be live and written by no other thread; the entry must fit in it
    /// and `value` must be at most 255 bytes.
    unsafe fn write_entry(self, at: usize, key: u8, value: &[u8]);
    /// Writes the entries one after the other from attrs-data offset 0, as
    /// [`RecordWrites::write_entry`] does each.
    ///
    /// # Safety
    /// The record must be live and written by no other thread; the entries must fit in
    /// it and every value must be at most 255 bytes.
    unsafe fn write_entries(self, attrs: &[(Key, &str)]);
    /// Attrs-data byte `at`, as this thread wrote it.
    ///
    /// # Safety
    /// `at` must be below the current `attrs_data_size`.
    unsafe fn attrs_byte(self, at: usize) -> u8;
    /// `compiler_fence(SeqCst)`: the stores before it (atomic, volatile or `asm!`) are
    /// emitted before the stores after it, so a reader that stops the thread between two
    /// instructions never sees a later step without the earlier ones.
    fn step_fence(self);
}

impl RecordWrites for RecordPtr {
    #[inline(always)]
    fn store_valid(self, valid: u8) {
        self.valid().store(valid, Ordering::Relaxed);
    }

    #[inline(always)]
    fn load_attrs_data_size(self) -> u16 {
        self.attrs_data_size_atomic().load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn store_attrs_data_size(self, attrs_data_size: u16) {
        self.attrs_data_size_atomic()
            .store(attrs_data_size, Ordering::Relaxed);
    }

    #[inline(always)]
    unsafe fn write_ids(self, trace_id: &[u8; 16], span_id: &[u8; 8], trace_flags: u8) {
        let record = self.0.as_ptr();
        let [trace_low, trace_high] = [0, 8].map(|at| {
            let mut word = [0; 8];
            word.copy_from_slice(&trace_id[at..at + 8]);
            u64::from_ne_bytes(word)
        });
        // SAFETY: bytes 0..24 and 25 of a live record this thread alone writes, accessed
        // only atomically while it can be read: the ids as 8-byte words, aligned because
        // the record is 64-aligned and their offsets are multiples of 8 (asserted above).
        unsafe {
            let words = |at: usize| AtomicU64::from_ptr(record.add(at).cast());
            words(TRACE_ID_OFFSET).store(trace_low, Ordering::Relaxed);
            words(TRACE_ID_OFFSET + 8).store(trace_high, Ordering::Relaxed);
            words(SPAN_ID_OFFSET).store(u64::from_ne_bytes(*span_id), Ordering::Relaxed);
            AtomicU8::from_ptr(record.add(TRACE_FLAGS_OFFSET))
                .store(trace_flags, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    unsafe fn write_entry(self, at: usize, key: u8, value: &[u8]) {
        // SAFETY: the caller guarantees the entry fits in the record; the block has
        // `WRITE_AHEAD` bytes past it.
        unsafe { write_entry_at(self.0.as_ptr().add(ATTRS_DATA_OFFSET + at), key, value) }
    }

    #[inline(always)]
    unsafe fn write_entries(self, attrs: &[(Key, &str)]) {
        // A pointer that moves from entry to entry, rather than an offset added to the
        // record's address for each: fewer instructions per entry.
        let mut dst = self.0.as_ptr().wrapping_add(ATTRS_DATA_OFFSET);
        for (key, value) in attrs {
            // SAFETY: the caller guarantees the entries fit in the record; the block
            // has `WRITE_AHEAD` bytes past it.
            unsafe {
                write_entry_at(dst, key.index(), value.as_bytes());
                dst = dst.add(ENTRY_OVERHEAD + value.len());
            }
        }
    }

    #[inline(always)]
    unsafe fn attrs_byte(self, at: usize) -> u8 {
        // SAFETY: `at < attrs_data_size <= capacity - 28`, inside the record.
        unsafe { self.0.as_ptr().add(ATTRS_DATA_OFFSET + at).read() }
    }

    #[inline(always)]
    fn step_fence(self) {
        // Signal-fence semantics (the reader runs while this thread is stopped); SeqCst
        // because a release fence would not order the stores that follow it.
        compiler_fence(Ordering::SeqCst);
    }
}

/// In-place update of a record (writer protocol): `valid = 0`, the ids, flags, attrs-data
/// and `attrs_data_size`, then `valid = 1`.
///
/// # Safety
/// The record must be live and written by no other thread; the entries must take exactly
/// `attrs_data_size` bytes and fit in the record, every value at most 255 bytes.
#[inline(always)]
pub(crate) unsafe fn write_update<W: RecordWrites>(
    record: W,
    trace_id: &[u8; 16],
    span_id: &[u8; 8],
    trace_flags: u8,
    attrs: &[(Key, &str)],
    attrs_data_size: u16,
) {
    record.store_valid(0);
    // Orders `valid = 0` before the field writes below: a reader that sees any new byte
    // also sees `valid = 0` and skips the record.
    record.step_fence();
    // SAFETY: guaranteed by the caller; the entries are written one after the other from
    // attrs-data offset 0 and end at `attrs_data_size`.
    unsafe {
        record.write_ids(trace_id, span_id, trace_flags);
        record.write_entries(attrs);
    }
    record.store_attrs_data_size(attrs_data_size);
    // Orders every field write above before `valid = 1`: a reader that sees `valid = 1`
    // sees the whole new record.
    record.step_fence();
    record.store_valid(VALID);
}

/// Growing attrs-data in place (writer protocol): the entry past `attrs_data_size`
/// (which is `at`), then the new size.
///
/// # Safety
/// The record must be live and written by no other thread; `at` must be the current
/// `attrs_data_size`, the entry must fit in the record and `value` must be at most 255
/// bytes.
#[inline(always)]
pub(crate) unsafe fn write_append<W: RecordWrites>(record: W, at: usize, key: Key, value: &[u8]) {
    // SAFETY: guaranteed by the caller. These bytes are past `attrs_data_size`, which
    // readers ignore, so no `valid` toggle is needed.
    unsafe { record.write_entry(at, key.index(), value) };
    // Orders the entry bytes before the size store that makes them visible.
    record.step_fence();
    record.store_attrs_data_size((at + ENTRY_OVERHEAD + value.len()) as u16);
}

/// Shrinking attrs-data in place (writer protocol): keeps the first `keep` entries (all
/// of them when there are fewer) by lowering `attrs_data_size`. Returns the number of
/// entries kept.
///
/// # Safety
/// The record must be live and written by no other thread.
#[inline(always)]
pub(crate) unsafe fn write_truncate<W: RecordWrites>(record: W, keep: usize) -> usize {
    let size = usize::from(record.load_attrs_data_size());
    let mut at = 0;
    let mut kept = 0;
    while kept < keep && at + ENTRY_OVERHEAD <= size {
        // SAFETY: `at + 1 < size`, inside the attrs-data this writer produced.
        let len = usize::from(unsafe { record.attrs_byte(at + 1) });
        if at + ENTRY_OVERHEAD + len > size {
            break;
        }
        at += ENTRY_OVERHEAD + len;
        kept += 1;
    }
    if at < size {
        record.store_attrs_data_size(at as u16);
        // Orders the lower size before any later write into the bytes it released (an
        // append that follows reuses them).
        record.step_fence();
    }
    kept
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    #[test]
    fn ids_both_or_neither_and_no_flags_without_ids() {
        let (t, s) = ([1; 16], [2; 8]);
        let mut low_trace = [0; 16];
        low_trace[15] = 1;
        assert_eq!(check_ids(&t, &s, 0), Ok(()));
        assert_eq!(check_ids(&t, &s, 0xff), Ok(()));
        assert_eq!(check_ids(&low_trace, &s, 1), Ok(()));
        assert_eq!(check_ids(&[0; 16], &[0; 8], 0), Ok(()));
        assert_eq!(
            check_ids(&t, &[0; 8], 1),
            Err(ContextError::TraceIdWithoutSpanId)
        );
        assert_eq!(
            check_ids(&low_trace, &[0; 8], 0),
            Err(ContextError::TraceIdWithoutSpanId)
        );
        assert_eq!(
            check_ids(&[0; 16], &s, 1),
            Err(ContextError::SpanIdWithoutTraceId)
        );
        assert_eq!(
            check_ids(&[0; 16], &[0; 8], 0x02),
            Err(ContextError::TraceFlagsWithoutIds { trace_flags: 0x02 })
        );
    }

    /// A value of `len` bytes that differ from their neighbours (and from 0), as a `str`.
    fn value(len: usize, seed: u8) -> String {
        (0..len)
            .map(|i| char::from(b'!' + (seed.wrapping_add(i as u8)) % 90))
            .collect()
    }

    /// The attrs-data of `entries`, as the specification lays them out.
    fn encoded(entries: &[(u8, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (key, value) in entries {
            bytes.extend([*key, value.len() as u8]);
            bytes.extend(value.as_bytes());
        }
        bytes
    }

    /// Every value length the entry writes treat apart, at every offset in a word, written
    /// by an update (after another entry) and by an append, into records that end right
    /// after the entries: the bytes are the specification's, the earlier entries intact.
    #[test]
    fn entries_of_every_length_at_every_offset() {
        let lengths = (0..=40).chain([127, 254, 255]);
        for len in lengths {
            for before in 0..=9 {
                let (first, second) = (value(before, 7), value(len, 50));
                let entries = [(3, first.as_str()), (200, second.as_str())];
                let attrs = encoded(&entries);
                let attrs_with_keys = entries.map(|(key, value)| (Key::from_index(key), value));
                let capacity = RECORD_HEADER_SIZE + attrs.len();
                for append in [false, true] {
                    let record = RecordPtr::allocate(capacity).unwrap();
                    // SAFETY: a fresh record that only this thread knows; freed below.
                    let bytes = unsafe {
                        if append {
                            record
                                .update(&[1; 16], &[2; 8], 1, &attrs_with_keys[..1])
                                .unwrap();
                            record.append(Key::from_index(200), &second).unwrap();
                        } else {
                            record
                                .update(&[1; 16], &[2; 8], 1, &attrs_with_keys)
                                .unwrap();
                        }
                        let bytes = record.bytes().to_vec();
                        record.free();
                        bytes
                    };
                    assert_eq!(
                        bytes[ATTRS_DATA_OFFSET..],
                        attrs[..],
                        "values of {before} and {len} bytes, append: {append}"
                    );
                    assert_eq!(bytes[VALID_OFFSET], VALID);
                    assert_eq!(bytes[..16], [1; 16]);
                }
            }
        }
    }
}
