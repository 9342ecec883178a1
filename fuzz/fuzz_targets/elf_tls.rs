//! Fuzz target `elf_tls`: see [`otel_ctx_fuzz::elf`] for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otel_ctx_fuzz::elf::check(data));
