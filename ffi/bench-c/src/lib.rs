//! The C ABI's cost measured from C (`benches/c_calls.rs`): `c/calls.c`, compiled by
//! `build.rs`, calls the exported `otel_thread_ctx_*` functions of `otel-ctx-ffi`, beside the
//! same functions called from Rust and the writer's Rust API. A package of its own so
//! that the C ABI builds without a C compiler.
