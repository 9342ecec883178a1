//! Fuzz target `protobuf_decode`: see [`otel_ctx_fuzz::protobuf`] for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otel_ctx_fuzz::protobuf::check(data));
