//! The shared library exports `otel_thread_ctx_v1` the way readers expect: in `.dynsym`,
//! `STT_TLS`, GLOBAL, 8 bytes, reached through a TLSDESC relocation against it; and the
//! functions of both headers are exported.

mod support;

use object::elf;
use object::{Object, ObjectSymbol, RelocationFlags, RelocationTarget};
use support::built;

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
    assert_eq!(st_info.st_type(), elf::STT_TLS, "{SYMBOL} is STT_TLS");
    assert_eq!(st_info.st_bind(), elf::STB_GLOBAL, "{SYMBOL} is GLOBAL");
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
