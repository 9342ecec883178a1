//! `elf_tls`: ELF analysis of arbitrary files, then slot resolution against arbitrary
//! target memory.
//!
//! Input layout: the ELF file, then `mem_len` bytes of target memory, then a 20-byte
//! trailer (an input shorter than the trailer is an ELF file alone, with a zero
//! trailer and no memory):
//!
//! | trailer byte | meaning |
//! |---|---|
//! | 0 | flags: bit 0 the module is the executable, bit 1 musl (else glibc), bit 2 add a second module that only references the variable |
//! | 1 | fault mask: a read of a byte at address `a` fails when bit `(a >> 3) & 7` is set |
//! | 2..4 | `mem_len`, little-endian (clamped to what is there) |
//! | 4..12 | load bias, little-endian |
//! | 12..20 | thread pointer, little-endian |
//!
//! Target memory repeats the memory bytes over the whole address space (byte `a` is
//! `memory[a % mem_len]`), so every address the resolver computes can be read; with no
//! memory bytes every read fails.
//!
//! Checked: [`ElfTls::parse`] returns, and what it returns is consistent (relocations
//! only with a symbol, local dynamic only without them); [`resolve()`], [`resolve_for`]
//! and [`Resolution::slot_address`] return, and agree with the modules they were given.
//! The fuzzer's timeout turns an endless loop into a failure.

use std::io;
use std::sync::Arc;

use otel_ctx_reader::thread::tls::{
    resolve, resolve_for, ElfTls, Libc, LoadedModule, Resolution, SlotLocation, TargetMemory,
    TlsError,
};

/// Size of the trailer that ends the input.
pub const TRAILER_SIZE: usize = 20;

/// Memory built from fuzzer bytes, the same bytes repeated over all addresses.
struct FuzzMemory<'a> {
    bytes: &'a [u8],
    fault_mask: u8,
}

impl TargetMemory for FuzzMemory<'_> {
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        for (i, out) in buf.iter_mut().enumerate() {
            let at = addr.wrapping_add(i as u64);
            if self.bytes.is_empty() || self.fault_mask & (1 << ((at >> 3) & 7)) != 0 {
                return Err(io::Error::from_raw_os_error(14));
            }
            *out = self.bytes[(at % self.bytes.len() as u64) as usize];
        }
        Ok(())
    }
}

fn u64_at(trailer: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&trailer[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Splits the input and checks everything described in the module docs.
pub fn check(input: &[u8]) {
    let (elf_and_memory, trailer) = if input.len() >= TRAILER_SIZE {
        input.split_at(input.len() - TRAILER_SIZE)
    } else {
        (input, &[0u8; TRAILER_SIZE][..])
    };
    let flags = trailer[0];
    let mem_len = usize::from(u16::from_le_bytes([trailer[2], trailer[3]]));
    let (file, memory) =
        elf_and_memory.split_at(elf_and_memory.len() - mem_len.min(elf_and_memory.len()));
    let mem = FuzzMemory {
        bytes: memory,
        fault_mask: trailer[1],
    };
    let bias = u64_at(trailer, 4);
    let tp = u64_at(trailer, 12);
    let libc = if flags & 2 != 0 {
        Libc::Musl
    } else {
        Libc::Glibc
    };
    let _ = Libc::detect([String::from_utf8_lossy(memory).as_ref()]);

    let elf = match ElfTls::parse(file) {
        Ok(elf) => elf,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    check_elf(&elf);
    let defines = elf.defines_symbol();

    let mut modules = vec![LoadedModule {
        path: "/fuzz/module".into(),
        bias,
        is_main: flags & 1 != 0,
        elf: Arc::new(elf.clone()),
    }];
    if flags & 4 != 0 {
        // The same file as a module that references the variable without defining it.
        let mut user = elf;
        if let Some(symbol) = user.symbol.as_mut() {
            symbol.defined = false;
        }
        modules.push(LoadedModule {
            path: "/fuzz/user".into(),
            bias: bias.rotate_left(17),
            is_main: false,
            elf: Arc::new(user),
        });
    }

    let resolved = resolve(&modules, libc, &mem);
    check_resolution(&resolved, &modules, libc, tp, &mem);
    if defines {
        let again = resolve_for(&modules[0], &modules, libc, &mem);
        check_resolution(&again, &modules, libc, tp, &mem);
        // Resolution reads the same memory the same way.
        match (&resolved, &again) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("resolve {a:?} but resolve_for {b:?}"),
        }
    } else {
        assert!(matches!(resolved, Err(TlsError::SymbolNotFound)));
    }
}

fn check_elf(elf: &ElfTls) {
    if let Some(segment) = elf.tls_segment {
        assert!(segment.align >= 1);
    }
    if !elf.relocs.is_empty() {
        assert!(elf.symbol.is_some(), "relocations without the symbol");
    }
    if elf.local_dynamic {
        assert!(elf.relocs.is_empty() && elf.defines_symbol());
    }
    assert_eq!(elf.defines_symbol(), elf.symbol.is_some_and(|s| s.defined));
}

fn check_resolution(
    resolved: &Result<Resolution, TlsError>,
    modules: &[LoadedModule],
    libc: Libc,
    tp: u64,
    mem: &FuzzMemory<'_>,
) {
    let r = match resolved {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert_eq!(r.libc, libc);
    assert_eq!(r.machine, modules[0].elf.machine);
    assert!(modules.iter().any(|m| m.path == r.module));
    assert_eq!(r.defining_module, modules[0].path);
    assert!(!r.model.name().is_empty());
    match (r.location, r.slot_address(tp, mem)) {
        (SlotLocation::TpOffset(offset), slot) => {
            assert_eq!(slot.ok(), Some(Some(tp.wrapping_add(offset as u64))));
        }
        (SlotLocation::Dtv { module_id, .. }, slot) => {
            assert!(module_id != 0);
            if let Err(e) = slot {
                assert!(!e.to_string().is_empty());
            }
        }
    }
}
