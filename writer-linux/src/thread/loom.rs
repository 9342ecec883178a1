//! A loom model of the thread-context writer protocol (OTEP 4947) against a reader that
//! stops the thread anywhere.
//!
//! ```sh
//! LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p otel-ctx-writer --release --lib -- loom::
//! ```
//!
//! (`RELIABILITY.md` gives the faster-to-build command CI uses.)
//!
//! # What a reader of a thread context sees
//!
//! A record is read only while its thread is stopped: by a signal handler or an eBPF
//! program on the same CPU, or by a ptrace reader after the kernel stopped the thread.
//! Either way the reader sees exactly the stores the thread's *machine code* executed
//! before the stop: a stop is a full synchronisation with the CPU (an interrupt on the
//! same CPU, or the context switch of a ptrace stop), so CPU reordering plays no part.
//! What remains is the compiler: between two fences it may emit the stores of a step in
//! any order, and split or merge those it is free to. The writer's
//! `compiler_fence(SeqCst)` calls (signal fences) are the only thing that orders its
//! stores, which are all atomic or volatile so that the fences order them by the
//! language's rules: every store before a fence is emitted before every store after it.
//!
//! # How the model reproduces that
//!
//! - **The writer** is this crate's own code: [`write_update`], [`write_append`],
//!   [`write_truncate`] (`record.rs`), and [`swap_in`], [`detach_ours_in`] and [`held_in`]
//!   (`slot.rs`), the functions `ThreadContext`, `update`, `append`, `truncate_attrs`,
//!   `swap` and `detach` call, run on a [`ModelRecord`] and a [`ModelSlot`] that see every
//!   store and every fence. What the slot held decides, as in `context.rs`, what the step
//!   does next: free a record of this crate, keep another library's record to put back, or
//!   refuse an in-place change.
//! - **Another library** shares the slot: it owns model record [`FOREIGN`], attaches it
//!   over whatever the slot holds and puts that back later, as a C writer of the
//!   pointer-swapping style does. Any write into that record, or a free of it, by this
//!   crate's code fails the model at once.
//! - **Compiler freedom.** The model memory keeps two images: `latest`, every store in
//!   program order, and `committed`, the state at the last compiler fence. A reader that
//!   stops the thread sees `committed`, plus, for the stores issued since the last fence
//!   (which the compiler may not have emitted yet, or only in part): every byte of the
//!   ids and the attribute entries, and of the bytes an entry's write may store past it
//!   (`WRITE_AHEAD`, garbage in the model), is *unknown* (old, new or torn: more than
//!   their atomic and volatile stores allow, so the check is if anything stricter), and
//!   every atomic store of `valid`, `attrs_data_size` and the slot (never torn) may or may
//!   not have happened; the reader is checked against every combination of those.
//! - **The stop.** The writer and the reader are two loom threads. Before each store and
//!   each fence the writer passes an interrupt point; the reader asks for a stop at a
//!   moment loom chooses, the writer parks at its next interrupt point (a release store:
//!   the kernel's stop makes everything the thread executed visible), and the reader
//!   reads while it is parked. Loom runs the reader's stop before every interrupt point
//!   in turn (the test asserts that each one was reached), and its race detector checks
//!   that the reader never reads the model memory while the writer writes it: the
//!   reader of this model really reads a stopped thread.
//! - **The reader** follows `reader-linux/src/tls/sample.rs`: the slot; NULL is no
//!   context; else the 28-byte header; `valid != 1` is no context; else
//!   `attrs_data_size` bytes of attrs-data, parsed with the codec.
//!
//! # What it proves
//!
//! For every stop point and every emission order the compiler may choose: the reader
//! never depends on a byte that may be unwritten, torn or freed (a record it follows and
//! finds valid is fully written, and no freed record is reachable from the slot), and
//! every record it accepts is a state the attached record really had, up to the step
//! that was interrupted, never a mixture of two. (A state older than the one before the
//! interrupted step is possible and fine: the compiler may merge a size store into a
//! later one.) Another library's record is never written or freed, and is back in the slot
//! whenever the steps put it back. Four deliberately broken writers (each protocol step
//! without one of its fences, and a swap that frees whatever the slot held) must each make
//! loom fail.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
// The crate is `no_std`: the model, a test, uses std.
use std::boxed::Box;
use std::string::{String, ToString};
use std::sync::Mutex;
use std::vec::Vec;
use std::{format, println, vec};

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use otel_ctx_codec::record::{
    RecordView, ATTRS_DATA_OFFSET, ATTRS_DATA_SIZE_OFFSET, RECORD_ALIGN, RECORD_HEADER_SIZE,
    SPAN_ID_OFFSET, TRACE_FLAGS_OFFSET, TRACE_ID_OFFSET, VALID, VALID_OFFSET,
};

use super::record::{write_append, write_truncate, write_update, Record, RecordWrites};
use super::slot::{detach_ours_in, held_in, swap_in, Held, SlotWrites};
use super::store::WRITE_AHEAD;
use super::Key;

/// Capacity of a model record: a compact one.
const CAPACITY: usize = 64;
/// Records in the model heap: two of this crate, then [`FOREIGN`].
const RECORDS: usize = 3;
/// The record of another library (a C writer sharing the slot).
const FOREIGN: usize = 2;
/// What the model stores past an entry, where `RecordPtr` may store too.
const GARBAGE: u8 = 0xa5;
/// Address of record 0 in the model; record `i` is `i * STRIDE` further.
const HEAP_BASE: usize = 0x7f00_0000_0040;
const STRIDE: usize = 0x400;

/// One image of the memory the reader can reach: the records and the slot.
#[derive(Clone)]
struct Image {
    bytes: [[u8; CAPACITY]; RECORDS],
    /// Bytes that may hold anything: written by a store the compiler may not have
    /// finished emitting, or freed.
    unknown: [[bool; CAPACITY]; RECORDS],
    slot: usize,
}

/// A store issued since the last compiler fence.
#[derive(Clone, Copy, Debug)]
enum Pending {
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
struct Memory {
    latest: Image,
    committed: Image,
    pending: Vec<Pending>,
    /// The step of the scenario the writer is in.
    step: usize,
    /// Interrupt points the writer has passed.
    points: usize,
    /// The slot's shadow (`slot.rs`): the writer's own, never seen by a reader.
    shadow: usize,
    /// Another library's record taken out of the slot, to put back: `(record, below)`.
    taken: Option<(usize, usize)>,
    /// What the other library found in the slot when it attached its record, to restore.
    foreign_saved: Vec<usize>,
}

impl Memory {
    fn new() -> Self {
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

    fn plain(&mut self, record: usize, offset: usize, bytes: &[u8]) {
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

    fn free(&mut self, record: usize) {
        assert_ne!(record, FOREIGN, "freed the foreign record");
        self.latest.unknown[record].fill(true);
        self.pending.push(Pending::Plain {
            record,
            offset: 0,
            len: CAPACITY,
        });
    }

    fn fence(&mut self) {
        self.committed = self.latest.clone();
        self.pending.clear();
    }

    /// Every image a reader stopping the thread now may see (see the module
    /// documentation).
    fn views(&self) -> Vec<Image> {
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
struct Shared {
    memory: UnsafeCell<Memory>,
    /// The reader asks for a stop.
    stop: AtomicBool,
    /// The writer is parked at an interrupt point.
    parked: AtomicBool,
    /// The reader is done: the writer runs on.
    resume: AtomicBool,
    /// The writer has finished its steps.
    done: AtomicBool,
}

impl Shared {
    fn new() -> Self {
        Self {
            memory: UnsafeCell::new(Memory::new()),
            stop: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            resume: AtomicBool::new(false),
            done: AtomicBool::new(false),
        }
    }

    /// The writer may be stopped here, between two of its stores.
    fn interrupt_point(&self) {
        self.write(|memory| memory.points += 1);
        if self.stop.load(Ordering::SeqCst) && !self.resume.load(Ordering::SeqCst) {
            // Release: the stop makes every store executed so far visible to the reader.
            self.parked.store(true, Ordering::Release);
            while !self.resume.load(Ordering::Acquire) {
                thread::yield_now();
            }
        }
    }

    fn write<R>(&self, f: impl FnOnce(&mut Memory) -> R) -> R {
        // SAFETY: only the writer thread writes, and the reader reads only while the
        // writer is parked or done (the handshake orders the accesses; loom checks it).
        self.memory.with_mut(|memory| f(unsafe { &mut *memory }))
    }

    fn read<R>(&self, f: impl FnOnce(&Memory) -> R) -> R {
        // SAFETY: as in `write`.
        self.memory.with(|memory| f(unsafe { &*memory }))
    }
}

fn address(record: usize) -> usize {
    HEAP_BASE + record * STRIDE
}

/// A record of the model heap, written through the protocol's functions.
#[derive(Clone, Copy)]
struct ModelRecord<'a> {
    shared: &'a Shared,
    record: usize,
}

impl RecordWrites for ModelRecord<'_> {
    fn store_valid(self, valid: u8) {
        assert_ne!(self.record, FOREIGN, "wrote valid into the foreign record");
        self.shared.interrupt_point();
        self.shared.write(|m| {
            m.latest.bytes[self.record][VALID_OFFSET] = valid;
            m.pending.push(Pending::Valid {
                record: self.record,
                value: valid,
            });
        });
    }

    fn load_attrs_data_size(self) -> u16 {
        self.shared
            .read(|m| attrs_data_size(&m.latest.bytes[self.record]))
    }

    fn store_attrs_data_size(self, attrs_data_size: u16) {
        assert_ne!(
            self.record, FOREIGN,
            "wrote attrs_data_size into the foreign record"
        );
        self.shared.interrupt_point();
        self.shared.write(|m| {
            m.latest.bytes[self.record][ATTRS_DATA_SIZE_OFFSET..ATTRS_DATA_SIZE_OFFSET + 2]
                .copy_from_slice(&attrs_data_size.to_ne_bytes());
            m.pending.push(Pending::Size {
                record: self.record,
                value: attrs_data_size,
            });
        });
    }

    unsafe fn write_ids(self, trace_id: &[u8; 16], span_id: &[u8; 8], trace_flags: u8) {
        self.shared.interrupt_point();
        self.shared
            .write(|m| m.plain(self.record, TRACE_ID_OFFSET, trace_id));
        self.shared.interrupt_point();
        self.shared
            .write(|m| m.plain(self.record, SPAN_ID_OFFSET, span_id));
        self.shared.interrupt_point();
        self.shared
            .write(|m| m.plain(self.record, TRACE_FLAGS_OFFSET, &[trace_flags]));
    }

    unsafe fn write_entry(self, at: usize, key: u8, value: &[u8]) {
        let mut entry = vec![key, value.len() as u8];
        entry.extend_from_slice(value);
        // The bytes past the entry that `RecordPtr` may store too (`WRITE_AHEAD`), here
        // always and with bytes no record holds: were a step ever to expose them, the
        // reader would decode them.
        let start = ATTRS_DATA_OFFSET + at;
        entry.resize((entry.len() + WRITE_AHEAD).min(CAPACITY - start), GARBAGE);
        self.shared.interrupt_point();
        self.shared.write(|m| m.plain(self.record, start, &entry));
    }

    unsafe fn write_entries(self, attrs: &[(Key, &str)]) {
        let mut at = 0;
        for (key, value) in attrs {
            // SAFETY: the caller guarantees the entries fit in the record.
            unsafe { self.write_entry(at, key.index(), value.as_bytes()) };
            at += 2 + value.len();
        }
    }

    unsafe fn attrs_byte(self, at: usize) -> u8 {
        self.shared
            .read(|m| m.latest.bytes[self.record][ATTRS_DATA_OFFSET + at])
    }

    fn step_fence(self) {
        self.shared.interrupt_point();
        self.shared.write(Memory::fence);
    }
}

/// The thread's slot in the model.
#[derive(Clone, Copy)]
struct ModelSlot<'a> {
    shared: &'a Shared,
}

impl SlotWrites for ModelSlot<'_> {
    fn load(self) -> *mut Record {
        core::ptr::without_provenance_mut(self.shared.read(|m| m.latest.slot))
    }

    fn store(self, record: *mut Record) {
        self.shared.interrupt_point();
        self.shared.write(|m| {
            m.latest.slot = record.addr();
            m.pending.push(Pending::Slot {
                value: record.addr(),
            });
        });
    }

    fn load_shadow(self) -> *mut Record {
        core::ptr::without_provenance_mut(self.shared.read(|m| m.shadow))
    }

    fn store_shadow(self, record: *mut Record) {
        // No interrupt point: a reader never looks at the shadow.
        self.shared.write(|m| m.shadow = record.addr());
    }

    fn step_fence(self) {
        self.shared.interrupt_point();
        self.shared.write(Memory::fence);
    }
}

fn attrs_data_size(record: &[u8; CAPACITY]) -> u16 {
    u16::from_ne_bytes([
        record[ATTRS_DATA_SIZE_OFFSET],
        record[ATTRS_DATA_SIZE_OFFSET + 1],
    ])
}

/// A record's content, as the writer meant it and as the reader decodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Logical {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    trace_flags: u8,
    attrs: Vec<(u8, Vec<u8>)>,
}

impl Logical {
    /// A freshly allocated record.
    fn empty() -> Self {
        Self {
            trace_id: [0; 16],
            span_id: [0; 8],
            trace_flags: 0,
            attrs: Vec::new(),
        }
    }

    /// The record of the other library.
    fn foreign() -> Self {
        Self {
            trace_id: [0xf0; 16],
            span_id: [0x0f; 8],
            trace_flags: 1,
            attrs: vec![(7, b"foreign".to_vec())],
        }
    }

    /// Writes this record's bytes (the model's initial memory, outside any step).
    fn write_to(&self, bytes: &mut [u8; CAPACITY]) {
        bytes[TRACE_ID_OFFSET..TRACE_ID_OFFSET + 16].copy_from_slice(&self.trace_id);
        bytes[SPAN_ID_OFFSET..SPAN_ID_OFFSET + 8].copy_from_slice(&self.span_id);
        bytes[VALID_OFFSET] = VALID;
        bytes[TRACE_FLAGS_OFFSET] = self.trace_flags;
        let mut at = ATTRS_DATA_OFFSET;
        for (key, value) in &self.attrs {
            bytes[at] = *key;
            bytes[at + 1] = value.len() as u8;
            bytes[at + 2..at + 2 + value.len()].copy_from_slice(value);
            at += 2 + value.len();
        }
        bytes[ATTRS_DATA_SIZE_OFFSET..ATTRS_DATA_SIZE_OFFSET + 2]
            .copy_from_slice(&(self.attrs_data_size() as u16).to_ne_bytes());
    }

    fn attrs_data_size(&self) -> usize {
        self.attrs.iter().map(|(_, v)| 2 + v.len()).sum()
    }
}

/// One step of the writer.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `write_update`: ids and flags all `version`, and these attributes.
    Update {
        record: usize,
        version: u8,
        attrs: &'static [(u8, &'static str)],
    },
    /// `write_append` of one entry.
    Append {
        record: usize,
        key: u8,
        value: &'static str,
    },
    /// `write_truncate` to `keep` entries.
    Truncate { record: usize, keep: usize },
    /// `swap_in(slot, record, record)` (`None`: `swap(None)`), then the previous record is
    /// freed if it is this crate's (as `swap` and the drop of what it returns do), or kept
    /// to put back if it is the other library's.
    Attach { record: Option<usize> },
    /// `swap_in` of the other library's record kept by `Attach`, with its `below`: puts it
    /// back, and frees the record of this crate it replaces.
    PutBack,
    /// `detach_ours_in`: a record of this crate is detached and freed; anything else
    /// stays in the slot.
    Detach,
    /// The free `update`: `held_in`, then `write_update` on a record of this crate, or
    /// nothing (refused) on anything else.
    UpdateAttached {
        version: u8,
        attrs: &'static [(u8, &'static str)],
    },
    /// The other library attaches its record (signal fence, slot store, signal fence, as a
    /// correct writer does), keeping what the slot held.
    ForeignAttach,
    /// The other library puts back what it found.
    ForeignDetach,
    /// Broken: `write_update` without the fence after `valid = 0`.
    UpdateWithoutFirstFence {
        record: usize,
        version: u8,
        attrs: &'static [(u8, &'static str)],
    },
    /// Broken: `write_append` without the fence before the new size.
    AppendWithoutFence {
        record: usize,
        key: u8,
        value: &'static str,
    },
    /// Broken: the slot swap without the fence after the slot store, then the free.
    AttachWithoutTrailingFence { record: Option<usize> },
    /// Broken: the slot swap, then a free of whatever the slot held, as if every record
    /// in it were this crate's.
    AttachFreeingAnything { record: Option<usize> },
}

/// What the writer's steps mean: the records' contents and which one is attached.
#[derive(Clone)]
struct Intent {
    records: [Logical; RECORDS],
    attached: Option<usize>,
    /// What the other library found in the slot, most recent last.
    foreign_saved: Vec<Option<usize>>,
}

impl Intent {
    fn new() -> Self {
        let mut records: [Logical; RECORDS] = core::array::from_fn(|_| Logical::empty());
        records[FOREIGN] = Logical::foreign();
        Self {
            records,
            attached: None,
            foreign_saved: Vec::new(),
        }
    }

    /// Frees the attached record if it is this crate's.
    fn free_attached_if_ours(&mut self) {
        if let Some(previous) = self.attached.filter(|&r| r != FOREIGN) {
            // Freed: nothing of it is known any more.
            self.records[previous] = Logical::empty();
        }
    }

    /// What the production code must find in the slot: `held_in`'s answer, as indexes.
    fn held(&self) -> Option<(usize, bool)> {
        self.attached.map(|r| (r, r != FOREIGN))
    }

    /// What a reader should find: the attached record's content.
    fn visible(&self) -> Option<Logical> {
        self.attached.map(|r| self.records[r].clone())
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Update {
                record,
                version,
                attrs,
            }
            | Step::UpdateWithoutFirstFence {
                record,
                version,
                attrs,
            } => {
                self.records[record] = Logical {
                    trace_id: [version; 16],
                    span_id: [version; 8],
                    trace_flags: version,
                    attrs: attrs
                        .iter()
                        .map(|(k, v)| (*k, v.as_bytes().to_vec()))
                        .collect(),
                };
            }
            Step::Append { record, key, value }
            | Step::AppendWithoutFence { record, key, value } => {
                self.records[record]
                    .attrs
                    .push((key, value.as_bytes().to_vec()));
            }
            Step::Truncate { record, keep } => self.records[record].attrs.truncate(keep),
            Step::Attach { record }
            | Step::AttachWithoutTrailingFence { record }
            | Step::AttachFreeingAnything { record } => {
                self.free_attached_if_ours();
                self.attached = record;
            }
            Step::PutBack => {
                self.free_attached_if_ours();
                self.attached = Some(FOREIGN);
            }
            Step::Detach => {
                if self.attached != Some(FOREIGN) {
                    self.free_attached_if_ours();
                    self.attached = None;
                }
            }
            Step::UpdateAttached { version, attrs } => {
                if let Some(record) = self.attached.filter(|&r| r != FOREIGN) {
                    self.apply(Step::Update {
                        record,
                        version,
                        attrs,
                    });
                }
            }
            Step::ForeignAttach => {
                self.foreign_saved.push(self.attached);
                self.attached = Some(FOREIGN);
            }
            Step::ForeignDetach => {
                self.attached = self
                    .foreign_saved
                    .pop()
                    .expect("the other library attached");
            }
        }
    }
}

fn keys(attrs: &'static [(u8, &'static str)]) -> Vec<(Key, &'static str)> {
    attrs
        .iter()
        .map(|(k, v)| (Key::from_index(*k), *v))
        .collect()
}

/// Runs one step on the model with the crate's protocol functions (or a broken copy).
fn run(shared: &Shared, intent: &Intent, step: Step) {
    let record = |index| ModelRecord {
        shared,
        record: index,
    };
    let slot = ModelSlot { shared };
    match step {
        Step::Update {
            record: index,
            version,
            attrs,
        } => {
            let attrs = keys(attrs);
            let size: usize = attrs.iter().map(|(_, v)| 2 + v.len()).sum();
            // SAFETY: the model record is written by this thread only, and the entries
            // (at most 36 bytes in every scenario) fit in it.
            unsafe {
                write_update(
                    record(index),
                    &[version; 16],
                    &[version; 8],
                    version,
                    &attrs,
                    size as u16,
                )
            };
        }
        Step::Append {
            record: index,
            key,
            value,
        } => {
            let at = intent.records[index].attrs_data_size();
            // SAFETY: as above; `at` is the current size.
            unsafe { write_append(record(index), at, Key::from_index(key), value.as_bytes()) };
        }
        Step::Truncate {
            record: index,
            keep,
        } => {
            // SAFETY: as above.
            unsafe { write_truncate(record(index), keep) };
        }
        Step::Attach { record: next } => {
            let next = core::ptr::without_provenance_mut(next.map_or(0, address));
            let previous = swap_in(slot, next, next);
            check_held(intent, previous);
            match previous {
                Held::Empty => {}
                Held::Ours(record) => free(shared, record.as_ptr().addr()),
                Held::Foreign { record, below } => {
                    shared.write(|m| m.taken = Some((record.as_ptr().addr(), below.addr())));
                }
            }
        }
        Step::PutBack => {
            let (record, below) = shared
                .write(|m| m.taken.take())
                .expect("a foreign record was taken out");
            let previous = swap_in(
                slot,
                core::ptr::without_provenance_mut(record),
                core::ptr::without_provenance_mut(below),
            );
            check_held(intent, previous);
            if let Held::Ours(record) = previous {
                free(shared, record.as_ptr().addr());
            }
        }
        Step::Detach => {
            check_held(intent, held_in(slot));
            if let Some(record) = detach_ours_in(slot) {
                free(shared, record.as_ptr().addr());
            }
        }
        Step::UpdateAttached { version, attrs } => {
            let held = held_in(slot);
            check_held(intent, held);
            if let Held::Ours(attached) = held {
                let attrs = keys(attrs);
                let size: usize = attrs.iter().map(|(_, v)| 2 + v.len()).sum();
                // SAFETY: as above.
                unsafe {
                    write_update(
                        record(index_of(attached.as_ptr().addr())),
                        &[version; 16],
                        &[version; 8],
                        version,
                        &attrs,
                        size as u16,
                    )
                };
            }
        }
        Step::ForeignAttach => {
            let previous = slot.load();
            shared.write(|m| m.foreign_saved.push(previous.addr()));
            foreign_store(slot, address(FOREIGN));
        }
        Step::ForeignDetach => {
            let saved = shared
                .write(|m| m.foreign_saved.pop())
                .expect("the other library attached");
            foreign_store(slot, saved);
        }
        Step::UpdateWithoutFirstFence {
            record: index,
            version,
            attrs,
        } => {
            let r = record(index);
            r.store_valid(0);
            // SAFETY: as above.
            unsafe {
                r.write_ids(&[version; 16], &[version; 8], version);
                let mut at = 0;
                for (key, value) in keys(attrs) {
                    r.write_entry(at, key.index(), value.as_bytes());
                    at += 2 + value.len();
                }
                r.store_attrs_data_size(at as u16);
            }
            r.step_fence();
            r.store_valid(VALID);
        }
        Step::AppendWithoutFence {
            record: index,
            key,
            value,
        } => {
            let r = record(index);
            let at = intent.records[index].attrs_data_size();
            // SAFETY: as above.
            unsafe { r.write_entry(at, key, value.as_bytes()) };
            r.store_attrs_data_size((at + 2 + value.len()) as u16);
        }
        Step::AttachWithoutTrailingFence { record: next } => {
            let next = next.map_or(0, address);
            let previous = slot.load();
            slot.step_fence();
            slot.store(core::ptr::without_provenance_mut(next));
            free(shared, previous.addr());
        }
        Step::AttachFreeingAnything { record: next } => {
            let next = core::ptr::without_provenance_mut(next.map_or(0, address));
            let previous = match swap_in(slot, next, next) {
                Held::Empty => 0,
                Held::Ours(record) | Held::Foreign { record, .. } => record.as_ptr().addr(),
            };
            free(shared, previous);
        }
    }
}

/// The other library's slot store: a signal fence, the store, a signal fence (what
/// `tests/fixtures/foreign/foreign.c` does). The shadow is this crate's: untouched.
fn foreign_store(slot: ModelSlot<'_>, record: usize) {
    slot.step_fence();
    slot.store(core::ptr::without_provenance_mut(record));
    slot.step_fence();
}

/// The model record at `address`.
fn index_of(address: usize) -> usize {
    (address - HEAP_BASE) / STRIDE
}

/// Checks that `held_in` told the slot's record apart as the steps say it must: a record
/// of this crate as its own, the other library's as foreign.
fn check_held(intent: &Intent, held: Held) {
    let found = match held {
        Held::Empty => None,
        Held::Ours(record) => Some((index_of(record.as_ptr().addr()), true)),
        Held::Foreign { record, .. } => Some((index_of(record.as_ptr().addr()), false)),
    };
    assert_eq!(
        found,
        intent.held(),
        "the slot's record told apart wrongly: (record, ours)"
    );
}

/// Frees the record at `address` (if any): the allocator may write anything there.
fn free(shared: &Shared, address: usize) {
    if address == 0 {
        return;
    }
    shared.interrupt_point();
    shared.write(|m| m.free(index_of(address)));
}

/// What the reader found.
#[derive(Debug)]
enum Found {
    /// The slot is NULL.
    Null,
    /// `valid` is not 1.
    Invalid,
    /// A valid record, decoded.
    Record(Logical),
}

/// `read_slot` of `sample.rs` on one view; `Err` says what a real reader would have
/// got wrong.
fn read_view(view: &Image) -> Result<Found, String> {
    if view.slot == 0 {
        return Ok(Found::Null);
    }
    let offset = view.slot.wrapping_sub(HEAP_BASE);
    let index = offset / STRIDE;
    if !offset.is_multiple_of(STRIDE) || index >= RECORDS || !view.slot.is_multiple_of(RECORD_ALIGN)
    {
        return Err(format!("the slot points at {:#x}, no record", view.slot));
    }
    let (bytes, unknown) = (&view.bytes[index], &view.unknown[index]);
    if unknown[VALID_OFFSET] {
        return Err(format!(
            "followed the slot to record {index}, whose valid byte may be anything \
             (freed or being rewritten while reachable)"
        ));
    }
    if bytes[VALID_OFFSET] != VALID {
        return Ok(Found::Invalid);
    }
    if unknown[ATTRS_DATA_SIZE_OFFSET..ATTRS_DATA_SIZE_OFFSET + 2].contains(&true) {
        return Err(format!(
            "record {index} is valid but its attrs_data_size may be anything"
        ));
    }
    let size = RECORD_HEADER_SIZE + usize::from(attrs_data_size(bytes));
    if size > CAPACITY {
        return Err(format!(
            "record {index} declares {size} bytes, past its end"
        ));
    }
    if let Some(at) = unknown[..size].iter().position(|&u| u) {
        return Err(format!(
            "accepted record {index} with byte {at} possibly unwritten or torn: {:?}",
            &bytes[..size]
        ));
    }
    let view = RecordView::parse(&bytes[..size], CAPACITY)
        .map_err(|e| format!("record {index} does not parse: {e}"))?;
    let header = view.header;
    let attrs = view.entries().map(|(k, v)| (k, v.to_vec())).collect();
    Ok(Found::Record(Logical {
        trace_id: header.trace_id,
        span_id: header.span_id,
        trace_flags: header.trace_flags,
        attrs,
    }))
}

/// A scenario: steps run before the reader exists, then the writer's steps.
struct Scenario {
    name: &'static str,
    setup: &'static [Step],
    steps: &'static [Step],
}

/// What the reader found, summed over every execution of one scenario.
#[derive(Default)]
struct Seen {
    executions: usize,
    null: usize,
    invalid: usize,
    /// Accepted records: the state the interrupted step produces (`after`), the one
    /// before it (`before`), or an earlier one whose newer stores the compiler had not
    /// emitted yet (`older`).
    before: usize,
    after: usize,
    older: usize,
    /// Where the reader stopped the writer: before interrupt point `n` (counted from 1
    /// in the first step), or after the last one (`total_points + 1`).
    points: BTreeSet<usize>,
    /// Interrupt points the writer passes in one execution.
    total_points: usize,
}

impl Seen {
    fn summary(&self) -> String {
        format!(
            "{} executions; stopped at {} of {} points; {} views: NULL {}, invalid {}, \
             accepted {} (the state after the interrupted step {}, before it {}, older {})",
            self.executions,
            self.points.len(),
            self.total_points + 1,
            self.null + self.invalid + self.before + self.after + self.older,
            self.null,
            self.invalid,
            self.before + self.after + self.older,
            self.after,
            self.before,
            self.older
        )
    }
}

/// Runs `scenario` under loom, checking every view of every stop.
fn check(scenario: &'static Scenario, seen: &'static Mutex<Seen>) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(3));
    builder.check(move || {
        seen.lock().unwrap_or_else(|e| e.into_inner()).executions += 1;
        let shared = Arc::new(Shared::new());
        // The setup and the states the writer's steps go through.
        let mut intent = Intent::new();
        for &step in scenario.setup {
            run(&shared, &intent, step);
            intent.apply(step);
        }
        shared.write(|m| {
            m.fence();
            m.points = 0;
        });
        let mut states = vec![intent.visible()];
        let mut intents = vec![intent.clone()];
        for &step in scenario.steps {
            intent.apply(step);
            states.push(intent.visible());
            intents.push(intent.clone());
        }

        let writer = {
            let shared = shared.clone();
            let intents = intents.clone();
            thread::spawn(move || {
                for (index, &step) in scenario.steps.iter().enumerate() {
                    shared.write(|m| m.step = index);
                    run(&shared, &intents[index], step);
                }
                shared.write(|m| m.step = scenario.steps.len());
                // Release: the reader that sees `done` sees every store.
                shared.done.store(true, Ordering::Release);
            })
        };

        // The reader: stop the writer, read, let it go.
        shared.stop.store(true, Ordering::SeqCst);
        while !(shared.parked.load(Ordering::Acquire) || shared.done.load(Ordering::Acquire)) {
            thread::yield_now();
        }
        // Parked at interrupt point `points` (counted from 1), or after the last one.
        let parked = shared.parked.load(Ordering::Acquire);
        let (step, point, results) = shared.read(|m| {
            let results: Vec<_> = m.views().iter().map(read_view).collect();
            (m.step, m.points + usize::from(!parked), results)
        });
        shared.resume.store(true, Ordering::Release);

        // The states the attached record has had so far: the one the interrupted step
        // produces is the last.
        let had = &states[..states.len().min(step + 2)];
        let mut stats = seen.lock().unwrap_or_else(|e| e.into_inner());
        stats.points.insert(point);
        for result in results {
            match result {
                Err(problem) => panic!(
                    "{}: stopped in step {step} ({:?}): {problem}",
                    scenario.name,
                    scenario.steps.get(step)
                ),
                Ok(Found::Null) => stats.null += 1,
                Ok(Found::Invalid) => stats.invalid += 1,
                Ok(Found::Record(record)) => {
                    // The newest state first: states may repeat.
                    match had.iter().rposition(|s| s.as_ref() == Some(&record)) {
                        Some(i) if i == step + 1 => stats.after += 1,
                        Some(i) if i == step => stats.before += 1,
                        Some(_) => stats.older += 1,
                        None => panic!(
                            "{}: stopped in step {step} ({:?}), accepted {record:?}, a record \
                             the writer never wrote; it wrote {had:?}",
                            scenario.name,
                            scenario.steps.get(step)
                        ),
                    }
                }
            }
        }
        drop(stats);
        writer.join().expect("the writer thread");
        // After the last step: the slot holds what the steps say, and the other library's
        // record is as it wrote it.
        let last = intents.last().expect("the state after the last step");
        let mut foreign = [0u8; CAPACITY];
        Logical::foreign().write_to(&mut foreign);
        shared.read(|m| {
            assert_eq!(
                m.latest.slot,
                last.attached.map_or(0, address),
                "{}: the slot after the last step",
                scenario.name
            );
            assert!(
                m.latest.bytes[FOREIGN] == foreign && !m.latest.unknown[FOREIGN].contains(&true),
                "{}: the foreign record changed",
                scenario.name
            );
        });
        let total = shared.read(|m| m.points);
        seen.lock().unwrap_or_else(|e| e.into_inner()).total_points = total;
    });
}

const ATTACH_AND_UPDATE: Scenario = Scenario {
    name: "attach, update in place",
    setup: &[],
    steps: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "one")],
        },
        Step::Attach { record: Some(0) },
        Step::Update {
            record: 0,
            version: 2,
            attrs: &[(0, "two"), (1, "2")],
        },
    ],
};

const GROW_AND_SHRINK: Scenario = Scenario {
    name: "append, truncate, append into the released bytes, truncate",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
    ],
    steps: &[
        Step::Append {
            record: 0,
            key: 1,
            value: "bb",
        },
        Step::Truncate { record: 0, keep: 1 },
        Step::Append {
            record: 0,
            key: 2,
            value: "ccc",
        },
        Step::Truncate { record: 0, keep: 0 },
    ],
};

const SWAP_AND_DETACH: Scenario = Scenario {
    name: "build another record, swap it in, free the old one, detach, free",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
    ],
    steps: &[
        Step::Update {
            record: 1,
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Attach { record: Some(1) },
        Step::Attach { record: None },
    ],
};

const FOREIGN_IN_THE_SLOT: Scenario = Scenario {
    name: "another library's record in the slot: refused, left alone, swapped out, put back",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::ForeignAttach,
    ],
    steps: &[
        Step::UpdateAttached {
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Detach,
        Step::Attach { record: Some(0) },
        Step::UpdateAttached {
            version: 3,
            attrs: &[(0, "c")],
        },
        Step::PutBack,
    ],
};

const OURS_UNDER_FOREIGN: Scenario = Scenario {
    name: "a record of this crate under another library's is recognised when it comes back",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
        Step::ForeignAttach,
    ],
    steps: &[
        Step::Update {
            record: 1,
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Attach { record: Some(1) },
        Step::PutBack,
        Step::ForeignDetach,
        Step::UpdateAttached {
            version: 3,
            attrs: &[(0, "c")],
        },
    ],
};

/// Checks a scenario of the crate's own steps and that the reader saw each kind of
/// state.
fn check_protocol(scenario: &'static Scenario) -> &'static Mutex<Seen> {
    let seen: &'static Mutex<Seen> = Box::leak(Box::new(Mutex::new(Seen::default())));
    check(scenario, seen);
    let seen_now = seen.lock().unwrap_or_else(|e| e.into_inner());
    println!("{}: {}", scenario.name, seen_now.summary());
    let every_point: BTreeSet<usize> = (1..=seen_now.total_points + 1).collect();
    assert_eq!(
        seen_now.points,
        every_point,
        "the reader did not stop the writer at every point: {}",
        seen_now.summary()
    );
    assert!(
        seen_now.before > 0 && seen_now.after > 0,
        "{}",
        seen_now.summary()
    );
    drop(seen_now);
    seen
}

#[test]
fn loom_attach_and_update_in_place() {
    let seen = check_protocol(&ATTACH_AND_UPDATE);
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    assert!(seen.null > 0 && seen.invalid > 0, "{}", seen.summary());
}

#[test]
fn loom_grow_and_shrink_in_place() {
    check_protocol(&GROW_AND_SHRINK);
}

#[test]
fn loom_swap_free_and_detach() {
    let seen = check_protocol(&SWAP_AND_DETACH);
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    assert!(seen.null > 0, "{}", seen.summary());
}

#[test]
fn loom_foreign_record_in_the_slot() {
    check_protocol(&FOREIGN_IN_THE_SLOT);
}

#[test]
fn loom_record_under_a_foreign_one() {
    check_protocol(&OURS_UNDER_FOREIGN);
}

/// Runs a scenario with a broken step; returns loom's failure message.
fn failure_with(scenario: &'static Scenario) -> String {
    let seen: &'static Mutex<Seen> = Box::leak(Box::new(Mutex::new(Seen::default())));
    let result = catch_unwind(AssertUnwindSafe(|| check(scenario, seen)));
    let executions = seen.lock().unwrap_or_else(|e| e.into_inner()).executions;
    let payload = match result {
        Ok(()) => panic!(
            "loom found nothing wrong with {} after {executions} executions",
            scenario.name
        ),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    println!(
        "{}: loom failed after {executions} executions: {message}",
        scenario.name
    );
    message
}

#[test]
fn loom_catches_an_update_without_its_first_fence() {
    const BROKEN: Scenario = Scenario {
        name: "broken: update in place without the fence after valid = 0",
        setup: &[
            Step::Update {
                record: 0,
                version: 1,
                attrs: &[(0, "one")],
            },
            Step::Attach { record: Some(0) },
        ],
        steps: &[Step::UpdateWithoutFirstFence {
            record: 0,
            version: 2,
            attrs: &[(0, "two")],
        }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("possibly unwritten or torn"), "{message}");
}

#[test]
fn loom_catches_an_append_without_its_fence() {
    const BROKEN: Scenario = Scenario {
        name: "broken: append without the fence before the new size",
        setup: GROW_AND_SHRINK.setup,
        steps: &[Step::AppendWithoutFence {
            record: 0,
            key: 1,
            value: "bb",
        }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("possibly unwritten or torn"), "{message}");
}

#[test]
fn loom_catches_a_free_before_the_slot_store_is_emitted() {
    const BROKEN: Scenario = Scenario {
        name: "broken: swap without the fence after the slot store, then free",
        setup: SWAP_AND_DETACH.setup,
        steps: &[
            Step::Update {
                record: 1,
                version: 2,
                attrs: &[(0, "b")],
            },
            Step::AttachWithoutTrailingFence { record: Some(1) },
        ],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("may be anything"), "{message}");
}

#[test]
fn loom_catches_a_swap_that_frees_a_foreign_record() {
    const BROKEN: Scenario = Scenario {
        name: "broken: swap that frees whatever the slot held",
        setup: FOREIGN_IN_THE_SLOT.setup,
        steps: &[Step::AttachFreeingAnything { record: Some(0) }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("freed the foreign record"), "{message}");
}
