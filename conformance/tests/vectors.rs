//! Runs every vector of `spec-vectors/` through the codec and compares the result with
//! the vector's `expected` value or `error` kind. Every mismatch is reported, each naming
//! its vector, before the test fails.

use otel_ctx_conformance::{check, header, payload, record, Vector};
use serde::Serialize;

fn run_all<E: PartialEq + Serialize>(
    file: &str,
    vectors: &[Vector<E>],
    minimum: usize,
    run: impl Fn(&Vector<E>) -> Result<E, &'static str>,
) {
    assert!(
        vectors.len() >= minimum,
        "{file} has {} vectors, fewer than {minimum}",
        vectors.len()
    );
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| check(v, run(v)).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} vectors in {file} failed:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

#[test]
fn header_vectors() {
    let vectors = header::load().unwrap_or_else(|e| panic!("{e}"));
    run_all(header::FILE, &vectors, 12, header::run);
}

#[test]
fn payload_vectors() {
    let vectors = payload::load().unwrap_or_else(|e| panic!("{e}"));
    run_all(payload::FILE, &vectors, 20, payload::run);
}

#[test]
fn record_vectors() {
    let vectors = record::load().unwrap_or_else(|e| panic!("{e}"));
    run_all(record::FILE, &vectors, 20, record::run);
}
