//! Publishing side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947) on Linux, on raw syscalls through `rustix` (no libc).
//!
//! ```no_run
//! use otel_ctx_writer::process::{Attributes, Publisher, Resource};
//! use otel_ctx_writer::thread::{self, ThreadContext};
//!
//! let resource = Resource::builder().service_name("checkout").build()?;
//! let _publisher = Publisher::publish(resource, Attributes::new())?; // readers find it now
//! let route = thread::register("http.route")?; // published in the process context's key map
//! let context = ThreadContext::new([1; 16], [2; 8], 0x01, &[(route, "/cart")])?;
//! let _attached = context.attach_scoped(); // a profiler stopping this thread sees the span
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
