//! The checks behind the fuzz targets in `fuzz_targets/`, one module per target.
//!
//! Each `check` takes the fuzzer's bytes, runs the code under test on them, and asserts
//! the properties that must hold for every input: no panic, no endless loop, results
//! inside their stated bounds, and agreement with a small model written here, apart
//! from the code it checks. An assertion that fails is a crash the fuzzer reports.

pub mod attrs;
pub mod elf;
pub mod header;
pub mod maps;
pub mod protobuf;
