//! PLT stubs: the procedure linkage table's entries of a module, each named after the
//! function it jumps to (`rand_r@plt`), as perf, samply and objdump name them.
//!
//! No symbol covers `.plt`, `.plt.sec` or `.plt.got`, and `_init` lies just before
//! `.plt` in what gcc and GNU ld make: without these entries, a sample in a stub was
//! given the name of whatever symbol came before it. Every byte of these sections gets
//! an entry here: a stub whose target is known is named `NAME@plt`; the header (PLT0,
//! which calls the dynamic linker) and a stub that cannot be named get no name, and the
//! symbol table calls them `[plt]` (never the symbol before them).
//!
//! A stub's target is found by reading the stub: the GOT slot its indirect jump goes
//! through (x86_64 `jmp *disp(%rip)`, aarch64 `adrp x16` + `ldr x17`), or the relocation
//! index a lazy stub pushes (x86_64 `push $n`), matched with `.rela.plt`'s
//! `JUMP_SLOT` relocations (and `.rela.dyn`'s `GLOB_DAT` ones for `.plt.got`). When no
//! stub of a section can be read so, its stubs are named by `.rela.plt` in order, the
//! layout every linker writes. All of it is read from the target's file under its
//! budget, with counts and sizes capped here whatever the headers say.

use object::elf::{
    R_AARCH64_GLOB_DAT, R_AARCH64_JUMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, SHF_EXECINSTR,
    SHT_PROGBITS, SHT_RELA,
};
use object::read::elf::{FileHeader, Rela, SectionHeader};
use object::{Endianness, ReadRef, SymbolIndex};

use crate::arch::Arch;
use crate::elf::Elf;

/// Most stubs read of one section; past them, the rest of the section is one unnamed
/// stretch.
const MAX_STUBS: u64 = 1 << 16;

/// Most relocations read of `.rela.plt` or `.rela.dyn`.
const MAX_RELOCATIONS: u64 = 1 << 17;

/// One stretch of a PLT section: a stub, or the header or a stub that has no name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stub<'a> {
    pub address: u64,
    pub size: u64,
    /// The function it jumps to, as the dynamic symbol names it.
    pub name: Option<&'a [u8]>,
}

/// Where a stub jumps: through a GOT slot, or by a `.rela.plt` index (a lazy stub).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Got(u64),
    Index(u64),
}

/// A relocation of a GOT slot to a function: the slot and the function's name.
type Slot<'a> = (u64, Option<&'a [u8]>);

/// The stubs of every PLT section of `elf` that has bytes in the file (a separate debug
/// file has none: its `.plt` is `SHT_NOBITS`), in no particular order; empty for a
/// file of another machine or without a PLT.
pub(crate) fn stubs<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> Vec<Stub<'a>> {
    let endian = elf.endian();
    let arch = match elf.elf_header().e_machine(endian) {
        object::elf::EM_X86_64 => Arch::X86_64,
        object::elf::EM_AARCH64 => Arch::Aarch64,
        _ => return Vec::new(),
    };
    let (jump_slot, glob_dat) = match arch {
        Arch::X86_64 => (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT),
        Arch::Aarch64 => (R_AARCH64_JUMP_SLOT, R_AARCH64_GLOB_DAT),
    };
    let code = |name: &str| {
        let (_, header) = elf
            .elf_section_table()
            .section_by_name(endian, name.as_bytes())?;
        let executable = header.sh_flags(endian) & u64::from(SHF_EXECINSTR) != 0;
        (header.sh_type(endian) == SHT_PROGBITS && executable).then_some(header)
    };
    let plt = code(".plt");
    let plt_sec = code(".plt.sec");
    let plt_got = code(".plt.got");
    if plt.is_none() && plt_sec.is_none() && plt_got.is_none() {
        return Vec::new();
    }
    let jump_slots = relocations(elf, ".rela.plt", jump_slot);
    let mut by_got: Vec<Slot<'a>> = jump_slots
        .iter()
        .filter(|s| s.1.is_some())
        .copied()
        .collect();
    if plt_got.is_some() {
        let glob_dat = relocations(elf, ".rela.dyn", glob_dat);
        by_got.extend(glob_dat.into_iter().filter(|s| s.1.is_some()));
    }
    by_got.sort_unstable_by_key(|&(got, _)| got);
    let names = Names {
        by_got,
        in_order: jump_slots,
    };
    let mut out = Vec::new();
    // (section, header bytes, default entry size, sizes its sh_entsize may give); the
    // stubs of `.plt` and `.plt.sec` are in `.rela.plt`'s order, `.plt.got`'s in none.
    let layouts = match arch {
        Arch::X86_64 => [
            (plt, 16, 16, &[16][..], true),
            (plt_sec, 0, 16, &[16][..], true),
            (plt_got, 0, 8, &[8, 16][..], false),
        ],
        Arch::Aarch64 => [
            (plt, 32, 16, &[16, 24][..], true),
            (plt_sec, 0, 16, &[16, 24][..], true),
            (plt_got, 0, 16, &[16, 24][..], false),
        ],
    };
    for (header, head, entry, allowed, ordered) in layouts {
        let Some(header) = header else { continue };
        let entsize = header.sh_entsize(endian);
        let entry = if allowed.contains(&entsize) {
            entsize
        } else {
            entry
        };
        let section = Section {
            address: header.sh_addr(endian),
            size: header.sh_size(endian),
            offset: header.sh_offset(endian),
            head,
            entry,
            ordered,
        };
        section.stubs(elf.data(), arch, &names, &mut out);
    }
    out
}

/// The GOT slots a module's relocations fill.
struct Names<'a> {
    /// By slot address, to name a stub by the slot it jumps through.
    by_got: Vec<Slot<'a>>,
    /// `.rela.plt`'s, in order: what a lazy stub's index, or a stub's place, names.
    in_order: Vec<Slot<'a>>,
}

impl<'a> Names<'a> {
    fn of(&self, target: Target) -> Option<&'a [u8]> {
        match target {
            Target::Got(got) => {
                let at = self.by_got.binary_search_by_key(&got, |&(g, _)| g).ok()?;
                self.by_got.get(at)?.1
            }
            Target::Index(index) => {
                let index = usize::try_from(index).ok()?;
                self.in_order.get(index)?.1
            }
        }
    }
}

/// The relocations in section `name` (a `SHT_RELA` section), at most
/// [`MAX_RELOCATIONS`], in order: each one's slot, and its dynamic symbol's name when it
/// is of type `kind`.
fn relocations<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>, name: &str, kind: u32) -> Vec<Slot<'a>> {
    let endian = elf.endian();
    let Some((_, header)) = elf
        .elf_section_table()
        .section_by_name(endian, name.as_bytes())
    else {
        return Vec::new();
    };
    if header.sh_type(endian) != SHT_RELA {
        return Vec::new();
    }
    type Rela64 = object::elf::Rela64<Endianness>;
    let one = std::mem::size_of::<Rela64>() as u64;
    let count = (header.sh_size(endian) / one).min(MAX_RELOCATIONS);
    let Ok(count) = usize::try_from(count) else {
        return Vec::new();
    };
    let Ok(relas) = elf
        .data()
        .read_slice_at::<Rela64>(header.sh_offset(endian), count)
    else {
        return Vec::new();
    };
    let symbols = elf.elf_dynamic_symbol_table();
    relas
        .iter()
        .map(|rela| {
            let name = (rela.r_type(endian, false) == kind)
                .then(|| rela.symbol(endian, false))
                .flatten()
                .and_then(|index: SymbolIndex| symbols.symbol(index).ok())
                .and_then(|symbol| symbols.symbol_name(endian, symbol).ok())
                .filter(|name| !name.is_empty());
            (rela.r_offset(endian), name)
        })
        .collect()
}

/// A PLT section's place and layout.
struct Section {
    address: u64,
    size: u64,
    offset: u64,
    /// Bytes of its header (PLT0) before the first stub.
    head: u64,
    /// Bytes of one stub.
    entry: u64,
    /// Whether its stubs are in `.rela.plt`'s order.
    ordered: bool,
}

impl Section {
    /// Adds the section's stubs to `out`, covering all of it.
    fn stubs<'a, R: ReadRef<'a>>(
        &self,
        data: R,
        arch: Arch,
        names: &Names<'a>,
        out: &mut Vec<Stub<'a>>,
    ) {
        let Section {
            address,
            size,
            head,
            entry,
            ..
        } = *self;
        if size == 0 || entry == 0 {
            return;
        }
        let read = size.min(head.saturating_add(MAX_STUBS * entry));
        // Unreadable bytes (past the file's end, or the budget's) decode nothing; the
        // stubs are still there, named in order.
        let bytes = data.read_bytes_at(self.offset, read).unwrap_or(&[]);
        let head = head.min(size);
        if head > 0 {
            out.push(Stub {
                address,
                size: head,
                name: None,
            });
        }
        let count = (read - head) / entry;
        let targets: Vec<Option<Target>> = (0..count)
            .map(|k| {
                let at = head + k * entry;
                let stub = usize::try_from(at)
                    .ok()
                    .and_then(|at| bytes.get(at..at.checked_add(entry as usize)?))?;
                decode(arch, address.wrapping_add(at), stub)
            })
            .collect();
        let in_order = self.ordered && targets.iter().all(Option::is_none);
        for (k, target) in (0..count).zip(targets) {
            let target = match in_order {
                true => Some(Target::Index(k)),
                false => target,
            };
            out.push(Stub {
                address: address.wrapping_add(head + k * entry),
                size: entry,
                name: target.and_then(|t| names.of(t)),
            });
        }
        // What is left: a tail shorter than a stub, or stubs past MAX_STUBS.
        let covered = head + count * entry;
        if covered < size {
            out.push(Stub {
                address: address.wrapping_add(covered),
                size: size - covered,
                name: None,
            });
        }
    }
}

/// Where the stub at `address` (its bytes `stub`) jumps, when it is one of the forms
/// linkers write.
fn decode(arch: Arch, address: u64, stub: &[u8]) -> Option<Target> {
    match arch {
        Arch::X86_64 => decode_x86_64(address, stub),
        Arch::Aarch64 => decode_aarch64(address, stub),
    }
}

/// `[endbr64] [bnd] jmp *disp32(%rip)`, or a lazy stub's `[endbr64] push $index`.
fn decode_x86_64(address: u64, stub: &[u8]) -> Option<Target> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let mut at = if stub.starts_with(&ENDBR64) { 4 } else { 0 };
    let imm32 = |at: usize| -> Option<[u8; 4]> { stub.get(at..at + 4)?.try_into().ok() };
    if stub.get(at) == Some(&0x68) {
        return imm32(at + 1).map(|n| Target::Index(u32::from_le_bytes(n).into()));
    }
    if stub.get(at) == Some(&0xf2) {
        at += 1;
    }
    if stub.get(at..at + 2) != Some(&[0xff, 0x25][..]) {
        return None;
    }
    let disp = i64::from(i32::from_le_bytes(imm32(at + 2)?));
    let next = address.wrapping_add(at as u64 + 6);
    Some(Target::Got(next.wrapping_add_signed(disp)))
}

/// `[bti c] adrp x16, page; ldr x17, [x16, #offset]`.
fn decode_aarch64(address: u64, stub: &[u8]) -> Option<Target> {
    const BTI_C: u32 = 0xd503_245f;
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(stub.get(at..at + 4)?.try_into().ok()?))
    };
    let at = if word(0)? == BTI_C { 4 } else { 0 };
    let (adrp, ldr) = (word(at)?, word(at + 4)?);
    // adrp x16: op 1, immlo, 10000, immhi, rd 16.
    if adrp & 0x9f00_001f != 0x9000_0010 {
        return None;
    }
    // ldr x17, [x16, #imm12 * 8]: size 11, 111001, opc 01, imm12, rn 16, rt 17.
    if ldr & 0xffc0_03ff != 0xf940_0211 {
        return None;
    }
    let immlo = u64::from((adrp >> 29) & 0x3);
    let immhi = u64::from((adrp >> 5) & 0x7_ffff);
    // A 21-bit signed count of 4 KiB pages.
    let pages = (((immhi << 2) | immlo) << 43) as i64 >> 43;
    let page = (address.wrapping_add(at as u64) & !0xfff).wrapping_add_signed(pages << 12);
    let offset = u64::from((ldr >> 10) & 0xfff) * 8;
    Some(Target::Got(page.wrapping_add(offset)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_stubs_decoded() {
        // jmp *0x2fca(%rip) at 0x1030: the GOT slot 0x4000.
        let classic = [
            0xff, 0x25, 0xca, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(decode_x86_64(0x1030, &classic), Some(Target::Got(0x4000)));
        // endbr64; bnd jmp *0x2f92(%rip) at 0x1060 (.plt.sec): 0x1060 + 11 + 0x2f92.
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x92, 0x2f, 0, 0, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(
            decode_x86_64(0x1060, &sec),
            Some(Target::Got(0x1060 + 11 + 0x2f92))
        );
        // endbr64; push $3; bnd jmp .plt (a lazy stub of the IBT layout).
        let lazy = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 3, 0, 0, 0, 0xf2, 0xe9, 0xe1, 0xff, 0xff, 0xff, 0x90,
        ];
        assert_eq!(decode_x86_64(0x1030, &lazy), Some(Target::Index(3)));
        // A negative displacement, and what is no stub.
        let back = [0xff, 0x25, 0xf0, 0xff, 0xff, 0xff];
        assert_eq!(decode_x86_64(0x1000, &back), Some(Target::Got(0xff6)));
        assert_eq!(decode_x86_64(0x1000, &[0x90; 16]), None);
        assert_eq!(decode_x86_64(0x1000, &[0xff, 0x25, 1]), None);
        assert_eq!(decode_x86_64(0x1000, &[]), None);
    }

    #[test]
    fn aarch64_stubs_decoded() {
        let words = |w: &[u32]| w.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        // adrp x16, 0x11000 (from 0x400); ldr x17, [x16, #0xf80]; add; br x17.
        let adrp = 0x9000_0010 | (0x11 & 3) << 29 | (0x11 >> 2) << 5;
        let ldr = 0xf940_0211 | (0xf80 / 8) << 10;
        let stub = words(&[adrp, ldr, 0x913e_0210, 0xd61f_0220]);
        assert_eq!(decode_aarch64(0x400, &stub), Some(Target::Got(0x11f80)));
        // With bti c first, and a page before this one.
        let back = 0x9000_0010 | 3 << 29 | 0x7_ffff << 5; // -1 page
        let bti = words(&[0xd503_245f, back, ldr, 0xd61f_0220]);
        assert_eq!(decode_aarch64(0x2000, &bti), Some(Target::Got(0x1f80)));
        assert_eq!(decode_aarch64(0x2000, &words(&[0xd503_201f; 4])), None);
        assert_eq!(decode_aarch64(0x2000, &[1, 2]), None);
    }

    #[test]
    fn every_byte_covered_and_named_in_order_when_nothing_decodes() {
        let names = Names {
            by_got: vec![(0x4000, Some(&b"rand_r"[..]))],
            in_order: vec![(0x4000, Some(&b"rand_r"[..])), (0x4008, None)],
        };
        let section = Section {
            address: 0x1020,
            size: 0x38,
            offset: 0,
            head: 16,
            entry: 16,
            ordered: true,
        };
        let mut out = Vec::new();
        // No bytes at all: named by their place.
        section.stubs(&[][..], Arch::X86_64, &names, &mut out);
        let rand_r = Some(&b"rand_r"[..]);
        assert_eq!(
            out,
            [
                Stub {
                    address: 0x1020,
                    size: 16,
                    name: None
                },
                Stub {
                    address: 0x1030,
                    size: 16,
                    name: rand_r
                },
                Stub {
                    address: 0x1040,
                    size: 16,
                    name: None
                },
                Stub {
                    address: 0x1050,
                    size: 8,
                    name: None
                },
            ]
        );
        // .plt.got's stubs are in no order: unread, they stay unnamed.
        let got = Section {
            ordered: false,
            ..section
        };
        out.clear();
        got.stubs(&[][..], Arch::X86_64, &names, &mut out);
        assert!(out.iter().all(|s| s.name.is_none()) && out.len() == 4);
        // A section that claims far more than any file holds: capped, and covered.
        let huge = Section {
            size: u64::MAX / 2,
            ..got
        };
        out.clear();
        huge.stubs(&[][..], Arch::X86_64, &names, &mut out);
        assert_eq!(out.len() as u64, 1 + MAX_STUBS + 1);
        let end = out.last().map(|s| s.address + s.size);
        assert_eq!(end, Some(0x1020 + u64::MAX / 2));
    }
}

#[cfg(test)]
mod gcc_tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use object::{Object, ObjectSection};

    use crate::elf::Elf;
    use crate::symbolize::{resolve, SymbolTable, PLT_UNNAMED};

    /// `profile/tests/fixtures/plt.c` built with gcc and `flags` as `out`; `None` when
    /// gcc fails (a flag this toolchain does not know), with its complaint.
    fn build(out: &Path, flags: &[&str]) -> Option<()> {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/plt.c");
        let built = Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Werror", "-O2", "-pthread"])
            .args(flags)
            .arg("-o")
            .arg(out)
            .arg(src)
            .output()
            .expect("run gcc (install it: see .ci/run)");
        if !built.status.success() {
            println!(
                "gcc {flags:?}: {}",
                String::from_utf8_lossy(&built.stderr).trim()
            );
        }
        built.status.success().then_some(())
    }

    /// What objdump calls the PLT stubs of `file` (`<rand_r@plt>:`), by address, and
    /// where the program's calls to `rand_r@plt` go.
    fn objdump(file: &Path) -> (Vec<(u64, String)>, Vec<u64>) {
        let out = Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(file)
            .output()
            .expect("run objdump (binutils, with gcc)");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let mut labels = Vec::new();
        let mut calls = Vec::new();
        for line in text.lines() {
            if let Some((address, rest)) = line.split_once(" <") {
                if let (Ok(address), Some(label)) =
                    (u64::from_str_radix(address, 16), rest.strip_suffix(">:"))
                {
                    if label.ends_with("@plt") {
                        labels.push((address, label.to_owned()));
                    }
                }
            }
            if line.contains("call") && line.ends_with(" <rand_r@plt>") {
                let target = line
                    .rsplit(' ')
                    .nth(1)
                    .and_then(|t| u64::from_str_radix(t.trim(), 16).ok());
                calls.push(target.expect("a call's target address"));
            }
        }
        (labels, calls)
    }

    fn name(table: &SymbolTable, svma: u64) -> String {
        resolve(table, None, svma, false)
            .first()
            .map_or_else(|| "[none]".to_owned(), |s| s.name.clone())
    }

    #[test]
    fn plt_stubs_of_a_gcc_program_named_as_objdump_names_them() {
        let dir = std::env::temp_dir().join(format!("otel-ctx-profile-plt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ibt: &[&[&str]] = if cfg!(target_arch = "x86_64") {
            &[
                &["-Wl,-z,now", "-fcf-protection=full", "-Wl,-z,ibtplt"],
                &["-Wl,-z,now", "-fcf-protection=full"],
            ]
        } else {
            &[&["-Wl,-z,now"]]
        };
        let mut variants: Vec<(PathBuf, &[&str])> = vec![(dir.join("plt-default"), &[])];
        if let Some(flags) = ibt
            .iter()
            .find(|f| build(&dir.join("plt-now"), f).is_some())
        {
            variants.push((dir.join("plt-now"), flags));
        }
        let mut sec_seen = false;
        for (file, flags) in &variants {
            if flags.is_empty() {
                build(file, flags).expect("gcc builds the fixture");
            }
            let bytes = std::fs::read(file).unwrap();
            let elf = Elf::<&[u8]>::parse(&bytes[..]).unwrap();
            let table = SymbolTable::read(&elf);
            // Every byte of every PLT section: a stub's name or [plt], never the symbol
            // before the section (_init) or another function.
            let mut counts = std::collections::BTreeMap::<String, u64>::new();
            for section in [".plt", ".plt.sec", ".plt.got"] {
                let Some(s) = elf.section_by_name(section) else {
                    if section == ".plt.sec" {
                        println!("{flags:?}: no .plt.sec (the linker made none)");
                    }
                    continue;
                };
                sec_seen |= section == ".plt.sec";
                for svma in s.address()..s.address() + s.size() {
                    let name = name(&table, svma);
                    assert!(
                        name.ends_with("@plt") || name == PLT_UNNAMED,
                        "{flags:?}: {section} {svma:#x} named {name}"
                    );
                    *counts.entry(name).or_default() += 1;
                }
            }
            println!("{flags:?}: bytes of the PLT sections by name: {counts:?}");
            assert!(counts.contains_key("rand_r@plt"), "{counts:?}");
            // objdump's names for the stubs, and the stub rand_work's calls go through.
            let (labels, calls) = objdump(file);
            assert!(labels.len() >= 5, "{labels:?}");
            for (svma, label) in &labels {
                // A .plt.got stub may be 8 bytes: its first and last.
                for svma in [*svma, svma + 7] {
                    assert_eq!(&name(&table, svma), label, "{flags:?}: {svma:#x}");
                }
            }
            assert!(!calls.is_empty(), "no call to rand_r@plt");
            for call in calls {
                assert_eq!(name(&table, call), "rand_r@plt", "{flags:?}");
            }
        }
        if !sec_seen {
            println!("no variant has a .plt.sec: its stubs were not checked here");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
