//! Publishing side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947) on Linux, on raw syscalls through `rustix` (no libc).
#![no_std]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod process;
pub mod thread;
