//! The slot access compiles to the canonical TLSDESC sequence, with the relocations a
//! linker needs to keep or relax it: checked in the object file of a sample crate, before
//! any linking, for x86_64 and (cross-compiled) aarch64. And the writer's stores are
//! ordered by the language's rules: checked in the LLVM IR of the writer crate.

#[path = "fixtures/build_fixture.rs"]
mod build_fixture;

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget};

const FUNCTION: &str = "fixture_slot_address";
const SYMBOL: &str = "otel_thread_ctx_v1";

/// Compiles the `thread-obj` fixture to an object file for `target` and returns its bytes.
fn object_file(target: &str) -> Vec<u8> {
    build_fixture::cargo(
        "thread-obj",
        "rustc",
        target,
        &["--lib", "--", "--emit=obj", "-C", "codegen-units=1"],
    );
    let deps = build_fixture::target_dir()
        .join(target)
        .join("debug")
        .join("deps");
    let newest: PathBuf = std::fs::read_dir(&deps)
        .unwrap_or_else(|e| panic!("{}: {e}", deps.display()))
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("thread_obj-") && name.ends_with(".o")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .unwrap_or_else(|| panic!("no thread_obj-*.o in {}", deps.display()));
    std::fs::read(&newest).unwrap_or_else(|e| panic!("{}: {e}", newest.display()))
}

/// The function's bytes and its relocations as `(offset in function, r_type, symbol)`.
fn function_with_relocations(data: &[u8]) -> (Vec<u8>, Vec<(u64, u32, String)>) {
    let file = object::File::parse(data).expect("object file parses");
    let function = file
        .symbols()
        .find(|s| s.name() == Ok(FUNCTION))
        .unwrap_or_else(|| panic!("{FUNCTION} not in the object file"));
    let section = file
        .section_by_index(function.section_index().expect("defined in a section"))
        .expect("section exists");
    let start = function.address() - section.address();
    let size = function.size();
    let bytes =
        section.data().expect("section data")[start as usize..(start + size) as usize].to_vec();
    let relocations = section
        .relocations()
        .filter(|(offset, _)| (start..start + size).contains(offset))
        .map(|(offset, relocation)| {
            let RelocationFlags::Elf { r_type } = relocation.flags() else {
                panic!("not an ELF relocation");
            };
            let name = match relocation.target() {
                RelocationTarget::Symbol(index) => file
                    .symbol_by_index(index)
                    .ok()
                    .and_then(|s| s.name().ok().map(str::to_owned))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            (offset - start, r_type, name)
        })
        .collect();
    (bytes, relocations)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn x86_64_sequence_is_canonical() {
    let (bytes, relocations) = function_with_relocations(&object_file("x86_64-unknown-linux-gnu"));
    // lea 0(%rip),%rax ; call *(%rax) ; add %fs:0,%rax — displacement still zero (RELA).
    let canonical: [u8; 18] = [
        0x48, 0x8d, 0x05, 0, 0, 0, 0, // leaq otel_thread_ctx_v1@TLSDESC(%rip), %rax
        0xff, 0x10, // call *otel_thread_ctx_v1@TLSCALL(%rax)
        0x64, 0x48, 0x03, 0x04, 0x25, 0, 0, 0, 0, // addq %fs:0, %rax
    ];
    let at = find(&bytes, &canonical)
        .unwrap_or_else(|| panic!("canonical TLSDESC sequence not in {bytes:02x?}"))
        as u64;
    let tls: Vec<_> = relocations
        .iter()
        .filter(|(_, _, name)| name == SYMBOL)
        .map(|(offset, r_type, _)| (*offset, *r_type))
        .collect();
    assert_eq!(
        tls,
        vec![
            (at + 3, object::elf::R_X86_64_GOTPC32_TLSDESC),
            (at + 7, object::elf::R_X86_64_TLSDESC_CALL),
        ],
        "relocations at the access site: {relocations:?}"
    );
}

#[test]
fn aarch64_sequence_is_canonical() {
    let (bytes, relocations) = function_with_relocations(&object_file("aarch64-unknown-linux-gnu"));
    let words: [u32; 6] = [
        0x9000_0000, // adrp x0, :tlsdesc:otel_thread_ctx_v1
        0xf940_0001, // ldr x1, [x0, #:tlsdesc_lo12:otel_thread_ctx_v1]
        0x9100_0000, // add x0, x0, #:tlsdesc_lo12:otel_thread_ctx_v1
        0xd63f_0020, // blr x1 (.tlsdesccall otel_thread_ctx_v1)
        0xd53b_d041, // mrs x1, tpidr_el0
        0x8b00_0020, // add x0, x1, x0
    ];
    let canonical: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let at = find(&bytes, &canonical)
        .unwrap_or_else(|| panic!("canonical TLSDESC sequence not in {bytes:02x?}"))
        as u64;
    let tls: Vec<_> = relocations
        .iter()
        .filter(|(_, _, name)| name == SYMBOL)
        .map(|(offset, r_type, _)| (*offset, *r_type))
        .collect();
    assert_eq!(
        tls,
        vec![
            (at, object::elf::R_AARCH64_TLSDESC_ADR_PAGE21),
            (at + 4, object::elf::R_AARCH64_TLSDESC_LD64_LO12),
            (at + 8, object::elf::R_AARCH64_TLSDESC_ADD_LO12),
            (at + 12, object::elf::R_AARCH64_TLSDESC_CALL),
        ],
        "relocations at the access site: {relocations:?}"
    );
}

/// The LLVM IR of the writer crate, optimised as in a release build, for `target`.
fn writer_ir(target: &str) -> String {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("writer-ir");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let output = Command::new(cargo)
        .args([
            "rustc",
            "-p",
            "otel-ctx-writer",
            "--lib",
            "--release",
            "--target",
            target,
        ])
        .args(["--", "--emit=llvm-ir", "-C", "codegen-units=1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
    assert!(
        output.status.success(),
        "cargo rustc --emit=llvm-ir failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let deps = target_dir.join(target).join("release").join("deps");
    let newest: PathBuf = std::fs::read_dir(&deps)
        .unwrap_or_else(|e| panic!("{}: {e}", deps.display()))
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("otel_ctx_writer-") && name.ends_with(".ll")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .unwrap_or_else(|| panic!("no otel_ctx_writer-*.ll in {}", deps.display()));
    std::fs::read_to_string(&newest).unwrap_or_else(|e| panic!("{}: {e}", newest.display()))
}

/// The `define` line and the body of the one function whose symbol contains every one of
/// `parts`.
fn ir_function<'a>(ir: &'a str, parts: &[&str]) -> (&'a str, Vec<&'a str>) {
    let mut found = Vec::new();
    let mut lines = ir.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("define ")
            .and_then(|l| l.split('@').nth(1))
        else {
            continue;
        };
        let name = name.split('(').next().unwrap_or_default();
        if parts.iter().all(|part| name.contains(part)) {
            found.push((
                name,
                line,
                lines.by_ref().take_while(|l| *l != "}").collect::<Vec<_>>(),
            ));
        }
    }
    match found.len() {
        1 => found
            .pop()
            .map(|(_, define, body)| (define, body))
            .unwrap_or_default(),
        n => panic!(
            "{n} functions match {parts:?}: {:?}",
            found.iter().map(|(name, _, _)| name).collect::<Vec<_>>()
        ),
    }
}

/// A reader of thread context runs while the thread is stopped, like a signal handler:
/// what orders the writer's stores for it is `compiler_fence(SeqCst)` (C++'s
/// `atomic_signal_fence(seq_cst)`), with the stores it orders atomic, volatile, or one
/// store instruction in an `asm!` block that may touch any memory (which the compiler can
/// neither drop nor move across another access). A release fence would not do: it orders
/// nothing before a later store that is none of these.
#[test]
fn writer_stores_are_ordered_by_seqcst_signal_fences() {
    let ir = writer_ir("x86_64-unknown-linux-gnu");
    let signal_fences: Vec<&str> = ir
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("fence syncscope(\"singlethread\")"))
        .collect();
    assert!(!signal_fences.is_empty(), "no compiler fence in the writer");
    for fence in &signal_fences {
        assert!(
            fence.starts_with("fence syncscope(\"singlethread\") seq_cst"),
            "a compiler fence that is not SeqCst: {fence}"
        );
    }

    // The in-place update: `valid = 0`, fence, the fields, fence, `valid = 1`. Every store
    // between the two fences writes the record the reader may be reading.
    let (define, update) = ir_function(&ir, &["ThreadContext", "6update"]);
    let fences: Vec<usize> = update
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim().starts_with("fence "))
        .map(|(i, _)| i)
        .collect();
    let (Some(&first), Some(&last)) = (fences.first(), fences.last()) else {
        panic!("no fence in ThreadContext::update:\n{}", update.join("\n"));
    };
    assert!(first < last, "one fence only in ThreadContext::update");
    // Stack temporaries are not the record: a volatile store of a byte array goes through
    // one. Nor is the function's return place (its `sret` parameter, where an error
    // result is written), or a pointer into it.
    let mut not_record: Vec<&str> = update
        .iter()
        .filter_map(|l| l.trim().split_once(" = alloca "))
        .map(|(name, _)| name)
        .collect();
    if let Some(sret) = define
        .split(", ")
        .find(|param| param.contains(" sret("))
        .and_then(|param| param.split(' ').next_back())
    {
        not_record.push(sret);
    }
    for line in &update {
        let Some((name, gep)) = line.trim().split_once(" = getelementptr ") else {
            continue;
        };
        let base = gep
            .split(", ptr ")
            .nth(1)
            .and_then(|rest| rest.split([',', ' ']).next());
        if base.is_some_and(|base| not_record.contains(&base)) {
            not_record.push(name);
        }
    }
    let mut stores = 0;
    for line in &update[first..last] {
        let line = line.trim();
        // The destination: a store's second operand, a memcpy's or memset's first.
        let destination = if line.starts_with("store ") {
            line.split(", ptr ")
                .nth(1)
                .and_then(|rest| rest.split([',', ' ']).next())
        } else {
            line.split_once('(')
                .and_then(|(_, args)| args.split(',').next())
                .and_then(|arg| arg.split(' ').next_back())
        };
        let to_stack = destination.is_some_and(|pointer| not_record.contains(&pointer));
        let store = line.starts_with("store ") && !to_stack;
        let copy = (line.contains("@llvm.memcpy") || line.contains("@llvm.memset")) && !to_stack;
        // The unaligned entry stores on x86_64 and aarch64: one store instruction in
        // `asm!`, which must stay an opaque memory access the compiler keeps in place.
        if line.contains(" asm ") {
            assert!(
                line.contains(" asm sideeffect ") && line.contains("~{memory}"),
                "an asm block between the fences of the in-place update that the compiler \
                 may move or drop: {line}"
            );
            stores += 1;
        }
        if store {
            stores += 1;
            assert!(
                line.starts_with("store volatile ") || line.starts_with("store atomic "),
                "a plain store between the fences of the in-place update: {line}"
            );
        }
        assert!(
            !copy || line.contains("i1 true)"),
            "a non-volatile memcpy between the fences of the in-place update: {line}"
        );
    }
    assert!(
        stores > 0,
        "no store between the fences of ThreadContext::update"
    );
}
