//! Shared helpers of the conformance tests: loading `spec-vectors/`.
