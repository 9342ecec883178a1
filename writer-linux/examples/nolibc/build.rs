//! Link arguments of the example (see `nolibc.ld`): the linker script, and an empty shared
//! object linked `--as-needed`, which leaves no trace but makes lld write a `.dynsym` (it
//! writes one for an executable only when a shared object takes part in the link). lld is
//! the Rust toolchain's own, for both architectures.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let target = env::var("TARGET").expect("set by cargo");
    let host = env::var("HOST").expect("set by cargo");
    let rustc = env::var("RUSTC").expect("set by cargo");
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .expect("run rustc --print sysroot");
    let sysroot = String::from_utf8(sysroot.stdout).expect("a UTF-8 path");
    let gcc_ld = PathBuf::from(sysroot.trim())
        .join("lib/rustlib")
        .join(&host)
        .join("bin/gcc-ld");
    let cc = match target.as_str() {
        "x86_64-unknown-linux-gnu" => "cc",
        "aarch64-unknown-linux-gnu" => "aarch64-linux-gnu-gcc",
        other => panic!("the nolibc example builds for x86_64 and aarch64 Linux, not {other}"),
    };
    let nothing = out.join("libotel_ctx_nothing.so");
    let status = Command::new(cc)
        .arg(format!("-B{}", gcc_ld.display()))
        .args(["-fuse-ld=lld", "-shared", "-nostdlib", "-o"])
        .arg(&nothing)
        .args(["-x", "assembler", "/dev/null"])
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        status.success(),
        "{cc} could not link an empty shared object"
    );

    let script = manifest.join("nolibc.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg=-B{}", gcc_ld.display());
    println!("cargo:rustc-link-arg=-fuse-ld=lld");
    println!("cargo:rustc-link-arg=-Wl,-T,{}", script.display());
    println!("cargo:rustc-link-arg=-Wl,--no-dynamic-linker");
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    println!(
        "cargo:rustc-link-arg=-Wl,-Bdynamic,--as-needed,{},-Bstatic",
        nothing.display()
    );
}
