//! Two jobs:
//!
//! 1. Exports `otel_thread_ctx_v1` from the examples, which publish thread contexts with
//!    the writer (a dev-dependency) for the tests to read: a reader finds the TLS slot
//!    through the executable's `.dynsym`, where linkers put no symbol of an executable
//!    unless asked to. Only the examples: the in-process self-check expects the test
//!    binary's symbol in `.symtab` alone, as a binary that forgot the export has it. The
//!    library itself defines no such symbol.
//! 2. With the `ebpf` feature, provides the BPF objects `src/ebpf` includes: the
//!    sampler's (`OUT_DIR/sampler.bpf.o`) and the publication hook's
//!    (`OUT_DIR/publications.bpf.o`). Each is the one checked in beside its source
//!    (`bpf/sampler.<arch>.bpf.o`, `bpf/publications.bpf.o`, built by
//!    `scripts/build-bpf.sh` with clang 19; CI fails when a fresh build differs), so that
//!    no C compiler is needed to build the sampler; or, when `$OTEL_CTX_BPF_CLANG` names a
//!    clang, compiled from `bpf/<name>.bpf.c` with it (the helper headers come from
//!    libbpf-dev).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    // A packaged crate carries no examples.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::path::Path::new("examples").is_dir()
    {
        println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    }
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_EBPF").is_some() {
        compile_bpf();
    }
}

fn compile_bpf() {
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64",
        Ok("aarch64") => "aarch64",
        Ok(other) => panic!(
            "the ebpf feature supports x86_64 and aarch64 (the thread pointer's place in the \
             kernel's task_struct), not {other}"
        ),
        Err(e) => panic!("CARGO_CFG_TARGET_ARCH: {e}"),
    };
    println!("cargo:rerun-if-env-changed=OTEL_CTX_BPF_CLANG");
    println!("cargo:rerun-if-changed=bpf/types.h");
    // The sampler reads the kernel's task structure: one object per architecture.
    let define = format!("-DOTEL_CTX_ARCH_{}", arch.to_uppercase());
    provide(
        "sampler",
        &format!("bpf/sampler.{arch}.bpf.o"),
        &["-target", "bpf", &define],
    );
    // The publication hook reads a tracepoint's record only: one little-endian object.
    provide(
        "publications",
        "bpf/publications.bpf.o",
        &["-target", "bpfel"],
    );
}

/// Puts `OUT_DIR/<name>.bpf.o` in place: the checked-in object, or `bpf/<name>.bpf.c`
/// compiled by `$OTEL_CTX_BPF_CLANG` with `flags`.
fn provide(name: &str, checked_in: &str, flags: &[&str]) {
    let source = format!("bpf/{name}.bpf.c");
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed={checked_in}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join(format!("{name}.bpf.o"));
    let Ok(clang) = std::env::var("OTEL_CTX_BPF_CLANG") else {
        std::fs::copy(checked_in, &out)
            .unwrap_or_else(|e| panic!("copy the BPF object {checked_in}: {e}"));
        return;
    };
    let here = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let run = Command::new(&clang)
        .args(flags)
        .args(["-O2", "-g", "-Wall", "-Werror"])
        // The object names no path of this checkout: builds anywhere give the same bytes.
        .arg(format!("-ffile-prefix-map={here}=."))
        .args(["-c", &source, "-o"])
        .arg(&out)
        .output();
    match run {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "{clang} failed to compile {source} for the ebpf feature:\n{}\n(the BPF helper \
             headers come from libbpf-dev: apt-get install libbpf-dev)",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => panic!("OTEL_CTX_BPF_CLANG={clang}: {e}"),
    }
}
