//! The model memory, shared by the writer and the reader: what the writer stored in program
//! order, what it had stored at its last compiler fence, and the stores in between; and
//! the handshake by which the reader stops the writer at an interrupt point.

// The crate is `no_std`: the model, a test, uses std.
use std::vec;
use std::vec::Vec;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use otel_ctx_codec::record::{ATTRS_DATA_SIZE_OFFSET, VALID, VALID_OFFSET};

use super::{Logical, CAPACITY, FOREIGN, RECORDS};

/// One image of the memory the reader can reach: the records and the slot.
#[derive(Clone)]
pub(super) struct Image {
    pub(super) bytes: [[u8; CAPACITY]; RECORDS],
    /// Bytes that may hold anything: written by a store the compiler may not have
    /// finished emitting, or freed.
    pub(super) unknown: [[bool; CAPACITY]; RECORDS],
    pub(super) slot: usize,
}

/// A store issued since the last compiler fence.
#[derive(Clone, Copy, Debug)]
pub(super) enum Pending {
    /// Stores of the ids or an entry to `len` bytes at `offset`, modelled as plain stores
    /// (atomic and volatile in the writer), or a free: unknown until the fence.
    Plain {
        record: usize,
        offset: usize,
        len: usize,
    },
    /// The atomic `valid` store.
    Valid { record: usize, value: u8 },
    /// The atomic `attrs_data_size` store.
    Size { record: usize, value: u16 },
    /// The atomic slot store.
    Slot { value: usize },
}

/// The model memory, shared by the writer and the reader.
pub(super) struct Memory {
    pub(super) latest: Image,
    pub(super) committed: Image,
    pub(super) pending: Vec<Pending>,
    /// The step of the scenario the writer is in.
    pub(super) step: usize,
    /// Interrupt points the writer has passed.
    pub(super) points: usize,
    /// The slot's shadow (`slot.rs`): the writer's own, never seen by a reader.
    pub(super) shadow: usize,
    /// Another library's record taken out of the slot, to put back: `(record, below)`.
    pub(super) taken: Option<(usize, usize)>,
    /// What the other library found in the slot when it attached its record, to restore.
    pub(super) foreign_saved: Vec<usize>,
}

impl Memory {
    pub(super) fn new() -> Self {
        let mut bytes = [[0u8; CAPACITY]; RECORDS];
        for record in &mut bytes {
            // A freshly allocated record: zeroed, `valid = 1` (`RecordPtr::allocate`).
            record[VALID_OFFSET] = VALID;
        }
        Logical::foreign().write_to(&mut bytes[FOREIGN]);
        let image = Image {
            bytes,
            unknown: [[false; CAPACITY]; RECORDS],
            slot: 0,
        };
        Self {
            latest: image.clone(),
            committed: image,
            pending: Vec::new(),
            step: 0,
            points: 0,
            shadow: 0,
            taken: None,
            foreign_saved: Vec::new(),
        }
    }

    pub(super) fn plain(&mut self, record: usize, offset: usize, bytes: &[u8]) {
        assert_ne!(record, FOREIGN, "wrote into the foreign record");
        let end = offset + bytes.len();
        self.latest.bytes[record][offset..end].copy_from_slice(bytes);
        self.latest.unknown[record][offset..end].fill(false);
        self.pending.push(Pending::Plain {
            record,
            offset,
            len: bytes.len(),
        });
    }

    pub(super) fn free(&mut self, record: usize) {
        assert_ne!(record, FOREIGN, "freed the foreign record");
        self.latest.unknown[record].fill(true);
        self.pending.push(Pending::Plain {
            record,
            offset: 0,
            len: CAPACITY,
        });
    }

    pub(super) fn fence(&mut self) {
        self.committed = self.latest.clone();
        self.pending.clear();
    }

    /// Every image a reader stopping the thread now may see (see the module
    /// documentation).
    pub(super) fn views(&self) -> Vec<Image> {
        let mut base = self.committed.clone();
        for store in &self.pending {
            if let Pending::Plain {
                record,
                offset,
                len,
            } = *store
            {
                base.bytes[record][offset..offset + len]
                    .copy_from_slice(&self.latest.bytes[record][offset..offset + len]);
                base.unknown[record][offset..offset + len].fill(true);
            }
        }
        let mut views = vec![base];
        for store in &self.pending {
            let apply = |image: &mut Image| match *store {
                Pending::Plain { .. } => {}
                Pending::Valid { record, value } => image.bytes[record][VALID_OFFSET] = value,
                Pending::Size { record, value } => {
                    image.bytes[record][ATTRS_DATA_SIZE_OFFSET..ATTRS_DATA_SIZE_OFFSET + 2]
                        .copy_from_slice(&value.to_ne_bytes());
                }
                Pending::Slot { value } => image.slot = value,
            };
            if matches!(store, Pending::Plain { .. }) {
                continue;
            }
            // Each view so far, with and without this store: later stores to the same
            // place override earlier ones, so every value the place held is covered.
            let with: Vec<Image> = views
                .iter()
                .cloned()
                .map(|mut image| {
                    apply(&mut image);
                    image
                })
                .collect();
            views.extend(with);
        }
        views
    }
}

/// The memory and the stop handshake of one execution.
pub(super) struct Shared {
    memory: UnsafeCell<Memory>,
    /// The reader asks for a stop.
    pub(super) stop: AtomicBool,
    /// The writer is parked at an interrupt point.
    pub(super) parked: AtomicBool,
    /// The reader is done: the writer runs on.
    pub(super) resume: AtomicBool,
    /// The writer has finished its steps.
    pub(super) done: AtomicBool,
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            memory: UnsafeCell::new(Memory::new()),
            stop: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            resume: AtomicBool::new(false),
            done: AtomicBool::new(false),
        }
    }

    /// The writer may be stopped here, between two of its stores.
    pub(super) fn interrupt_point(&self) {
        self.write(|memory| memory.points += 1);
        if self.stop.load(Ordering::SeqCst) && !self.resume.load(Ordering::SeqCst) {
            // Release: the stop makes every store executed so far visible to the reader.
            self.parked.store(true, Ordering::Release);
            while !self.resume.load(Ordering::Acquire) {
                thread::yield_now();
            }
        }
    }

    pub(super) fn write<R>(&self, f: impl FnOnce(&mut Memory) -> R) -> R {
        // SAFETY: only the writer thread writes, and the reader reads only while the
        // writer is parked or done (the handshake orders the accesses; loom checks it).
        self.memory.with_mut(|memory| f(unsafe { &mut *memory }))
    }

    pub(super) fn read<R>(&self, f: impl FnOnce(&Memory) -> R) -> R {
        // SAFETY: as in `write`.
        self.memory.with(|memory| f(unsafe { &*memory }))
    }
}
