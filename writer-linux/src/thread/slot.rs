//! The `otel_thread_ctx_v1` TLS variable, its TLSDESC access sequence, and the writer's
//! record of what it attached there.
//!
//! rustc cannot choose the TLS dialect of a `#[thread_local]` (and that attribute is not
//! stable), so the variable is defined in `global_asm!` and reached through the canonical
//! TLSDESC instruction sequence in `asm!`, byte for byte what gcc emits with
//! `-mtls-dialect=gnu2` (x86_64) or by default (aarch64). Linkers recognise that exact
//! sequence: in a shared library they keep it and emit a TLSDESC relocation; in an
//! executable they relax it to initial-exec or local-exec. Any change to the instructions
//! below, even one that computes the same value, can hide part of the sequence from the
//! linker and leave a half-relaxed access behind: the machine-code test
//! (`tests/thread_machine_code.rs`) pins the bytes and relocations.
//!
//! # Records of other libraries
//!
//! The slot is process-wide by design: a C library or another SDK loaded into the process
//! attaches its own records to it. Their memory is not ours: it has no capacity prefix, may
//! be smaller than a header plus attributes, may sit right after an unmapped page, and is
//! freed by its owner. So the writer keeps, next to the slot, a *shadow*: the record of this
//! crate it last stored in the slot (NULL when none). The slot holds a record of this crate
//! exactly when it equals the shadow; any other non-NULL value is another library's record,
//! which this crate only ever moves in and out of the slot as an opaque pointer
//! ([`Held::Foreign`]).
//!
//! The shadow is an ordinary thread-local word, but not a `thread_local!`: it is defined in
//! the same `global_asm!` block as the slot, 8 bytes after it in the same TLS section, so
//! its address is the slot's address plus 8 and costs no second TLSDESC call (and the
//! crate keeps working without `std`). Readers never look at it.

use core::ptr::NonNull;
use core::sync::atomic::{compiler_fence, AtomicPtr, Ordering};

use super::record::Record;

// An 8-byte, 8-aligned, zero-initialised (NULL) object in `.tbss`. The assembler gives a
// symbol defined in a TLS section the type `STT_TLS`; `.globl` makes it GLOBAL so that a
// linker asked to export it (see the `otel-ctx-export` package) puts it in `.dynsym`.
//
// Linking two copies of this crate into one binary fails with a duplicate symbol: there
// must be exactly one slot per process, so that is wanted.
//
// The shadow (see the module documentation) follows in the same section of the same object
// file: a linker places an input section as a whole, so it stays at the slot's address
// plus 8 in every thread's TLS block, whatever access model the linker picks. It is a
// local symbol: not exported, and invisible to other modules.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl otel_thread_ctx_v1",
    ".type otel_thread_ctx_v1, @object",
    ".size otel_thread_ctx_v1, 8",
    "otel_thread_ctx_v1:",
    ".zero 8",
    ".type otel_ctx_writer_shadow, @object",
    ".size otel_ctx_writer_shadow, 8",
    "otel_ctx_writer_shadow:",
    ".zero 8",
    ".popsection",
);

/// The address of this thread's `otel_thread_ctx_v1`, through TLSDESC.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn slot_address() -> *mut *mut Record {
    let address: usize;
    // SAFETY: the sequence only computes an address. The TLSDESC resolver the `call`
    // reaches preserves every register except `%rax` (the result) and the flags, which
    // are not declared preserved (no `preserves_flags`). The `call` pushes a return address,
    // so `nostack` is absent: the compiler keeps the red zone free around this block.
    // `pure, nomem`: the result depends only on the running thread, and a Rust function
    // body never changes threads between two evaluations, so reusing a result is sound.
    unsafe {
        core::arch::asm!(
            "leaq otel_thread_ctx_v1@TLSDESC(%rip), %rax",
            "call *otel_thread_ctx_v1@TLSCALL(%rax)",
            "addq %fs:0, %rax",
            out("rax") address,
            options(att_syntax, pure, nomem),
        );
    }
    address as *mut *mut Record
}

/// The address of this thread's `otel_thread_ctx_v1`, through TLSDESC.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn slot_address() -> *mut *mut Record {
    let address: usize;
    // SAFETY: the sequence only computes an address. The TLSDESC resolver called by `blr`
    // preserves every register except `x0` (the result) and the condition flags; `x1`
    // holds the resolver's address and `x30` the return address, so both are declared
    // clobbered, and the flags are not declared preserved. The resolver may use the stack,
    // hence no `nostack`. `pure, nomem`: the result depends only on the running thread.
    unsafe {
        core::arch::asm!(
            "adrp x0, :tlsdesc:otel_thread_ctx_v1",
            "ldr x1, [x0, #:tlsdesc_lo12:otel_thread_ctx_v1]",
            "add x0, x0, #:tlsdesc_lo12:otel_thread_ctx_v1",
            ".tlsdesccall otel_thread_ctx_v1",
            "blr x1",
            "mrs x1, tpidr_el0",
            "add x0, x1, x0",
            out("x0") address,
            out("x1") _,
            out("x30") _,
            options(pure, nomem),
        );
    }
    address as *mut *mut Record
}

/// This thread's slot as an atomic pointer.
///
/// Only the owning thread ever stores to its slot (this crate, or another library's
/// writer on the same thread); readers are a signal handler on that thread or an external
/// process that stopped it. Relaxed atomic loads and stores (plain `mov`/`ldr`/`str`, no
/// locked instruction) are enough: what needs ordering is the compiler's placement of the
/// stores, which the callers fix with `compiler_fence`.
#[inline(always)]
fn slot() -> &'static AtomicPtr<Record> {
    const { assert!(core::mem::align_of::<AtomicPtr<Record>>() == core::mem::align_of::<*mut Record>()) };
    // SAFETY: the slot is 8 bytes, 8-aligned (`.p2align 3`), valid for the whole life of
    // the thread, and only ever accessed atomically by this crate (and, as an aligned
    // 8-byte word, by other writers on this thread). The `'static` lifetime never leaves
    // this module: callers use it at once on the same thread.
    unsafe { AtomicPtr::from_ptr(slot_address()) }
}

/// This thread's shadow (see the module documentation) as an atomic pointer.
#[inline(always)]
fn shadow() -> &'static AtomicPtr<Record> {
    // SAFETY: the shadow is the 8 bytes right after the slot in the same TLS section
    // (`global_asm!` above), so 8-aligned and valid for the whole life of the thread; only
    // this module accesses it, atomically, on its own thread. The `'static` lifetime never
    // leaves this module.
    unsafe { AtomicPtr::from_ptr(slot_address().add(1)) }
}

/// The record the slot points at (NULL when none), whoever attached it.
#[inline(always)]
pub(crate) fn load() -> *mut Record {
    slot().load(Ordering::Relaxed)
}

/// A TLS slot as the writer protocol writes it: this thread's `otel_thread_ctx_v1` and its
/// shadow ([`ThisThread`]), or a model's slot in the loom tests (`loom/`, under
/// `--cfg loom`).
pub(crate) trait SlotWrites: Copy {
    /// The record the slot points at.
    fn load(self) -> *mut Record;
    /// Points the slot at `record`, with one atomic 8-byte store.
    fn store(self, record: *mut Record);
    /// The record of this crate last stored in the slot (see the module documentation).
    fn load_shadow(self) -> *mut Record;
    /// Sets the shadow. Readers never see it, so it needs no ordering.
    fn store_shadow(self, record: *mut Record);
    /// `compiler_fence(SeqCst)`: every store before it is emitted before every store
    /// after it.
    fn step_fence(self);
}

/// The calling thread's `otel_thread_ctx_v1`.
#[derive(Clone, Copy)]
pub(crate) struct ThisThread;

impl SlotWrites for ThisThread {
    #[inline(always)]
    fn load(self) -> *mut Record {
        load()
    }

    #[inline(always)]
    fn store(self, record: *mut Record) {
        slot().store(record, Ordering::Relaxed);
    }

    #[inline(always)]
    fn load_shadow(self) -> *mut Record {
        shadow().load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn store_shadow(self, record: *mut Record) {
        shadow().store(record, Ordering::Relaxed);
    }

    #[inline(always)]
    fn step_fence(self) {
        // The reader runs while this thread is stopped, like a signal handler: a signal
        // fence (`atomic_signal_fence(seq_cst)`), SeqCst so that it orders the atomic slot
        // store against the record's atomic and volatile stores on both sides of it.
        compiler_fence(Ordering::SeqCst);
    }
}

/// What a slot holds, told apart by the shadow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// NULL: no record.
    Empty,
    /// A record of this crate, owned by the slot.
    Ours(NonNull<Record>),
    /// Another library's record: never read, written or freed here.
    Foreign {
        /// The record.
        record: NonNull<Record>,
        /// The shadow when it was found: the record of this crate that the other library
        /// replaced (and may put back later), or NULL. Putting the foreign record back
        /// restores it, so that record is recognised again when it returns.
        below: *mut Record,
    },
}

impl Held {
    /// Tells `record`, read from a slot whose shadow is `shadow`, apart.
    #[inline(always)]
    fn classify(record: *mut Record, shadow: *mut Record) -> Self {
        match NonNull::new(record) {
            None => Self::Empty,
            Some(record) if record.as_ptr() == shadow => Self::Ours(record),
            Some(record) => Self::Foreign {
                record,
                below: shadow,
            },
        }
    }
}

/// What the calling thread's slot holds.
#[inline(always)]
pub(crate) fn held() -> Held {
    held_in(ThisThread)
}

/// What `slot` holds.
#[inline(always)]
pub(crate) fn held_in<S: SlotWrites>(slot: S) -> Held {
    Held::classify(slot.load(), slot.load_shadow())
}

/// Points the calling thread's slot at `record` (or NULL) and returns what it held: see
/// [`swap_in`].
#[inline(always)]
pub(crate) fn swap(record: *mut Record, shadow: *mut Record) -> Held {
    swap_in(ThisThread, record, shadow)
}

/// Attach, detach and swap (writer protocol) on `slot`: points it at `record` (or NULL),
/// sets the shadow to `shadow`, and returns what the slot held.
///
/// `record`, when not NULL, must be a complete record with `valid == 1`; `shadow` is
/// `record` for a record of this crate, the `below` of a foreign record being put back, or
/// NULL. This is a load and a store rather than an atomic swap: only this thread writes the
/// slot, and a reader that interrupts between the two instructions sees the old value,
/// which is still a complete record.
#[inline(always)]
pub(crate) fn swap_in<S: SlotWrites>(slot: S, record: *mut Record, shadow: *mut Record) -> Held {
    let previous = held_in(slot);
    store_in(slot, record);
    slot.store_shadow(shadow);
    previous
}

/// Detach (writer protocol) of a record of this crate only: sets the calling thread's
/// slot to NULL and returns the record if the slot held one of this crate's; leaves the
/// slot as it is otherwise (NULL, or another library's record).
#[inline(always)]
pub(crate) fn detach_ours() -> Option<NonNull<Record>> {
    detach_ours_in(ThisThread)
}

/// [`detach_ours`] on `slot`.
#[inline(always)]
pub(crate) fn detach_ours_in<S: SlotWrites>(slot: S) -> Option<NonNull<Record>> {
    let Held::Ours(record) = held_in(slot) else {
        return None;
    };
    store_in(slot, core::ptr::null_mut());
    slot.store_shadow(core::ptr::null_mut());
    Some(record)
}

/// The store of the slot (writer protocol: "point the TLS slot at it", "set the slot to
/// NULL"), between the two fences that order it.
#[inline(always)]
pub(crate) fn store_in<S: SlotWrites>(slot: S, record: *mut Record) {
    // Orders every write that built `record` (its bytes and `valid = 1`) before the store
    // that makes it reachable from the slot: a reader that finds the pointer finds the
    // whole record.
    slot.step_fence();
    slot.store(record);
    // Orders the slot store before every later write, in particular the caller changing
    // or freeing the record it replaced: no reader can reach that record once those
    // writes start.
    slot.step_fence();
}

/// The address of this thread's `otel_thread_ctx_v1`, for code that wants to read the
/// slot the way a reader does (tests, in-process checks).
#[inline(always)]
pub fn tls_slot_address() -> *const *const u8 {
    slot_address() as *const *const u8
}

/// The address of the record this thread's `otel_thread_ctx_v1` points at, or NULL.
///
/// It is what an external reader reads from the slot: a record of this crate, or one
/// another library attached. Dereferencing it is only sound on this thread and while the
/// record stays attached.
#[inline(always)]
pub fn attached_record_address() -> *const u8 {
    load() as *const u8
}
