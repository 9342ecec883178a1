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
//! - **The writer** is this crate's own code: `write_update`, `write_append`,
//!   `write_truncate` (`record.rs`), and `swap_in`, `detach_ours_in` and `held_in`
//!   (`slot.rs`), the functions `ThreadContext`, `update`, `append`, `truncate_attrs`,
//!   `swap` and `detach` call, run on a [`ModelRecord`](writer::ModelRecord) and a
//!   [`ModelSlot`](writer::ModelSlot) that see every store and every fence. What the slot held decides, as in `context.rs`, what the step
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
//!
//! # The files
//!
//! - `memory.rs`: the model memory (its two images and the stores pending since the last
//!   fence) and the stop handshake between the writer and the reader.
//! - `writer.rs`: the model record and slot the protocol functions write, the steps of a
//!   scenario and what each means.
//! - `reader.rs`: the reader, on one image of the memory.
//! - `scenarios.rs`: the loom runs, the scenarios and the deliberately broken writers.
//! - here: the model heap's constants and a record's content ([`Logical`]).

// The crate is `no_std`: the model, a test, uses std.
use std::vec;
use std::vec::Vec;

use otel_ctx_codec::record::{
    ATTRS_DATA_OFFSET, ATTRS_DATA_SIZE_OFFSET, SPAN_ID_OFFSET, TRACE_FLAGS_OFFSET, TRACE_ID_OFFSET,
    VALID, VALID_OFFSET,
};

mod memory;
mod reader;
mod scenarios;
mod writer;

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

fn address(record: usize) -> usize {
    HEAP_BASE + record * STRIDE
}

/// The model record at `address`.
fn index_of(address: usize) -> usize {
    (address - HEAP_BASE) / STRIDE
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
