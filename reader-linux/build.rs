//! Two jobs:
//!
//! 1. Exports `otel_thread_ctx_v1` from the examples, which publish thread contexts with
//!    the writer (a dev-dependency) for the tests to read: a reader finds the TLS slot
//!    through the executable's `.dynsym`, where linkers put no symbol of an executable
//!    unless asked to. Only the examples: the in-process self-check expects the test
//!    binary's symbol in `.symtab` alone, as a binary that forgot the export has it. The
//!    library itself defines no such symbol.
//! 2. With the `ebpf` feature, compiles the BPF sampler `ebpf/sampler.bpf.c` with clang
//!    (`-target bpf`) into `OUT_DIR/sampler.bpf.o`, which `src/ebpf` includes. The
//!    compiler is `$OTEL_CTX_BPF_CLANG`, else the first of `clang`, `clang-19`, `clang-22`,
//!    `clang-16`, `clang-14` found; the helper headers come from libbpf-dev.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_EBPF").is_some() {
        compile_bpf();
    }
}

fn compile_bpf() {
    let source = "ebpf/sampler.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=OTEL_CTX_BPF_CLANG");
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "OTEL_CTX_ARCH_X86_64",
        Ok("aarch64") => "OTEL_CTX_ARCH_AARCH64",
        Ok(other) => panic!(
            "the ebpf feature supports x86_64 and aarch64 (the thread pointer's place in the \
             kernel's task_struct), not {other}"
        ),
        Err(e) => panic!("CARGO_CFG_TARGET_ARCH: {e}"),
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("sampler.bpf.o");
    let candidates: Vec<String> = match std::env::var("OTEL_CTX_BPF_CLANG") {
        Ok(clang) => vec![clang],
        Err(_) => ["clang", "clang-19", "clang-22", "clang-16", "clang-14"]
            .map(String::from)
            .to_vec(),
    };
    let mut tried = Vec::new();
    for clang in &candidates {
        let run = Command::new(clang)
            .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            .arg(format!("-D{arch}"))
            .args(["-c", source, "-o"])
            .arg(&out)
            .output();
        match run {
            Ok(output) if output.status.success() => return,
            Ok(output) => panic!(
                "{clang} failed to compile {source} for the ebpf feature:\n{}\n(the BPF helper \
                 headers come from libbpf-dev: apt-get install libbpf-dev)",
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(e) => tried.push(format!("{clang}: {e}")),
        }
    }
    panic!(
        "the ebpf feature compiles {source} with clang, and none was found ({}). Install \
         clang and the BPF helper headers (Debian: apt-get install clang-19 libbpf-dev), \
         set OTEL_CTX_BPF_CLANG to a clang, or build without the ebpf feature",
        tried.join("; ")
    );
}
