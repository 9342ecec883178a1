//! The `otel_thread_ctx_v1` TLS variable and its TLSDESC access sequence.
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

use core::sync::atomic::{AtomicPtr, Ordering};

use super::record::Record;

// An 8-byte, 8-aligned, zero-initialised (NULL) object in `.tbss`. The assembler gives a
// symbol defined in a TLS section the type `STT_TLS`; `.globl` makes it GLOBAL so that a
// linker asked to export it (see the `export` module) puts it in `.dynsym`.
//
// Linking two copies of this crate into one binary fails with a duplicate symbol: there
// must be exactly one slot per process, so that is wanted.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl otel_thread_ctx_v1",
    ".type otel_thread_ctx_v1, @object",
    ".size otel_thread_ctx_v1, 8",
    "otel_thread_ctx_v1:",
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
/// Only the owning thread ever stores to its slot; readers are a signal handler on that
/// thread or an external process that stopped it. Relaxed atomic loads and stores (plain
/// `mov`/`ldr`/`str`, no locked instruction) are enough: what needs ordering is the
/// compiler's placement of the stores, which the callers fix with `compiler_fence`.
#[inline(always)]
fn slot() -> &'static AtomicPtr<Record> {
    const { assert!(core::mem::align_of::<AtomicPtr<Record>>() == core::mem::align_of::<*mut Record>()) };
    // SAFETY: the slot is 8 bytes, 8-aligned (`.p2align 3`), valid for the whole life of
    // the thread, and only ever accessed atomically by this crate. The `'static` lifetime
    // never leaves this module: callers use it at once on the same thread.
    unsafe { AtomicPtr::from_ptr(slot_address()) }
}

/// The record the slot points at (NULL when none).
#[inline(always)]
pub(crate) fn load() -> *mut Record {
    slot().load(Ordering::Relaxed)
}

/// A TLS slot as [`replace_in`] writes it: this thread's `otel_thread_ctx_v1`
/// ([`ThisThread`]), or a model's slot in the loom tests (`loom.rs`, under `--cfg loom`).
pub(crate) trait SlotWrites: Copy {
    /// The record the slot points at.
    fn load(self) -> *mut Record;
    /// Points the slot at `record`, with one atomic 8-byte store.
    fn store(self, record: *mut Record);
    /// `compiler_fence(Release)`: the stores before it are emitted before the stores
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
    fn step_fence(self) {
        core::sync::atomic::compiler_fence(Ordering::Release);
    }
}

/// Points the slot at `record` (or NULL) and returns what it pointed at.
///
/// `record`, when not NULL, must be a complete record with `valid == 1`. This is a load
/// and a store rather than an atomic swap: only this thread writes the slot, and a reader
/// that interrupts between the two instructions sees the old value, which is still a
/// complete record.
#[inline(always)]
pub(crate) fn replace(record: *mut Record) -> *mut Record {
    replace_in(ThisThread, record)
}

/// Attach and detach (writer protocol) on `slot`: see [`replace`].
#[inline(always)]
pub(crate) fn replace_in<S: SlotWrites>(slot: S, record: *mut Record) -> *mut Record {
    let previous = slot.load();
    // Orders every write that built `record` (its bytes and `valid = 1`) before the store
    // that makes it reachable from the slot: a reader that finds the pointer finds the
    // whole record.
    slot.step_fence();
    slot.store(record);
    // Orders the slot store before every later write, in particular the caller changing
    // or freeing `previous`: no reader can reach `previous` once those writes start.
    slot.step_fence();
    previous
}

/// The address of this thread's `otel_thread_ctx_v1`, for code that wants to read the
/// slot the way a reader does (tests, in-process checks).
#[inline(always)]
pub fn tls_slot_address() -> *const *const u8 {
    slot_address() as *const *const u8
}

/// The address of the record this thread's `otel_thread_ctx_v1` points at, or NULL.
///
/// It is what an external reader reads from the slot. Dereferencing it is only sound on
/// this thread and while the record stays attached.
#[inline(always)]
pub fn attached_record_address() -> *const u8 {
    load() as *const u8
}
