//! The memory of one record and the writes of the writer protocol.
//!
//! A record lives in one block, on the heap (feature `alloc`) or in a caller's
//! [`RecordStorage`](super::RecordStorage), laid out the same way: a 64-byte prefix that
//! holds the record's capacity and where the block came from, then the record itself, which therefore starts on a cache line (a 64-byte compact
//! record is one line) and is 2-aligned as the specification requires. The slot points at
//! the record, not at the block, so that an external reader sees exactly the bytes of the
//! specification; the prefix lets the writer turn a pointer taken back from the slot into
//! an owned context again.
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
//! - attribute entries, at any offset: stores of 1, 8 or 16 bytes that the compiler emits
//!   as they are (volatile, or one store instruction in `asm!`, which the compiler treats as
//!   an opaque memory access), composed in registers ([`write_entry_at`]: key, length and a
//!   value of up to 6 bytes in one 8-byte store, up to 14 bytes in two, a 16-byte hex id
//!   in two).
//!
//! The ids and entries are written only where the protocol makes them invisible (inside
//! `valid = 0`, or past `attrs_data_size`). An entry's 8-byte store may run up to
//! [`WRITE_AHEAD`] bytes past the entry: those bytes are just as invisible (the next entry
//! of an update overwrites them, the rest is past `attrs_data_size`), and the record's heap
//! block has room for them past its capacity. A record is only ever written by one thread
//! at a time.
//!
//! Entries are stores at their own offsets rather than aligned atomic words because an
//! entry starts at any byte: building aligned words in registers (shifting each entry into
//! place) takes more instructions than it saves stores, and this path is bound by the
//! instructions it runs (measured: slower on every update benchmark). The unaligned 8- and
//! 16-byte stores are `asm!` on x86_64 and aarch64 ([`store8`], [`store16`]): stable Rust's
//! only unaligned volatile store, `write_volatile` of a byte array, passes the value
//! through a stack slot (one store and one load more per store).
//!
//! The protocol's steps ([`write_update`], [`write_append`], [`write_truncate`]) write
//! through [`RecordWrites`]: [`RecordPtr`] writes the heap record, and the loom model
//! (`loom.rs`, under `--cfg loom`) runs the same functions on a model record to check them
//! against a reader that stops the thread anywhere.

#[cfg(feature = "alloc")]
use core::alloc::Layout;
use core::ptr::{self, NonNull};
use core::sync::atomic::{compiler_fence, AtomicU16, AtomicU64, AtomicU8, Ordering};

use otel_ctx_codec::attrs::{ENTRY_OVERHEAD, MAX_VALUE_LEN};
use otel_ctx_codec::record::{
    ATTRS_DATA_OFFSET, ATTRS_DATA_SIZE_OFFSET, MAX_RECORD_SIZE, RECORD_HEADER_SIZE, SPAN_ID_OFFSET,
    TRACE_FLAGS_OFFSET, TRACE_ID_OFFSET, VALID, VALID_OFFSET,
};

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
/// Bytes past its end that the write of an entry may store ([`write_entry_at`]): an
/// 8-byte store of an entry of 2 bytes.
pub(crate) const WRITE_AHEAD: usize = 8 - ENTRY_OVERHEAD;

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
        // SAFETY: the prefix of a live block.
        debug_assert_eq!(
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

/// Writes the entry `key, len, value` at `dst` ([`write_entry_of_len`] says how).
///
/// Values of up to 22 bytes (nearly all: methods, routes, status codes, hex ids) go
/// through one jump, taken from a table indexed by the length, to a copy of
/// [`write_entry_of_len`] compiled for that constant length: its length tests are gone,
/// its offsets and the header are constants. Longer values take the general code.
///
/// # Safety
/// `dst` must be writable for `2 + value.len() + WRITE_AHEAD` bytes; `value` must be at
/// most 255 bytes.
#[inline(always)]
unsafe fn write_entry_at(dst: *mut u8, key: u8, value: &[u8]) {
    let src = value.as_ptr();
    macro_rules! by_length {
        ($($len:literal)*) => {
            match value.len() {
                // SAFETY: the caller's guarantees; `$len` is the value's length.
                $($len => unsafe { write_entry_of_len(dst, key, src, $len) },)*
                // SAFETY: the caller's guarantees; `len` is the value's length.
                len => unsafe { write_entry_of_len(dst, key, src, len) },
            }
        };
    }
    by_length!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22)
}

/// Writes at `dst` the entry `key, len, value`, the value being the `len` bytes at `src`,
/// composed in registers and stored with few wide stores ([`store8`], [`store16`]):
///
/// | value length | stores |
/// |---|---|
/// | 0 to 6 | one 8-byte word: key, length, value |
/// | 7 | that word with the first 6 bytes, and the last byte |
/// | 8 to 14 | the word with the first 6 bytes, and the last 8 bytes |
/// | 15 | the word, bytes 6 to 14, and the last 8 bytes |
/// | 16 | the key and length (2 bytes), and the value in one 16-byte store |
/// | 17 to 22 | the word, and the last 16 bytes |
/// | 23 and more | the word, then the rest 16 bytes at a time, the last chunk overlapping |
///
/// Overlapping stores write the same bytes twice. An 8-byte store of an entry shorter
/// than 8 bytes runs past it, by up to [`WRITE_AHEAD`] bytes.
///
/// # Safety
/// `src` must be readable for `len` bytes, `len` must be at most 255, and `dst` must be
/// writable for `2 + len + WRITE_AHEAD` bytes.
#[inline(always)]
unsafe fn write_entry_of_len(dst: *mut u8, key: u8, src: *const u8, len: usize) {
    // The key and the length as the first two bytes of a little-endian word.
    let header = u64::from(key) | (len as u64) << 8;
    // SAFETY: every load is inside `src[..len]` (the second of a pair starts at
    // `len - width` with `len >= width`), every store inside the entry or the
    // `WRITE_AHEAD` bytes after it (guaranteed by the caller).
    unsafe {
        if len <= 8 - ENTRY_OVERHEAD {
            store8(dst, header | load_short(src, len) << 16);
        } else if len < 8 {
            // 7 bytes: the first 6 with the header, the last on its own.
            let value = load_short(src, len);
            store8(dst, header | value << 16);
            store1(dst.add(8), (value >> 48) as u8);
        } else if len == 16 {
            // A hex id: the header on its own, the value in one 16-byte load and store.
            store2(dst, header as u16);
            store16(dst.add(ENTRY_OVERHEAD), src);
        } else {
            // 8 bytes or more: the header and the first 6 bytes in one word.
            store8(dst, header | load_u64(src) << 16);
            if len <= 16 - ENTRY_OVERHEAD {
                // The entry's last 8 bytes: the value's last 8.
                store8(dst.add(len - 6), load_u64(src.add(len - 8)));
            } else if len < 16 {
                // 15 bytes: bytes 6 to 14, then the last 8.
                store8(dst.add(8), load_u64(src.add(6)));
                store8(dst.add(len - 6), load_u64(src.add(len - 8)));
            } else if len <= 16 + 6 {
                // The value's last 16 bytes (a hex id is one such load and store).
                store16(dst.add(len - 14), src.add(len - 16));
            } else {
                // The bytes after the first 6, 16 at a time: there are at least 17.
                let mut at = 6;
                while at + 16 < len {
                    store16(dst.add(ENTRY_OVERHEAD + at), src.add(at));
                    at += 16;
                }
                store16(dst.add(len - 14), src.add(len - 16));
            }
        }
    }
}

/// One volatile byte store.
///
/// # Safety
/// `dst` must be writable.
#[inline(always)]
unsafe fn store1(dst: *mut u8, byte: u8) {
    // SAFETY: guaranteed by the caller.
    unsafe { ptr::write_volatile(dst, byte) }
}

/// One 2-byte store of the little-endian `half` at `dst` (no alignment), emitted as it is
/// ([`store8`] says why in `asm!`).
///
/// # Safety
/// `dst` must be writable for 2 bytes.
#[inline(always)]
unsafe fn store2(dst: *mut u8, half: u16) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 2-byte store to `dst`, writable by the caller's guarantee; x86_64 allows
    // it unaligned. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "mov word ptr [{dst}], {half:x}",
            dst = in(reg) dst,
            half = in(reg) half,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: one 2-byte store to `dst`, writable by the caller's guarantee; aarch64
    // allows it unaligned on normal memory. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "strh {half:w}, [{dst}]",
            dst = in(reg) dst,
            half = in(reg) half.to_le(),
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: guaranteed by the caller; `[u8; 2]` has alignment 1.
    unsafe {
        dst.cast::<[u8; 2]>().write_volatile(half.to_le_bytes())
    }
}

/// One 8-byte store of the little-endian word `word` at `dst` (no alignment), which the
/// compiler emits as it is: never removed, split, merged or moved across another memory
/// access.
///
/// On x86_64 and aarch64 it is one store instruction in `asm!` (which the compiler treats
/// as an opaque access to memory, at least as strong as a volatile store). Rust's
/// `write_volatile` of a `[u8; 8]` (the only unaligned volatile store on stable Rust)
/// passes the value through a stack slot first: one store and one load more per entry.
///
/// # Safety
/// `dst` must be writable for 8 bytes.
#[inline(always)]
unsafe fn store8(dst: *mut u8, word: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 8-byte store to `dst`, writable by the caller's guarantee; x86_64
    // allows it unaligned. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "mov qword ptr [{dst}], {word}",
            dst = in(reg) dst,
            word = in(reg) word,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: one 8-byte store to `dst`, writable by the caller's guarantee; aarch64
    // allows it unaligned on normal memory (the heap). No stack, no flags.
    unsafe {
        core::arch::asm!(
            "str {word}, [{dst}]",
            dst = in(reg) dst,
            word = in(reg) word.to_le(),
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: guaranteed by the caller; `[u8; 8]` has alignment 1.
    unsafe {
        dst.cast::<[u8; 8]>().write_volatile(word.to_le_bytes())
    }
}

/// One 16-byte store at `dst` of the 16 bytes at `src` (neither aligned), emitted as it is
/// ([`store8`] says why in `asm!`).
///
/// # Safety
/// `src` must be readable and `dst` writable for 16 bytes.
#[inline(always)]
unsafe fn store16(dst: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86_64; an unaligned 16-byte load inside `src[..16]` (the
    // caller's guarantee) and one unaligned 16-byte store to `dst`, writable for 16 bytes.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128};
        let bytes = _mm_loadu_si128(src.cast::<__m128i>());
        core::arch::asm!(
            "movups xmmword ptr [{dst}], {bytes}",
            dst = in(reg) dst,
            bytes = in(xmm_reg) bytes,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: NEON is part of aarch64; an unaligned 16-byte load inside `src[..16]` (the
    // caller's guarantee) and one 16-byte store to `dst`, writable for 16 bytes and
    // allowed unaligned on normal memory.
    unsafe {
        use core::arch::aarch64::vld1q_u8;
        let bytes = vld1q_u8(src);
        core::arch::asm!(
            "str {bytes:q}, [{dst}]",
            dst = in(reg) dst,
            bytes = in(vreg) bytes,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: guaranteed by the caller; `[u8; 16]` has alignment 1.
    unsafe {
        dst.cast::<[u8; 16]>()
            .write_volatile(src.cast::<[u8; 16]>().read())
    }
}

/// `SHIFT[i]` is `1 << (8 * i)`: a multiplication by it moves bytes up by `i` (one
/// instruction, where a shift by a variable count takes more).
const SHIFT: [u64; 8] = {
    let mut shift = [0; 8];
    let mut i = 0;
    while i < 8 {
        shift[i] = 1 << (8 * i);
        i += 1;
    }
    shift
};

/// The `len` bytes at `src` (at most 7) as a little-endian number, 0 above them. Loads
/// only inside `src[..len]`: two overlapping loads of the largest width that fits.
///
/// # Safety
/// `src` must be readable for `len` bytes.
#[inline(always)]
unsafe fn load_short(src: *const u8, len: usize) -> u64 {
    // SAFETY: every load is inside `src[..len]`: the second of a pair starts at
    // `len - width` with `len >= width`.
    unsafe {
        if len >= 4 {
            let low = u64::from(u32::from_le(src.cast::<u32>().read_unaligned()));
            let high = u64::from(u32::from_le(
                src.add(len - 4).cast::<u32>().read_unaligned(),
            ));
            low | high.wrapping_mul(SHIFT[(len - 4) % 8])
        } else if len >= 2 {
            let low = u64::from(u16::from_le(src.cast::<u16>().read_unaligned()));
            let high = u64::from(u16::from_le(
                src.add(len - 2).cast::<u16>().read_unaligned(),
            ));
            low | high.wrapping_mul(SHIFT[(len - 2) % 8])
        } else if len == 1 {
            u64::from(src.read())
        } else {
            0
        }
    }
}

/// The 8 bytes at `src` as a little-endian number.
///
/// # Safety
/// `src` must be readable for 8 bytes.
#[inline(always)]
unsafe fn load_u64(src: *const u8) -> u64 {
    // SAFETY: guaranteed by the caller; the load is unaligned.
    u64::from_le(unsafe { src.cast::<u64>().read_unaligned() })
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
