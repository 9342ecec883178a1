//! A loom model of the process-context header protocol (OTEP 4719) against a reader on
//! another CPU.
//!
//! ```sh
//! LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p otel-ctx-writer --release --lib -- loom::
//! ```
//!
//! (`RELIABILITY.md` gives the faster-to-build command CI uses.)
//!
//! **The writer** is this crate's own code: [`publish_header`], [`update_header`] and
//! [`withdraw_header`] from `mapping.rs`, the functions `Publisher` calls, run on a
//! [`ModelHeader`] whose five fields are loom atomics and whose barrier is loom's
//! `fence(SeqCst)`. Around them the model does what `Publisher` does with the payload:
//! encodes the new one into a buffer before the update (relaxed stores: the encoder's
//! plain writes) and frees the old one after it. Freeing is modelled as the allocator
//! reusing the memory at once: every word of the old buffer is overwritten with
//! [`FREED`], with stores loom sees. A later version may get the same buffer again, as
//! `malloc` may hand back the same address.
//!
//! **The reader** follows `reader-linux/src/reader.rs` step for step (it cannot run here
//! itself: it copies with `process_vm_readv`): the timestamp on its own, a fence, the
//! header (identity, then timestamp equal and non-zero, then `validate`), a fence, the
//! payload, a fence, the timestamp again. A copy of another process's memory is modelled
//! as relaxed loads of each field and word: the CPU may show the reader any store the
//! memory model allows, in any mix. One assumption is made: each 4- or 8-byte field is
//! read whole (not torn), as the aligned copies of `process_vm_readv` read it in practice.
//!
//! **Loom explores** every interleaving of the two threads (within the preemption bound)
//! and every value each relaxed load may return under the C++ memory model. In every one
//! of them the model asserts that a read the reader accepts is one version:
//! `monotonic_published_at_ns`, `payload_size` and every payload word all name the same
//! version, no word is [`FREED`], and an accepted read never goes back in time; and that
//! the reader never reports an error (a malformed header, an unmapped payload) for a
//! writer that follows the protocol. The header is never unmapped in the model: after
//! unpublishing it stays readable with timestamp 0, which gives the reader more to get
//! wrong than an unmapped page (where every copy fails cleanly).
//!
//! **The model is not vacuous**: each scenario counts what the reader saw across all
//! executions and asserts that it accepted every version, retried, and read freed words
//! that its final timestamp check then rejected. And three deliberately broken writers,
//! built from the same step functions in a wrong order, must each make loom fail
//! (`catch_unwind` around the model).

use std::panic::{catch_unwind, AssertUnwindSafe};
// The crate is `no_std`: the model, a test, uses std.
use std::string::{String, ToString};
use std::sync::atomic::AtomicUsize as Counter;
use std::sync::Arc as StdArc;
use std::{format, println};

use core::mem::offset_of;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use otel_ctx_codec::header::{ProcessContextHeader, MAX_PAYLOAD_SIZE};

use super::mapping::{
    publish_header, swap_payload, update_header, withdraw_header, write_timestamp, HeaderCells,
};

/// Words in a model payload.
const WORDS: usize = 2;
/// What a freed payload holds: memory the allocator handed to someone else.
const FREED: u64 = 0xDEAD_DEAD_DEAD_DEAD;
/// Address of payload buffer 0 in the model; buffer `i` is `i * STRIDE` further.
const HEAP_BASE: u64 = 0x7f00_0000_1000;
const STRIDE: u64 = 0x1000;
/// Payload buffers in the model heap.
const BUFFERS: usize = 2;

/// The header, each field a loom atomic.
struct ModelHeader {
    signature: AtomicU64,
    version: AtomicU32,
    payload_size: AtomicU32,
    monotonic_published_at_ns: AtomicU64,
    payload: AtomicU64,
}

impl ModelHeader {
    fn new() -> Self {
        Self {
            signature: AtomicU64::new(0),
            version: AtomicU32::new(0),
            payload_size: AtomicU32::new(0),
            monotonic_published_at_ns: AtomicU64::new(0),
            payload: AtomicU64::new(0),
        }
    }

    fn u32_field(&self, offset: usize) -> &AtomicU32 {
        match offset {
            o if o == offset_of!(ProcessContextHeader, version) => &self.version,
            o if o == offset_of!(ProcessContextHeader, payload_size) => &self.payload_size,
            _ => panic!("no 4-byte header field at offset {offset}"),
        }
    }

    fn u64_field(&self, offset: usize) -> &AtomicU64 {
        match offset {
            o if o == offset_of!(ProcessContextHeader, signature) => &self.signature,
            o if o == offset_of!(ProcessContextHeader, monotonic_published_at_ns) => {
                &self.monotonic_published_at_ns
            }
            o if o == offset_of!(ProcessContextHeader, payload) => &self.payload,
            _ => panic!("no 8-byte header field at offset {offset}"),
        }
    }
}

impl HeaderCells for ModelHeader {
    fn store_u32(&self, offset: usize, value: u32) {
        // The same ordering as the mapping's stores.
        self.u32_field(offset).store(value, Ordering::Relaxed);
    }

    fn store_u64(&self, offset: usize, value: u64) {
        // The same ordering as the mapping's stores.
        self.u64_field(offset).store(value, Ordering::Relaxed);
    }

    fn barrier(&self) {
        // The mapping's barrier.
        fence(Ordering::SeqCst);
    }
}

/// The header and the payload buffers of one execution.
struct Model {
    header: ModelHeader,
    heap: [[AtomicU64; WORDS]; BUFFERS],
}

/// `payload_size` of version `v`: different for every version, so a header that mixes
/// the size of one version with the pointer of another is seen.
fn payload_size(version: u64) -> u32 {
    100 + version as u32
}

/// Address of buffer `index`.
fn address(index: usize) -> u64 {
    HEAP_BASE + index as u64 * STRIDE
}

impl Model {
    fn new() -> Self {
        Self {
            header: ModelHeader::new(),
            heap: core::array::from_fn(|_| core::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// Update step 1: encode version `version` into buffer `index` (the encoder's plain
    /// writes, before the header points at it).
    fn encode(&self, index: usize, version: u64) {
        for word in &self.heap[index] {
            word.store(version, Ordering::Relaxed);
        }
    }

    /// Frees buffer `index`: the allocator gives it to someone who overwrites it.
    fn free(&self, index: usize) {
        for word in &self.heap[index] {
            word.store(FREED, Ordering::Relaxed);
        }
    }

    /// The buffer at `payload`, if the model heap has one there ("mapped").
    fn buffer_at(&self, payload: u64) -> Option<&[AtomicU64; WORDS]> {
        let offset = payload.checked_sub(HEAP_BASE)?;
        if !offset.is_multiple_of(STRIDE) {
            return None;
        }
        self.heap.get(usize::try_from(offset / STRIDE).ok()?)
    }

    /// Publish: encode version 1 into buffer `index`, then the header's publish steps.
    fn publish(&self, index: usize) {
        self.encode(index, 1);
        publish_header(&self.header, payload_size(1), address(index), 1);
    }

    /// Update from buffer `old` to version `version` in buffer `new`, as `how` says.
    fn update(&self, how: Writer, old: usize, new: usize, version: u64) {
        let header = &self.header;
        let (size, payload) = (payload_size(version), address(new));
        self.encode(new, version);
        match how {
            Writer::Protocol => {
                update_header(header, size, payload, version);
                self.free(old);
            }
            Writer::TimestampBeforeSwap => {
                write_timestamp(header, 0);
                header.barrier();
                write_timestamp(header, version);
                header.barrier();
                swap_payload(header, size, payload);
                self.free(old);
            }
            Writer::NoBarrierBeforeTimestamp => {
                write_timestamp(header, 0);
                header.barrier();
                swap_payload(header, size, payload);
                write_timestamp(header, version);
                self.free(old);
            }
            Writer::FreeBeforeUpdate => {
                self.free(old);
                update_header(header, size, payload, version);
            }
        }
    }

    /// Unpublish: the header's withdraw steps, then the payload is freed. (The mapping
    /// stays readable: see the module documentation.)
    fn unpublish(&self, index: usize) {
        withdraw_header(&self.header);
        self.free(index);
    }
}

/// How the writer orders an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    /// [`update_header`], then free the old payload: the crate's own code.
    Protocol,
    /// Broken: the new timestamp is written before the pointer and size are swapped.
    TimestampBeforeSwap,
    /// Broken: no barrier between the swap and the new timestamp.
    NoBarrierBeforeTimestamp,
    /// Broken: the old payload is freed before the update starts.
    FreeBeforeUpdate,
}

/// What one read attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// A read the reader returns to its caller.
    Accepted {
        monotonic_published_at_ns: u64,
        payload_size: u32,
        words: [u64; WORDS],
    },
    /// The reader tries again (timestamp 0, or changed under it). `saw_freed`: the
    /// payload copy had freed words in it.
    Retry { saw_freed: bool },
    /// No header with the right signature and version (not yet published).
    NoContext,
    /// An error the reader would report to its caller.
    Error(&'static str),
}

/// One attempt of `ProcessContextReader::attempt` on the model.
fn read_attempt(model: &Model) -> Attempt {
    let header = &model.header;
    // Step 3 first: the timestamp on its own.
    let published_at = header.monotonic_published_at_ns.load(Ordering::Relaxed);
    // Orders the timestamp read above before the header copy below (reader.rs).
    fence(Ordering::SeqCst);
    // Step 2: the header, copied field by field in address order.
    let copy = ProcessContextHeader {
        signature: header.signature.load(Ordering::Relaxed).to_ne_bytes(),
        version: header.version.load(Ordering::Relaxed),
        payload_size: header.payload_size.load(Ordering::Relaxed),
        monotonic_published_at_ns: header.monotonic_published_at_ns.load(Ordering::Relaxed),
        payload: header.payload.load(Ordering::Relaxed),
    };
    if copy.check_identity().is_err() {
        return Attempt::NoContext;
    }
    if published_at == 0 || copy.monotonic_published_at_ns != published_at {
        return Attempt::Retry { saw_freed: false };
    }
    let changed = || header.monotonic_published_at_ns.load(Ordering::Relaxed) != published_at;
    if copy.validate(MAX_PAYLOAD_SIZE).is_err() {
        // The header copy is not atomic: a bad size may be a torn read of an update.
        return if changed() {
            Attempt::Retry { saw_freed: false }
        } else {
            Attempt::Error("malformed header")
        };
    }
    // Step 4: orders the header read above before the payload copy below.
    fence(Ordering::SeqCst);
    let Some(buffer) = model.buffer_at(copy.payload) else {
        return if changed() {
            Attempt::Retry { saw_freed: false }
        } else {
            Attempt::Error("payload pointer unmapped")
        };
    };
    let words: [u64; WORDS] = core::array::from_fn(|i| buffer[i].load(Ordering::Relaxed));
    // Orders the payload copy above before the timestamp re-read below.
    fence(Ordering::SeqCst);
    // Step 5.
    if changed() {
        return Attempt::Retry {
            saw_freed: words.contains(&FREED),
        };
    }
    Attempt::Accepted {
        monotonic_published_at_ns: published_at,
        payload_size: copy.payload_size,
        words,
    }
}

/// What the reader saw, summed over every execution of one scenario.
#[derive(Default)]
struct Seen {
    executions: Counter,
    /// Accepted reads, by version (index 0 unused).
    accepted: [Counter; 4],
    retries: Counter,
    /// Retries whose payload copy had freed words: the final check caught them.
    freed_rejected: Counter,
    no_context: Counter,
}

impl Seen {
    fn count(&self, counter: &Counter) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(counter: &Counter) -> usize {
        counter.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn summary(&self) -> String {
        format!(
            "{} executions; accepted v1 {}, v2 {}, v3 {}; {} retries ({} with freed words); \
             {} without a context",
            Self::get(&self.executions),
            Self::get(&self.accepted[1]),
            Self::get(&self.accepted[2]),
            Self::get(&self.accepted[3]),
            Self::get(&self.retries),
            Self::get(&self.freed_rejected),
            Self::get(&self.no_context),
        )
    }
}

/// The reader thread: `attempts` read attempts, each result checked.
fn reader(model: &Model, attempts: usize, seen: &Seen) {
    let mut last_accepted = 0;
    for _ in 0..attempts {
        match read_attempt(model) {
            Attempt::Accepted {
                monotonic_published_at_ns,
                payload_size: size,
                words,
            } => {
                let version = monotonic_published_at_ns;
                assert!(
                    !words.contains(&FREED),
                    "accepted a freed payload: version {version}, words {words:x?}"
                );
                assert!(
                    size == payload_size(version) && words.iter().all(|&w| w == version),
                    "accepted a mix of versions: timestamp {version}, payload_size {size} \
                     (version {}), payload words {words:?}",
                    size.wrapping_sub(100)
                );
                assert!(
                    version >= last_accepted,
                    "went back in time: version {version} after {last_accepted}"
                );
                last_accepted = version;
                seen.count(&seen.accepted[version as usize]);
            }
            Attempt::Retry { saw_freed } => {
                seen.count(&seen.retries);
                if saw_freed {
                    seen.count(&seen.freed_rejected);
                }
            }
            Attempt::NoContext => seen.count(&seen.no_context),
            Attempt::Error(what) => panic!("the reader reported an error: {what}"),
        }
    }
}

/// Loom's settings: the environment's (`LOOM_MAX_PREEMPTIONS`, ...), with at most 3
/// preemptions when it says nothing.
fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(3));
    builder
}

/// Scenario 1: publish version 1 in buffer 0, update to version 2 in buffer 1 (as `how`
/// orders it), while the reader makes two attempts from the very start.
fn publish_then_update(how: Writer, seen: StdArc<Seen>) {
    builder().check(move || {
        seen.count(&seen.executions);
        let model = Arc::new(Model::new());
        let writer = {
            let model = model.clone();
            thread::spawn(move || {
                model.publish(0);
                model.update(how, 0, 1, 2);
            })
        };
        reader(&model, 2, &seen);
        writer.join().expect("the writer thread");
    });
}

/// Scenario 2: published version 1 in buffer 0; update to version 2 in buffer 1, update
/// to version 3 back in buffer 0 (the allocator reused it), unpublish; the reader makes
/// two attempts meanwhile.
fn update_reuse_unpublish(seen: StdArc<Seen>) {
    builder().check(move || {
        seen.count(&seen.executions);
        let model = Arc::new(Model::new());
        model.publish(0);
        let writer = {
            let model = model.clone();
            thread::spawn(move || {
                model.update(Writer::Protocol, 0, 1, 2);
                model.update(Writer::Protocol, 1, 0, 3);
                model.unpublish(0);
            })
        };
        reader(&model, 2, &seen);
        writer.join().expect("the writer thread");
    });
}

#[test]
fn loom_publish_and_update_against_a_reader() {
    let seen = StdArc::new(Seen::default());
    publish_then_update(Writer::Protocol, seen.clone());
    println!("publish, update: {}", seen.summary());
    for version in 1..=2 {
        assert!(Seen::get(&seen.accepted[version]) > 0, "{}", seen.summary());
    }
    assert!(Seen::get(&seen.no_context) > 0, "{}", seen.summary());
    assert!(Seen::get(&seen.retries) > 0, "{}", seen.summary());
    assert!(Seen::get(&seen.freed_rejected) > 0, "{}", seen.summary());
}

#[test]
fn loom_updates_reusing_a_payload_then_unpublish() {
    let seen = StdArc::new(Seen::default());
    update_reuse_unpublish(seen.clone());
    println!(
        "update, update (reused buffer), unpublish: {}",
        seen.summary()
    );
    for version in 1..=3 {
        assert!(Seen::get(&seen.accepted[version]) > 0, "{}", seen.summary());
    }
    assert!(Seen::get(&seen.freed_rejected) > 0, "{}", seen.summary());
}

/// Runs scenario 1 with a broken writer; returns loom's failure message.
fn failure_with(how: Writer) -> String {
    let seen = StdArc::new(Seen::default());
    let result = catch_unwind(AssertUnwindSafe(|| publish_then_update(how, seen.clone())));
    let payload = match result {
        Ok(()) => panic!(
            "loom found nothing wrong with the broken writer {how:?}: {}",
            seen.summary()
        ),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    println!(
        "{how:?}: loom failed after {} executions: {message}",
        Seen::get(&seen.executions)
    );
    message
}

/// The failure is the reader accepting what it must not (not some other panic).
fn assert_inconsistent(message: &str) {
    assert!(
        message.contains("accepted a mix of versions")
            || message.contains("accepted a freed payload"),
        "{message}"
    );
}

#[test]
fn loom_catches_a_timestamp_written_before_the_swap() {
    assert_inconsistent(&failure_with(Writer::TimestampBeforeSwap));
}

#[test]
fn loom_catches_a_missing_barrier_before_the_timestamp() {
    assert_inconsistent(&failure_with(Writer::NoBarrierBeforeTimestamp));
}

#[test]
fn loom_catches_a_payload_freed_before_the_update() {
    assert_inconsistent(&failure_with(Writer::FreeBeforeUpdate));
}
