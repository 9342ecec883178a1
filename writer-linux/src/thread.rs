//! Thread context (OTEP 4947): the `otel_thread_ctx_v1` TLS slot and its records.
//!
//! Every thread has an 8-byte ELF TLS variable, `otel_thread_ctx_v1`, that points at the
//! thread's current record or is NULL. An external reader (an eBPF profiler, a ptrace
//! tool) stops the thread, reads the pointer, then the record: trace id, span id, trace
//! flags and attributes whose keys are indexes into the process context's
//! `threadlocal.attribute_key_map`.
//!
//! - [`ThreadContext`]: one owned record, allocated when created, then updated without
//!   allocation. [`ThreadContext::attach`] makes it the thread's record and returns what
//!   it replaced ([`Attached`]); [`detach`] takes it back; [`ThreadContext::attach_scoped`]
//!   restores the previous one when its guard drops.
//! - [`update`], [`append`], [`append_truncated`], [`truncate_attrs`]: change the attached
//!   record in place, following the writer protocol of the specification (`valid = 0`,
//!   write, `valid = 1`; or grow past `attrs_data_size` and then publish the new size).
//! - [`Key`] and, with `std`, [`register`]: attribute keys and the key map published in
//!   the process context; [`KeyMap`], the fixed-capacity key map (256 names) the registry
//!   keeps and a program without a heap keeps itself.
//! - Without a heap: [`ThreadContext::in_storage`] makes a context in a [`RecordStorage`]
//!   the caller provides (a [`RecordPool`] hands them out from a `static`); everything else
//!   is the same API.
//!
//! ```
//! use otel_ctx_writer::thread::{self, Key, ThreadContext};
//!
//! let route = Key::from_index(0);
//! let context = ThreadContext::new([1; 16], [2; 8], 0x01, &[(route, "/users/:id")])?;
//! let previous = context.attach();
//! assert!(previous.is_none());
//! // A context is always recorded in full, or not at all (OTEP 4947's MUSTs).
//! let half = thread::update([3; 16], [0; 8], 0x01, &[]).unwrap_err();
//! assert_eq!(half.kind(), "trace_id_without_span_id");
//! thread::update([3; 16], [4; 8], 0x01, &[(route, "/orders")])?;
//! thread::append(Key::from_index(1), "GET")?;
//! let context = thread::detach().expect("attached above");
//! assert_eq!(context.attr_count(), 2);
//! # Ok::<(), otel_ctx_writer::thread::ContextError>(())
//! ```
//!
//! The binary (or shared library) must export `otel_thread_ctx_v1` in `.dynsym` for
//! readers to find it: see the `otel-ctx-export` package and `EXPORTING.md`.
//!
//! # How a context is removed
//!
//! OTEP 4947 lets a writer remove a context either by setting the slot to NULL or by
//! setting `valid = 0` in a record the slot keeps pointing at, and asks it to use one of
//! the two, not both. This crate sets and unsets the pointer: attach points the slot at a
//! complete, valid record; detach (and swap, and the drop of a guard, and thread exit)
//! sets it to NULL or to another complete record. `valid` is `0` only inside an in-place
//! update of the attached record (`valid = 0`, write, `valid = 1`), never as a way to
//! remove a context: every record the slot points at between two calls of this crate,
//! and every record it hands back, is valid.
//!
//! # Other libraries' records
//!
//! `otel_thread_ctx_v1` is process-wide by design: a C library or another SDK in the same
//! process attaches its own records to the same slot. This crate recognises its own
//! records (it keeps, beside the slot, the record of its own it last attached) and treats
//! any other pointer as opaque: it never reads its size, writes into it or frees it.
//! Attaching over it returns it as [`Attached::Foreign`], which can be attached again;
//! [`detach`] and thread exit leave it in the slot; in-place changes refuse it with
//! [`ContextError::ForeignRecordAttached`].
//!
//! # Ordering
//!
//! Writes are ordered with compiler fences only: a record is written by its own thread and
//! read while that thread is stopped (signal-handler semantics), so the CPU's own order
//! needs no barrier. Every store a reader can see is atomic or volatile, and the steps are
//! separated by `compiler_fence(SeqCst)`, the `atomic_signal_fence(seq_cst)` the
//! specification asks for.

//! # Outside Linux
//!
//! The slot and its records exist only on Linux. Elsewhere this module has [`Key`] and,
//! with `std`, the future wrappers, which then do nothing (`in_current_thread_context`
//! polls the future as it is), so that portable code and the integrations built on them
//! compile everywhere.

#[cfg(all(
    target_os = "linux",
    not(any(target_arch = "x86_64", target_arch = "aarch64"))
))]
compile_error!(
    "otel-ctx-writer's thread context supports only Linux on x86_64 and aarch64: the \
     otel_thread_ctx_v1 slot is reached through a TLSDESC instruction sequence written for \
     those two architectures"
);

#[cfg(target_os = "linux")]
mod context;
#[cfg(target_os = "linux")]
mod error;
#[cfg(feature = "std")]
mod future;
mod key;
mod key_map;
#[cfg(all(test, loom))]
mod loom;
#[cfg(target_os = "linux")]
mod record;
#[cfg(all(feature = "std", target_os = "linux"))]
mod registry;
#[cfg(target_os = "linux")]
mod slot;
#[cfg(target_os = "linux")]
mod storage;
#[cfg(target_os = "linux")]
mod store;

#[cfg(target_os = "linux")]
pub use context::{
    append, append_truncated, attached_attr_count, detach, is_attached, swap, truncate_attrs,
    update, AttachGuard, Attached, ForeignRecord, ThreadContext,
};
#[cfg(target_os = "linux")]
pub use error::ContextError;
#[cfg(feature = "std")]
pub use future::{ThreadContextExt, WithThreadContext};
pub use key::Key;
pub use key_map::{KeyMap, KeyMapFull};
#[cfg(all(feature = "std", target_os = "linux"))]
pub use registry::{register, register_all, registered_keys, RegistryError};
/// Why an attribute key could not be registered. Outside Linux there is no registry (no
/// [`register`]): code that registers keys only on Linux, and does nothing elsewhere (the
/// integrations), names this error everywhere, and outside Linux it cannot occur.
#[cfg(all(feature = "std", not(target_os = "linux")))]
pub type RegistryError = core::convert::Infallible;
#[cfg(target_os = "linux")]
pub use slot::{attached_record_address, tls_slot_address};
#[cfg(target_os = "linux")]
pub use storage::{RecordPool, RecordStorage};

/// The name of the TLS symbol: `otel_thread_ctx_v1`.
pub use otel_ctx_codec::threadlocal::TLS_SYMBOL;
