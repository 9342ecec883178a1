//! Runs every vector of `spec-vectors/` through the codec and compares the result with
//! the vector's `expected` value (or one of the values an `either` allows) or `error`
//! kind. Every mismatch is reported, each naming its vector, before the test fails.

use otel_ctx_conformance::vectors::{check, header, payload, record};
use otel_ctx_conformance::{Outcome, Vector};

/// Runs `run_and_check` on every vector of `file`; fails with every mismatch at once.
fn run_all<E>(
    file: &str,
    vectors: &[Vector<E>],
    minimum: usize,
    run_and_check: impl Fn(&Vector<E>) -> Result<(), String>,
) {
    assert!(
        vectors.len() >= minimum,
        "{file} has {} vectors, fewer than {minimum}",
        vectors.len()
    );
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| run_and_check(v).err())
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
    run_all(header::FILE, &vectors, 12, |v| check(v, header::run(v)));
}

#[test]
fn payload_vectors() {
    let vectors = payload::load().unwrap_or_else(|e| panic!("{e}"));
    run_all(payload::FILE, &vectors, 20, |v| check(v, payload::run(v)));
}

#[test]
fn record_vectors() {
    let vectors = record::load().unwrap_or_else(|e| panic!("{e}"));
    run_all(record::FILE, &vectors, 20, |v| {
        record::check(v, record::run(v))
    });
}

#[test]
fn record_vectors_require_only_what_the_spec_requires() {
    let vectors = record::load().unwrap_or_else(|e| panic!("{e}"));
    let named = |name: &str| {
        vectors
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("no record vector {name}"))
    };
    // 640 bytes is a recommendation to writers: no reader refuses a record for its size.
    for v in &vectors {
        assert_ne!(
            v.outcome,
            Outcome::Error("record_too_large".into()),
            "{}",
            v.name
        );
    }
    // Where OTEP 4947 leaves the reader a choice, the vector offers each.
    for name in [
        "record_641_bytes_over_bound",
        "record_65_bytes_over_custom_bound",
        "value_not_utf8",
    ] {
        assert!(
            matches!(
                &named(name).outcome,
                Outcome::Expected(record::RecordOutcome::Either(e)) if e.either.len() == 2
            ),
            "{name}"
        );
    }
    // A record that breaks the writer's rule on ids is still read as it is.
    for name in ["trace_id_without_span_id", "span_id_without_trace_id"] {
        assert!(
            matches!(
                &named(name).outcome,
                Outcome::Expected(record::RecordOutcome::One(_))
            ),
            "{name}"
        );
    }
}

#[test]
fn payload_vectors_cover_every_known_schema() {
    let vectors = payload::load().unwrap_or_else(|e| panic!("{e}"));
    for name in [
        "threadlocal_tls_v1",
        "threadlocal_go_schema_without_key_map",
    ] {
        assert!(
            vectors.iter().any(|v| v.name == name),
            "no payload vector {name}"
        );
    }
}
