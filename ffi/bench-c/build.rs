//! Compiles `c/calls.c` into an archive linked into the benchmark only, so that
//! `benches/c_calls.rs` measures calls made from C (GNU/Linux targets).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    println!("cargo:rerun-if-changed=c/calls.c");
    println!("cargo:rerun-if-changed=../include/otel_ctx.h");
    cc::Build::new()
        .file("c/calls.c")
        .include("../include")
        .opt_level(2)
        .warnings_into_errors(true)
        // No `cargo:rustc-link-lib`: that would link the archive into the library.
        .cargo_metadata(false)
        .compile("otel_ctx_bench_calls");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!(
        "cargo:rustc-link-arg-benches={}",
        out.join("libotel_ctx_bench_calls.a").display()
    );
}
