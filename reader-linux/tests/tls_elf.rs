//! Static analysis of writer binaries for both architectures: the aarch64 ones are
//! cross-compiled here and only inspected.
#![cfg(target_arch = "x86_64")]

use std::path::{Path, PathBuf};
use std::process::Command;

use otel_ctx_reader::thread::tls::{ElfTls, Relocated};
use otel_ctx_reader::thread::tls::{Machine, SymbolTable};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

fn build(cc: &str, out: &Path, args: &[&str]) -> ElfTls {
    let status = Command::new(cc)
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(status.success(), "{cc} {args:?}");
    let bytes = std::fs::read(out).expect("read the binary");
    ElfTls::parse(&*bytes).unwrap_or_else(|e| panic!("{}: {e}", out.display()))
}

fn kinds(elf: &ElfTls) -> Vec<Relocated> {
    elf.relocs.iter().map(|r| r.kind).collect()
}

#[test]
fn every_model_on_both_architectures() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tls-elf");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let main = format!("{FIXTURES}/main.c");
    let writer = format!("{FIXTURES}/writer.c");
    let local_dynamic = format!("{FIXTURES}/local_dynamic.c");
    let extern_user = format!("{FIXTURES}/extern_user.c");
    for (cc, machine, desc, gd) in [
        (
            "gcc",
            Machine::X86_64,
            "-mtls-dialect=gnu2",
            "-mtls-dialect=gnu",
        ),
        (
            "aarch64-linux-gnu-gcc",
            Machine::Aarch64,
            "-mtls-dialect=desc",
            "-mtls-dialect=trad",
        ),
    ] {
        let out = |n: &str| dir.join(format!("{n}-{}", machine.name()));
        let le = build(
            cc,
            &out("le"),
            &[
                "-O1",
                "-pthread",
                "-DWITH_ALIGNED",
                "-rdynamic",
                &main,
                &writer,
            ],
        );
        assert_eq!(le.machine, machine);
        let symbol = le.symbol.expect("the symbol");
        assert_eq!(symbol.table, SymbolTable::Dynsym);
        assert!(symbol.defined && symbol.is_tls());
        assert_eq!((symbol.size, symbol.binding), (8, object::elf::STB_GLOBAL));
        assert!(le.relocs.is_empty(), "{:?}", le.relocs);
        assert_eq!(le.tls_segment.expect("PT_TLS").align, 64);

        let ie = build(
            cc,
            &out("ie-exe"),
            &[
                "-O1",
                "-pthread",
                "-fPIC",
                "-ftls-model=initial-exec",
                "-rdynamic",
                &main,
                &writer,
            ],
        );
        // GNU ld keeps the TPOFF64 entry on x86_64 and relaxes it to local exec on aarch64.
        let expected: &[Relocated] = match machine {
            Machine::X86_64 => &[Relocated::InitialExec],
            Machine::Aarch64 => &[],
        };
        assert_eq!(kinds(&ie), expected, "{machine:?}");

        let lib = build(
            cc,
            &out("libdesc.so"),
            &["-O1", "-shared", "-fPIC", desc, &writer],
        );
        assert_eq!(kinds(&lib), [Relocated::TlsDesc]);
        let lib = build(
            cc,
            &out("libgd.so"),
            &["-O1", "-shared", "-fPIC", gd, &writer],
        );
        assert_eq!(kinds(&lib), [Relocated::GeneralDynamic]);
        let lib = build(
            cc,
            &out("libie.so"),
            &[
                "-O1",
                "-shared",
                "-fPIC",
                "-ftls-model=initial-exec",
                &writer,
            ],
        );
        assert_eq!(kinds(&lib), [Relocated::InitialExec]);

        // A module that only references the variable, through initial exec.
        let user = build(
            cc,
            &out("libuser.so"),
            &[
                "-O1",
                "-shared",
                "-fPIC",
                "-ftls-model=initial-exec",
                &extern_user,
            ],
        );
        assert!(user.symbol.is_some() && !user.defines_symbol());
        assert_eq!(kinds(&user), [Relocated::InitialExec]);

        if machine == Machine::X86_64 {
            let lib = build(
                cc,
                &out("libld.so"),
                &[
                    "-O1",
                    "-shared",
                    "-fPIC",
                    "-ftls-model=local-dynamic",
                    &local_dynamic,
                ],
            );
            assert!(lib.relocs.is_empty() && lib.local_dynamic, "{lib:?}");
        }
    }
}

#[test]
fn malformed_files_are_errors() {
    assert!(ElfTls::parse(&b"#!/bin/sh\n"[..]).is_err());
    assert!(ElfTls::parse(&[0x7f, b'E', b'L', b'F', 2, 1, 1][..]).is_err());
    let mut bytes = std::fs::read("/proc/self/exe").expect("read own executable");
    // Cut the file short: section headers then point past the end.
    bytes.truncate(4096);
    let _ = ElfTls::parse(&*bytes);
}
