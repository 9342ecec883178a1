//! The shared library exports `otel_thread_ctx_v1` the way readers expect: in `.dynsym`,
//! `STT_TLS`, GLOBAL, 8 bytes, reached through a TLSDESC relocation against it; and the
//! functions of both headers are exported. C executables linked with the static library
//! (glibc with gcc; musl with `musl-gcc`, static-PIE and `-static`) define the slot
//! themselves: where it lands and which relocations reach it.

mod support;

use object::elf;
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
use object::{Object, ObjectSymbol, RelocationFlags, RelocationTarget};
use support::{built, compile, Link};

const SYMBOL: &str = "otel_thread_ctx_v1";

#[test]
fn shared_library_exports_the_slot_with_a_tlsdesc_relocation() {
    let data = std::fs::read(&built().shared).expect("read the shared library");
    let file = object::File::parse(&*data).expect("ELF parses");
    let symbol = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(SYMBOL))
        .unwrap_or_else(|| panic!("{SYMBOL} is not in .dynsym"));
    let object::SymbolFlags::Elf { st_info, .. } = symbol.flags() else {
        panic!("not an ELF symbol");
    };
    assert_eq!(st_info & 0xf, elf::STT_TLS, "{SYMBOL} is STT_TLS");
    assert_eq!(st_info >> 4, elf::STB_GLOBAL, "{SYMBOL} is GLOBAL");
    assert_eq!(symbol.size(), 8, "{SYMBOL} is 8 bytes");
    assert!(!symbol.is_undefined(), "{SYMBOL} is defined here");

    let tlsdesc = match file.architecture() {
        object::Architecture::X86_64 => elf::R_X86_64_TLSDESC,
        object::Architecture::Aarch64 => elf::R_AARCH64_TLSDESC,
        other => panic!("unexpected architecture {other:?}"),
    };
    let kinds: Vec<_> = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(_, r)| r.target() == RelocationTarget::Symbol(symbol.index()))
        .map(|(_, r)| match r.flags() {
            RelocationFlags::Elf { r_type } => r_type,
            other => panic!("not an ELF relocation: {other:?}"),
        })
        .collect();
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| *k == tlsdesc),
        "relocations against {SYMBOL}: {kinds:?}, want TLSDESC ({tlsdesc}) only"
    );
}

#[test]
fn shared_library_exports_every_function_of_the_headers() {
    let data = std::fs::read(&built().shared).expect("read the shared library");
    let file = object::File::parse(&*data).expect("ELF parses");
    let headers = ["otel_process_ctx.h", "otel_ctx.h"].map(|h| {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("include")
                .join(h),
        )
        .expect("read the header")
    });
    for name in [
        "otel_process_ctx_publish",
        "otel_process_ctx_drop_current",
        "otel_process_ctx_read",
        "otel_process_ctx_read_drop",
        "otel_thread_ctx_register_key",
        "otel_thread_ctx_new",
        "otel_thread_ctx_attach",
        "otel_thread_ctx_detach",
        "otel_thread_ctx_swap",
        "otel_thread_ctx_update",
        "otel_thread_ctx_append",
        "otel_thread_ctx_append_truncated",
        "otel_thread_ctx_truncate_attrs",
        "otel_thread_ctx_attr_count",
        "otel_thread_ctx_free",
    ] {
        assert!(
            headers.iter().any(|h| h.contains(&format!("{name}("))),
            "{name} is declared"
        );
        let symbol = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} is not exported"));
        assert!(symbol.is_global() && !symbol.is_undefined(), "{name}");
    }
}

/// The slot of `file` in `.dynsym` (`dynamic`) or `.symtab`, checked: `STT_TLS`, GLOBAL,
/// 8 bytes, defined.
fn slot<'f>(file: &'f object::File<'f>, dynamic: bool) -> object::Symbol<'f, 'f> {
    let symbol = if dynamic {
        file.dynamic_symbols().find(|s| s.name() == Ok(SYMBOL))
    } else {
        file.symbols().find(|s| s.name() == Ok(SYMBOL))
    };
    let table = if dynamic { ".dynsym" } else { ".symtab" };
    let symbol = symbol.unwrap_or_else(|| panic!("{SYMBOL} is not in {table}"));
    let object::SymbolFlags::Elf { st_info, .. } = symbol.flags() else {
        panic!("not an ELF symbol");
    };
    assert_eq!(st_info & 0xf, elf::STT_TLS, "{SYMBOL} is STT_TLS");
    assert_eq!(st_info >> 4, elf::STB_GLOBAL, "{SYMBOL} is GLOBAL");
    assert_eq!(symbol.size(), 8, "{SYMBOL} is 8 bytes");
    assert!(!symbol.is_undefined(), "{SYMBOL} is defined here");
    symbol
}

/// The ELF type of the file header, and the dynamic relocation types: all of them, and
/// those against the slot's `.dynsym` index (`slot_index`).
fn dynamic_relocations(
    file: &object::File<'_>,
    slot_index: Option<object::SymbolIndex>,
) -> (Vec<u32>, Vec<u32>) {
    let mut all = Vec::new();
    let mut against = Vec::new();
    for (_, relocation) in file.dynamic_relocations().into_iter().flatten() {
        let RelocationFlags::Elf { r_type } = relocation.flags() else {
            panic!("not an ELF relocation");
        };
        all.push(r_type);
        if slot_index.is_some_and(|i| relocation.target() == RelocationTarget::Symbol(i)) {
            against.push(r_type);
        }
    }
    (all, against)
}

/// `process_reference.c` linked as `link`, after checking that it is an executable of
/// type `elf_type` (`ET_EXEC`, `ET_DYN`) with no loader (`PT_INTERP`): `what` says why.
fn without_loader(link: Link, elf_type: u16, what: &str) -> Vec<u8> {
    let data = std::fs::read(compile("process_reference", link)).expect("read it");
    assert_eq!(elf_type_and_interpreter(&data), (elf_type, false), "{what}");
    data
}

/// The ELF type of the file header (`ET_EXEC`, `ET_DYN`), and whether the executable
/// asks for a dynamic loader (`PT_INTERP`).
fn elf_type_and_interpreter(data: &[u8]) -> (u16, bool) {
    let file = ElfFile64::<object::Endianness>::parse(data).expect("ELF64");
    let endian = file.endian();
    let interpreter = file
        .elf_program_headers()
        .iter()
        .any(|p| p.p_type(endian) == elf::PT_INTERP);
    (file.elf_header().e_type(endian), interpreter)
}

/// gcc and GNU ld against the glibc archive: the slot in `.dynsym`, reached through
/// initial-exec (a `TPOFF64` relocation against it, which ld.so applies).
#[cfg(target_arch = "x86_64")]
#[test]
fn glibc_executable_with_the_static_library_exports_the_slot() {
    let data = std::fs::read(compile("process_reference", Link::Static)).expect("read it");
    let file = object::File::parse(&*data).expect("ELF parses");
    let index = slot(&file, true).index();
    let (_, against) = dynamic_relocations(&file, Some(index));
    assert!(
        !against.is_empty() && against.iter().all(|r| *r == elf::R_X86_64_TPOFF64),
        "relocations against {SYMBOL}: {against:?}, want TPOFF64 (initial-exec)"
    );
}

/// musl, static-PIE, linked by lld: no loader, the slot in `.dynsym`, no relocation
/// against it (local-exec: the offset is in the code), and only relative relocations,
/// which musl's start code applies itself.
#[cfg(target_arch = "x86_64")]
#[test]
fn musl_static_pie_executable_exports_the_slot_with_local_exec() {
    let data = without_loader(
        Link::MuslStaticPie,
        elf::ET_DYN,
        "a position-independent executable, with no PT_INTERP",
    );
    let file = object::File::parse(&*data).expect("ELF parses");
    let index = slot(&file, true).index();
    let (all, against) = dynamic_relocations(&file, Some(index));
    assert!(
        against.is_empty(),
        "relocations against {SYMBOL}: {against:?}"
    );
    assert!(
        all.iter().all(|r| *r == elf::R_X86_64_RELATIVE),
        "a relocation other than RELATIVE: {:?}",
        all.iter().find(|r| **r != elf::R_X86_64_RELATIVE)
    );
    // The symbol table agrees with the dynamic one.
    assert_eq!(slot(&file, false).address(), slot(&file, true).address());
}

/// `musl-gcc -static` with lld and an empty shared object `--as-needed`: not
/// position-independent, no loader, no `DT_NEEDED`, no relocation at all, and the slot in
/// `.dynsym` (TLS, GLOBAL, size 8) where readers look, at the address `.symtab` gives.
#[cfg(target_arch = "x86_64")]
#[test]
fn musl_gcc_static_executable_with_a_dynsym_exports_the_slot() {
    let data = without_loader(
        Link::MuslStaticDynsym,
        elf::ET_EXEC,
        "not position-independent, with no PT_INTERP",
    );
    let file = object::File::parse(&*data).expect("ELF parses");
    let index = slot(&file, true).index();
    let (all, against) = dynamic_relocations(&file, Some(index));
    assert!(
        all.is_empty() && against.is_empty(),
        "dynamic relocations: {all:?}"
    );
    assert_eq!(slot(&file, false).address(), slot(&file, true).address());
    assert!(
        file.dynamic_symbols().all(|s| !s.is_undefined()),
        "an undefined dynamic symbol, which only a loader could resolve"
    );
    let elf_file = ElfFile64::<object::Endianness>::parse(&*data).expect("ELF64 parses");
    let endian = elf_file.endian();
    let (dynamic, _) = elf_file
        .elf_section_table()
        .dynamic(endian, &*data)
        .expect("dynamic section parses")
        .expect("a dynamic section");
    assert!(
        dynamic
            .iter()
            .all(|d| d.d_tag(endian) != u64::from(elf::DT_NEEDED)),
        "a DT_NEEDED entry: the empty shared object was kept"
    );
}

/// `musl-gcc -static`: an executable that is not position-independent, with no loader, no
/// `.dynsym` and no relocation at all; the slot is only in `.symtab` (local-exec).
#[cfg(target_arch = "x86_64")]
#[test]
fn musl_gcc_static_executable_has_the_slot_in_symtab_only() {
    let data = without_loader(
        Link::MuslStatic,
        elf::ET_EXEC,
        "not position-independent, with no PT_INTERP",
    );
    let file = object::File::parse(&*data).expect("ELF parses");
    assert!(
        file.dynamic_symbols().next().is_none(),
        "no .dynsym in a static non-PIE executable"
    );
    slot(&file, false);
    let (all, _) = dynamic_relocations(&file, None);
    assert!(all.is_empty(), "dynamic relocations: {all:?}");
}
