//! The model writer: a record and a slot that the crate's protocol functions write,
//! interrupt points before each store and fence, the steps a scenario is made of (this
//! crate's, another library's, and the broken ones) and the state each step means.

// The crate is `no_std`: the model, a test, uses std.
use std::vec;
use std::vec::Vec;

use otel_ctx_codec::record::{
    ATTRS_DATA_OFFSET, ATTRS_DATA_SIZE_OFFSET, SPAN_ID_OFFSET, TRACE_FLAGS_OFFSET, TRACE_ID_OFFSET,
    VALID, VALID_OFFSET,
};

use super::super::record::{write_append, write_truncate, write_update, Record, RecordWrites};
use super::super::slot::{detach_ours_in, held_in, swap_in, Held, SlotWrites};
use super::super::store::WRITE_AHEAD;
use super::super::Key;
use super::memory::{Memory, Pending, Shared};
use super::{address, attrs_data_size, index_of, Logical, CAPACITY, FOREIGN, GARBAGE, RECORDS};

/// A record of the model heap, written through the protocol's functions.
#[derive(Clone, Copy)]
pub(super) struct ModelRecord<'a> {
    pub(super) shared: &'a Shared,
    pub(super) record: usize,
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
pub(super) struct ModelSlot<'a> {
    pub(super) shared: &'a Shared,
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

/// One step of the writer.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
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
pub(super) struct Intent {
    pub(super) records: [Logical; RECORDS],
    pub(super) attached: Option<usize>,
    /// What the other library found in the slot, most recent last.
    pub(super) foreign_saved: Vec<Option<usize>>,
}

impl Intent {
    pub(super) fn new() -> Self {
        let mut records: [Logical; RECORDS] = core::array::from_fn(|_| Logical::empty());
        records[FOREIGN] = Logical::foreign();
        Self {
            records,
            attached: None,
            foreign_saved: Vec::new(),
        }
    }

    /// Frees the attached record if it is this crate's.
    pub(super) fn free_attached_if_ours(&mut self) {
        if let Some(previous) = self.attached.filter(|&r| r != FOREIGN) {
            // Freed: nothing of it is known any more.
            self.records[previous] = Logical::empty();
        }
    }

    /// What the production code must find in the slot: `held_in`'s answer, as indexes.
    pub(super) fn held(&self) -> Option<(usize, bool)> {
        self.attached.map(|r| (r, r != FOREIGN))
    }

    /// What a reader should find: the attached record's content.
    pub(super) fn visible(&self) -> Option<Logical> {
        self.attached.map(|r| self.records[r].clone())
    }

    pub(super) fn apply(&mut self, step: Step) {
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

pub(super) fn keys(attrs: &'static [(u8, &'static str)]) -> Vec<(Key, &'static str)> {
    attrs
        .iter()
        .map(|(k, v)| (Key::from_index(*k), *v))
        .collect()
}

/// Runs one step on the model with the crate's protocol functions (or a broken copy).
pub(super) fn run(shared: &Shared, intent: &Intent, step: Step) {
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
pub(super) fn foreign_store(slot: ModelSlot<'_>, record: usize) {
    slot.step_fence();
    slot.store(core::ptr::without_provenance_mut(record));
    slot.step_fence();
}

/// Checks that `held_in` told the slot's record apart as the steps say it must: a record
/// of this crate as its own, the other library's as foreign.
pub(super) fn check_held(intent: &Intent, held: Held) {
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
pub(super) fn free(shared: &Shared, address: usize) {
    if address == 0 {
        return;
    }
    shared.interrupt_point();
    shared.write(|m| m.free(index_of(address)));
}
