//! Shared helpers of the conformance tests: loading the language-neutral vectors of
//! `spec-vectors/` and turning what the codec decodes into the same JSON shapes, so that
//! a test compares like with like and names the vector that disagrees.
//!
//! - [`vectors`]: the common envelope of a vector (name, description, spec, hex, inputs,
//!   `expected` or `error`) and the loader.
//! - [`header`], [`payload`], [`record`]: the `expected` shape of each file and the
//!   function that runs one vector through the codec.
//! - [`text_format`]: enough of protobuf text format to read what `protoc --decode`
//!   prints, for the cross-check against protoc.
//! - [`hex`]: the lowercase hex used by the vectors.
#![warn(missing_docs)]

pub mod header;
pub mod hex;
pub mod payload;
pub mod record;
pub mod text_format;
pub mod vectors;

pub use vectors::{check, spec_vectors_dir, Inputs, LoadError, Outcome, Vector};
