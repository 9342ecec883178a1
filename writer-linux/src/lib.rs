//! Publishing side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947) on Linux, on raw syscalls through `rustix` (no libc).
//!
//! Features: `std` (the default) implies `alloc`. Without `alloc` nothing allocates:
//! `process::BufferPublisher` publishes from the caller's buffers, thread contexts live in
//! the caller's `thread::RecordStorage` (for example from a `thread::RecordPool`), and
//! `thread::KeyMap` holds the attribute names; the heap APIs of `alloc` are built on the
//! same cores.
//!
//! Outside Linux only `thread::Key` and the future wrappers of `thread` are built, and the
//! wrappers do nothing: portable code that uses them compiles everywhere.
#![no_std]
#![warn(missing_docs)]
// The module documentation names the heap APIs too, which a build without `alloc` lacks.
#![cfg_attr(not(feature = "alloc"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(target_os = "linux")]
pub mod process;
pub mod thread;
