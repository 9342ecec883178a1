//! Conformance for OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947) publishers, in any language.
//!
//! The checker ([`check()`], Linux only) judges a live process against every rule of
//! both specifications ([`RuleId`]), PASS / WARN / FAIL with the rule's reference, as
//! `otel-ctx check` prints it (rules and exit statuses in `CHECK.md`):
//!
//! ```no_run
//! use otel_ctx_conformance::{check, CheckOptions, Status};
//!
//! let report = check(1234, &CheckOptions::default())?;
//! for result in &report.results {
//!     println!("{} {} {}", result.status, result.rule, result.observed);
//! }
//! assert_eq!(report.count(Status::Fail), 0);
//! # Ok::<(), otel_ctx_reader::Error>(())
//! ```
//!
//! The runner of the language-neutral vectors of `spec-vectors/` turns what the codec
//! decodes into the vectors' JSON shapes, so that a test compares like with like and
//! names the vector that disagrees:
//!
//! - [`vectors`]: the common envelope of a vector (name, description, spec, hex, inputs,
//!   `expected` or `error`) and the loader; [`vectors::header`], [`vectors::payload`] and
//!   [`vectors::record`], one per file: its `expected` shape and the function that runs
//!   one vector through the codec.
//! - [`text_format`]: enough of protobuf text format to read what `protoc --decode`
//!   prints, for the cross-check against protoc.
//! - [`hex`]: the lowercase hex used by the vectors.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
mod check;
pub mod hex;
pub mod text_format;
pub mod vectors;

#[cfg(target_os = "linux")]
pub use check::{
    check, check_command, wait_for_context, CheckOptions, Document, Level, ProgramError, Report,
    RuleId, RuleResult, Stage, Status, StopReason, Stopped, DEFAULT_THREAD_ROUNDS, MAX_WINDOW,
    STDIN_GRACE, TERM_GRACE,
};
pub use vectors::{spec_vectors_dir, Inputs, LoadError, Outcome, Vector};
