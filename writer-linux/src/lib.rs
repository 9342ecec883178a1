//! Publishing side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947) on Linux, on raw syscalls through `rustix` (no libc).
//!
//! Outside Linux only `thread::Key` and the future wrappers of `thread` are built, and the
//! wrappers do nothing: portable code that uses them compiles everywhere.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(target_os = "linux")]
pub mod process;
pub mod thread;
