//! Fuzz target `header_validate`: see [`otel_ctx_fuzz::header`] for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otel_ctx_fuzz::header::check(data));
