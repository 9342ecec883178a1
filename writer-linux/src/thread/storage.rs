//! Caller-provided memory for records: [`RecordStorage`] and the [`RecordPool`] of them.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use otel_ctx_codec::record::MAX_RECORD_SIZE;

use super::record::{BLOCK_ALIGN, PREFIX};
use super::store::WRITE_AHEAD;

/// Bytes of a block: the prefix, a record of the largest capacity, and the bytes an
/// entry's write may store past the record's end.
const BLOCK_SIZE: usize = PREFIX + MAX_RECORD_SIZE + WRITE_AHEAD;

/// Memory for one thread-context record of any capacity up to 640 bytes, laid out as the
/// heap block of a [`ThreadContext`](super::ThreadContext) is (a 64-byte prefix, then the
/// record on a cache line): the storage of a context without a heap
/// ([`ThreadContext::in_storage`](super::ThreadContext::in_storage)).
///
/// A context made in it owns it until
/// [`ThreadContext::into_storage`](super::ThreadContext::into_storage) gives it back;
/// dropping that context only forgets the storage, which is `'static`.
#[repr(C, align(64))]
pub struct RecordStorage {
    bytes: [u8; BLOCK_SIZE],
}

const _: () = assert!(core::mem::align_of::<RecordStorage>() == BLOCK_ALIGN);

impl RecordStorage {
    /// Zero-filled storage, for a `static`.
    pub const fn new() -> Self {
        Self {
            bytes: [0; BLOCK_SIZE],
        }
    }
}

impl Default for RecordStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for RecordStorage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecordStorage")
            .field("size", &BLOCK_SIZE)
            .finish()
    }
}

/// `N` [`RecordStorage`]s in a `static`, each handed out once by [`take`](Self::take):
/// a pool of record memory its owner sizes for the threads (or tasks) it runs, with no
/// heap and no lock.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// use otel_ctx_writer::thread::{Key, RecordPool, ThreadContext};
///
/// static RECORDS: RecordPool<4> = RecordPool::new();
///
/// let storage = RECORDS.take().expect("a free storage");
/// let context = ThreadContext::in_storage(storage, ThreadContext::CAPACITY)?;
/// assert!(context.attach().is_none());
/// otel_ctx_writer::thread::update([1; 16], [2; 8], 1, &[(Key::from_index(0), "/cart")])?;
/// let context = otel_ctx_writer::thread::detach().expect("attached above");
/// let storage = context.into_storage().expect("made in storage");
/// # let _ = storage;
/// # }
/// # Ok::<(), otel_ctx_writer::thread::ContextError>(())
/// ```
pub struct RecordPool<const N: usize> {
    storages: [UnsafeCell<RecordStorage>; N],
    taken: [AtomicBool; N],
}

// SAFETY: each storage is reached only through the one `&'static mut` that `take` hands
// out for it, once (the `taken` flag is set by exactly one successful compare-exchange).
unsafe impl<const N: usize> Sync for RecordPool<N> {}

impl<const N: usize> RecordPool<N> {
    /// `N` zero-filled storages, none taken.
    pub const fn new() -> Self {
        Self {
            storages: [const { UnsafeCell::new(RecordStorage::new()) }; N],
            taken: [const { AtomicBool::new(false) }; N],
        }
    }

    /// A storage no one took yet, for good; `None` once all `N` are taken. Safe from any
    /// thread.
    // The storages are behind `UnsafeCell`s, handed out once each: a `&mut` from `&self`
    // is the point of the pool.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut RecordStorage> {
        self.taken
            .iter()
            .zip(&self.storages)
            .find_map(|(taken, storage)| {
                // Relaxed: the flag guards no data written by another thread (the storage is
                // zero-filled from the start); only its exclusivity matters.
                taken
                    .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
                    .ok()
                    // SAFETY: the flag was false and is now true: this is the one reference to
                    // this storage that will ever be made, and the pool is `'static`.
                    .map(|_| unsafe { &mut *storage.get() })
            })
    }

    /// How many storages are still free.
    pub fn available(&self) -> usize {
        self.taken
            .iter()
            .filter(|taken| !taken.load(Ordering::Relaxed))
            .count()
    }
}

impl<const N: usize> Default for RecordPool<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Debug for RecordPool<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecordPool")
            .field("capacity", &N)
            .field("available", &self.available())
            .finish()
    }
}
