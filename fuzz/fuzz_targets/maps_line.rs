//! Fuzz target `maps_line`: see [`otel_ctx_fuzz::maps`] for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otel_ctx_fuzz::maps::check(data));
