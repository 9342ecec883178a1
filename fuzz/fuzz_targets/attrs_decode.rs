//! Fuzz target `attrs_decode`: see [`otel_ctx_fuzz::attrs`] for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otel_ctx_fuzz::attrs::check(data));
