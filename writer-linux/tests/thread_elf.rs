//! Linked binaries export `otel_thread_ctx_v1` the way readers expect: builds the sample
//! executable and `cdylib` of `tests/fixtures/` (whose `build.rs` calls
//! `otel_ctx_export::export_tls_symbol`) for the target this test was built for, and
//! inspects them.

#[path = "fixtures/build_fixture.rs"]
mod build_fixture;

use std::path::Path;
use std::process::Command;

use object::elf;
use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget};

const SYMBOL: &str = "otel_thread_ctx_v1";

/// How a linked module reaches the slot, from its dynamic relocations against the symbol.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    /// No dynamic relocation: local-exec (executables only).
    LocalExec,
    /// A TPOFF64 / TLS_TPREL64 relocation: initial-exec.
    InitialExec,
    /// A TLSDESC relocation.
    Tlsdesc,
}

/// Checks the `.dynsym` entry and returns how the module accesses the symbol.
fn inspect(path: &Path) -> Access {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*data).expect("ELF parses");
    let symbol = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(SYMBOL))
        .unwrap_or_else(|| panic!("{SYMBOL} is not in the .dynsym of {}", path.display()));
    let object::SymbolFlags::Elf { st_info, .. } = symbol.flags() else {
        panic!("not an ELF symbol");
    };
    assert_eq!(st_info & 0xf, elf::STT_TLS, "{SYMBOL} is STT_TLS");
    assert_eq!(st_info >> 4, elf::STB_GLOBAL, "{SYMBOL} is GLOBAL");
    assert_eq!(symbol.size(), 8, "{SYMBOL} is 8 bytes");
    let section = file
        .section_by_index(symbol.section_index().expect("defined here"))
        .expect("section exists");
    assert_eq!(section.name(), Ok(".tbss"), "{SYMBOL} is in .tbss");
    assert_eq!(
        symbol.address() % 8,
        0,
        "{SYMBOL} is 8-aligned in the TLS block"
    );

    let (tlsdesc, tpoff, legacy) = match file.architecture() {
        object::Architecture::X86_64 => (
            elf::R_X86_64_TLSDESC,
            elf::R_X86_64_TPOFF64,
            [elf::R_X86_64_DTPMOD64, elf::R_X86_64_DTPOFF64],
        ),
        object::Architecture::Aarch64 => (
            elf::R_AARCH64_TLSDESC,
            elf::R_AARCH64_TLS_TPREL,
            [elf::R_AARCH64_TLS_DTPMOD, elf::R_AARCH64_TLS_DTPREL],
        ),
        other => panic!("unexpected architecture {other:?}"),
    };
    let mut kinds = Vec::new();
    for (_, relocation) in file.dynamic_relocations().into_iter().flatten() {
        let RelocationTarget::Symbol(index) = relocation.target() else {
            continue;
        };
        if index != symbol.index() {
            continue;
        }
        let RelocationFlags::Elf { r_type } = relocation.flags() else {
            panic!("not an ELF relocation");
        };
        assert!(
            !legacy.contains(&r_type),
            "legacy general-dynamic relocation {r_type:?} against {SYMBOL}"
        );
        kinds.push(r_type);
    }
    match kinds.as_slice() {
        [] => Access::LocalExec,
        [k] if *k == tpoff => Access::InitialExec,
        [k] if *k == tlsdesc => Access::Tlsdesc,
        other => panic!("unexpected relocations against {SYMBOL}: {other:?}"),
    }
}

/// Whether the binary was linked by lld (its `.comment` says so).
fn linked_by_lld(path: &Path) -> bool {
    let data = std::fs::read(path).expect("readable");
    let file = object::File::parse(&*data).expect("ELF parses");
    file.section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .is_some_and(|d| d.windows(4).any(|w| w == b"LLD "))
}

/// Runs the sample executable (through qemu-user on aarch64) and checks its own checks
/// passed.
fn run(path: &Path) {
    let mut command = if cfg!(target_arch = "aarch64") {
        let mut c = Command::new("qemu-aarch64");
        c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(path);
        c
    } else {
        Command::new(path)
    };
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    assert!(
        output.status.success(),
        "{} failed ({}): {}",
        path.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "thread-exe ok\n");
}

#[test]
fn executable_exports_the_slot() {
    let target = build_fixture::own_target();
    build_fixture::cargo("thread-exe", "build", target, &[]);
    let exe = build_fixture::artefact(target, "thread-exe");
    let access = inspect(&exe);
    let static_pie = target.ends_with("musl");
    println!(
        "{target}: thread-exe linked by {}, access {access:?}",
        if linked_by_lld(&exe) { "lld" } else { "GNU ld" }
    );
    if static_pie {
        // No dynamic loader applies a TPOFF64 relocation in a static executable: the access
        // must be local-exec (the helper links it with rust-lld for that).
        assert_eq!(access, Access::LocalExec);
    }
    run(&exe);

    if target == "x86_64-unknown-linux-gnu" {
        // The same program linked with GNU ld instead of rustc's default lld.
        let gnu = build_fixture::artefact(target, "thread-exe-gnu-ld");
        assert!(
            !linked_by_lld(&gnu),
            "the second binary is linked by GNU ld"
        );
        assert!(linked_by_lld(&exe), "the default linker here is lld");
        let gnu_access = inspect(&gnu);
        println!("{target}: thread-exe-gnu-ld linked by GNU ld, access {gnu_access:?}");
        assert_ne!(
            gnu_access,
            Access::Tlsdesc,
            "an executable's access is relaxed"
        );
        run(&gnu);
    }
}

/// Not on musl: its targets link statically by default and build no `cdylib`.
#[cfg(not(target_env = "musl"))]
#[test]
fn cdylib_exports_the_slot_with_a_tlsdesc_relocation() {
    let target = build_fixture::own_target();
    build_fixture::cargo("thread-cdylib", "build", target, &[]);
    let library = build_fixture::artefact(target, "libthread_cdylib.so");
    assert_eq!(inspect(&library), Access::Tlsdesc);
}
