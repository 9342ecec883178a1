//! What an ELF file says about `otel_thread_ctx_v1`: the symbol, the module's `PT_TLS`
//! segment, and every relocation through which code reaches the variable.
//!
//! This is static analysis of one file; [`resolve`](mod@super::resolve) turns it into an address with
//! the help of the target's memory (the GOT entries its dynamic linker filled).

use std::fmt;

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::read::ReadRef;
use object::Endianness;

use otel_ctx_codec::threadlocal::TLS_SYMBOL;

/// The architectures the spec covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    /// x86_64: TLS variant II, the thread pointer is `fs_base`.
    X86_64,
    /// aarch64: TLS variant I, the thread pointer is `tpidr_el0`.
    Aarch64,
}

impl Machine {
    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// The architecture this program was built for.
    pub const fn host() -> Self {
        if cfg!(target_arch = "aarch64") {
            Self::Aarch64
        } else {
            Self::X86_64
        }
    }
}

/// How code in a module reaches the variable: one relocation and its GOT entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relocated {
    /// `R_X86_64_TLSDESC` / `R_AARCH64_TLSDESC`: the GOT holds `{entry, arg}`.
    TlsDesc,
    /// `DTPMOD64` (+ `DTPOFF64`): the GOT holds `{module_id, offset}`.
    GeneralDynamic,
    /// `TPOFF64` / `TLS_TPREL64`: the GOT holds the offset from the thread pointer.
    InitialExec,
}

impl Relocated {
    /// The access model's usual name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::TlsDesc => "TLSDESC",
            Self::GeneralDynamic => "general dynamic",
            Self::InitialExec => "initial exec",
        }
    }
}

/// One relocation that leads to the variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsReloc {
    /// Its kind.
    pub kind: Relocated,
    /// Link-time address of the GOT entry (add the load bias).
    pub got_vaddr: u64,
}

/// Which symbol table held the symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolTable {
    /// `.dynsym`: what the spec requires.
    Dynsym,
    /// `.symtab` only: found, but other readers will not find it.
    Symtab,
}

/// The `otel_thread_ctx_v1` entry of a symbol table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolInfo {
    /// Table it was found in.
    pub table: SymbolTable,
    /// Whether this module defines it (rather than only referencing it).
    pub defined: bool,
    /// `st_value`: for `STT_TLS`, the offset inside the module's TLS block.
    pub value: u64,
    /// `st_size` (8 expected).
    pub size: u64,
    /// `st_info` type (`STT_TLS` = 6 expected).
    pub kind: u8,
    /// `st_info` binding (`STB_GLOBAL` = 1 expected).
    pub binding: u8,
}

impl SymbolInfo {
    /// Whether the symbol is a TLS object.
    pub const fn is_tls(&self) -> bool {
        self.kind == elf::STT_TLS
    }
}

/// A module's `PT_TLS` segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSegment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_memsz`: size of the TLS block.
    pub memsz: u64,
    /// `p_align` (at least 1).
    pub align: u64,
}

/// What one ELF file says about the TLS variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfTls {
    /// Architecture of the file.
    pub machine: Machine,
    /// `ET_EXEC` (not position independent) rather than `ET_DYN`.
    pub is_fixed_address: bool,
    /// `p_vaddr` and `p_offset` of the first `PT_LOAD`, to compute the load bias.
    pub first_load: (u64, u64),
    /// The `PT_TLS` segment, if the module has TLS.
    pub tls_segment: Option<TlsSegment>,
    /// The symbol, if present in `.dynsym` (or else `.symtab`).
    pub symbol: Option<SymbolInfo>,
    /// Relocations that reach the variable, in file order.
    pub relocs: Vec<TlsReloc>,
    /// The module defines the variable, has no relocation for it, but has a
    /// local-dynamic `DTPMOD64` for its own TLS block: the model the spec excludes.
    pub local_dynamic: bool,
    /// A `PT_INTERP` segment: the file asks for a dynamic loader.
    pub has_interpreter: bool,
    /// A `NT_GNU_ABI_TAG` note, which glibc's start files put in every executable.
    pub gnu_abi_tag: bool,
    /// Whether a file without `PT_INTERP` names `__libc_start_main` in a symbol table: a
    /// static executable linked with a C library.
    pub libc_start: bool,
}

/// Why an ELF file could not be analysed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ElfError {
    /// Not a 64-bit ELF file, or its structure is malformed.
    Malformed(&'static str),
    /// A machine other than x86_64 or aarch64.
    UnsupportedMachine(u16),
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(what) => write!(f, "malformed ELF file: {what}"),
            Self::UnsupportedMachine(m) => {
                write!(f, "ELF machine {m} is neither x86_64 nor aarch64")
            }
        }
    }
}

impl std::error::Error for ElfError {}

fn malformed(what: &'static str) -> impl Fn(object::read::Error) -> ElfError {
    move |_| ElfError::Malformed(what)
}

/// Relocation type numbers of one machine.
struct RelocTypes {
    tlsdesc: u32,
    dtpmod: u32,
    tpoff: u32,
}

impl RelocTypes {
    const fn of(machine: Machine) -> Self {
        match machine {
            Machine::X86_64 => Self {
                tlsdesc: elf::R_X86_64_TLSDESC,
                dtpmod: elf::R_X86_64_DTPMOD64,
                tpoff: elf::R_X86_64_TPOFF64,
            },
            Machine::Aarch64 => Self {
                tlsdesc: elf::R_AARCH64_TLSDESC,
                dtpmod: elf::R_AARCH64_TLS_DTPMOD,
                tpoff: elf::R_AARCH64_TLS_TPREL,
            },
        }
    }
}

impl ElfTls {
    /// Analyses an ELF file for `otel_thread_ctx_v1`.
    pub fn parse<'data, R: ReadRef<'data>>(data: R) -> Result<Self, ElfError> {
        Self::parse_for(data, TLS_SYMBOL)
    }

    /// Analyses an ELF file for the TLS symbol `name`.
    pub fn parse_for<'data, R: ReadRef<'data>>(data: R, name: &str) -> Result<Self, ElfError> {
        let header = elf::FileHeader64::<Endianness>::parse(data)
            .map_err(malformed("not a 64-bit ELF file"))?;
        let endian = header.endian().map_err(malformed("bad byte order"))?;
        let machine = match header.e_machine(endian) {
            elf::EM_X86_64 => Machine::X86_64,
            elf::EM_AARCH64 => Machine::Aarch64,
            other => return Err(ElfError::UnsupportedMachine(other)),
        };
        let is_fixed_address = header.e_type(endian) == elf::ET_EXEC;

        let phdrs = header
            .program_headers(endian, data)
            .map_err(malformed("bad program headers"))?;
        let first_load = phdrs
            .iter()
            .find(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| (p.p_vaddr(endian), p.p_offset(endian)))
            .ok_or(ElfError::Malformed("no PT_LOAD segment"))?;
        let tls_segment = phdrs
            .iter()
            .find(|p| p.p_type(endian) == elf::PT_TLS)
            .map(|p| TlsSegment {
                vaddr: p.p_vaddr(endian),
                memsz: p.p_memsz(endian),
                align: p.p_align(endian).max(1),
            });

        let has_interpreter = phdrs.iter().any(|p| p.p_type(endian) == elf::PT_INTERP);
        let gnu_abi_tag = phdrs
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_NOTE)
            .any(|p| {
                let Ok(Some(mut notes)) = p.notes(endian, data) else {
                    return false;
                };
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == elf::ELF_NOTE_GNU
                        && note.n_type(endian) == elf::NT_GNU_ABI_TAG
                    {
                        return true;
                    }
                }
                false
            });

        let sections = header
            .sections(endian, data)
            .map_err(malformed("bad section headers"))?;
        // Only a static executable needs telling its C library from its contents; a file
        // that needs shared libraries (a `DT_NEEDED` entry: every shared library linked
        // with a C library) is none, and its symbol tables (hundreds of thousands of
        // symbols in a large library) are not searched for it.
        let needs_libraries = phdrs
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_DYNAMIC)
            .any(|p| {
                p.dynamic(endian, data)
                    .ok()
                    .flatten()
                    .is_some_and(|entries| {
                        entries
                            .iter()
                            .any(|d| d.d_tag(endian) == u64::from(elf::DT_NEEDED))
                    })
            });
        let libc_start = !has_interpreter
            && !needs_libraries
            && [elf::SHT_SYMTAB, elf::SHT_DYNSYM].into_iter().any(|kind| {
                sections.symbols(endian, data, kind).is_ok_and(|symbols| {
                    find_symbol(&symbols, &sections, endian, data, b"__libc_start_main")
                        .is_ok_and(|hit| hit.is_some())
                })
            });
        let mut found = None;
        for (kind, table) in [
            (elf::SHT_DYNSYM, SymbolTable::Dynsym),
            (elf::SHT_SYMTAB, SymbolTable::Symtab),
        ] {
            let symbols = sections
                .symbols(endian, data, kind)
                .map_err(malformed("bad symbol table"))?;
            if let Some((index, sym)) =
                find_symbol(&symbols, &sections, endian, data, name.as_bytes())?
            {
                let info = SymbolInfo {
                    table,
                    defined: sym.st_shndx(endian) != elf::SHN_UNDEF,
                    value: sym.st_value(endian),
                    size: sym.st_size(endian),
                    kind: sym.st_type(),
                    binding: sym.st_bind(),
                };
                // Dynamic relocations index `.dynsym`; a `.symtab` hit has no index there.
                let dyn_index = (table == SymbolTable::Dynsym).then_some(index as u32);
                found = Some((info, dyn_index));
                break;
            }
        }

        let mut out = Self {
            machine,
            is_fixed_address,
            first_load,
            tls_segment,
            symbol: found.map(|(s, _)| s),
            relocs: Vec::new(),
            local_dynamic: false,
            has_interpreter,
            gnu_abi_tag,
            libc_start,
        };
        let Some((symbol, dyn_index)) = found else {
            return Ok(out);
        };
        let types = RelocTypes::of(machine);
        // A relocation reaches the variable when it names its `.dynsym` entry, or, in the
        // defining module, names no symbol (index 0) and carries the variable's offset in
        // its addend (or, for DTPMOD64, in the GOT word after it).
        let local_offset = symbol.defined.then_some(symbol.value);
        let mut local_dynamic_seen = false;
        for section in sections.iter() {
            if section.sh_type(endian) != elf::SHT_RELA {
                continue;
            }
            let Some((relas, _)) = section
                .rela(endian, data)
                .map_err(malformed("bad relocation section"))?
            else {
                continue;
            };
            for rela in relas {
                let r_type = rela.r_type(endian, false);
                let r_sym = rela.r_sym(endian, false);
                let kind = if r_type == types.tlsdesc {
                    Relocated::TlsDesc
                } else if r_type == types.dtpmod {
                    Relocated::GeneralDynamic
                } else if r_type == types.tpoff {
                    Relocated::InitialExec
                } else {
                    continue;
                };
                let got_vaddr = rela.r_offset(endian);
                let names_it = dyn_index.is_some_and(|i| r_sym == i && i != 0);
                let local_hit = r_sym == 0
                    && match (kind, local_offset) {
                        (_, None) => false,
                        (Relocated::GeneralDynamic, Some(offset)) => {
                            let second = got_vaddr
                                .checked_add(8)
                                .and_then(|at| file_word(header, endian, data, at));
                            if second == Some(offset) {
                                true
                            } else {
                                local_dynamic_seen |= second == Some(0);
                                false
                            }
                        }
                        (_, Some(offset)) => rela.r_addend(endian) as u64 == offset,
                    };
                if names_it || local_hit {
                    out.relocs.push(TlsReloc { kind, got_vaddr });
                }
            }
        }
        // DTPOFF64 relocations only complete a DTPMOD64 pair: the reader takes both words
        // of the pair from the GOT, so they need no entry of their own.
        out.local_dynamic = out.relocs.is_empty() && symbol.defined && local_dynamic_seen;
        Ok(out)
    }

    /// Whether this file defines the variable.
    pub fn defines_symbol(&self) -> bool {
        self.symbol.is_some_and(|s| s.defined)
    }
}

/// The 8-byte word at link-time address `vaddr`, from the file's loaded segments.
/// The first symbol of `symbols` named `name`, with its index. The string table is read
/// in one piece (charged to the file's budget once), not a name at a time: a module's
/// `.dynsym` has thousands of names.
fn find_symbol<'data, 'table, R: ReadRef<'data>>(
    symbols: &'table object::read::elf::SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
    sections: &object::read::elf::SectionTable<'data, elf::FileHeader64<Endianness>, R>,
    endian: Endianness,
    data: R,
    name: &[u8],
) -> Result<Option<(usize, &'data elf::Sym64<Endianness>)>, ElfError> {
    if symbols.is_empty() {
        return Ok(None);
    }
    let bytes = sections
        .section(symbols.string_section())
        .and_then(|section| section.data(endian, data))
        .map_err(malformed("bad string table"))?;
    let strings = object::read::StringTable::new(bytes, 0, bytes.len() as u64);
    Ok(symbols
        .symbols()
        .iter()
        .enumerate()
        .find(|(_, sym)| sym.name(endian, strings).ok() == Some(name)))
}

fn file_word<'data, R: ReadRef<'data>>(
    header: &elf::FileHeader64<Endianness>,
    endian: Endianness,
    data: R,
    vaddr: u64,
) -> Option<u64> {
    let phdrs = header.program_headers(endian, data).ok()?;
    phdrs
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .find_map(|p| p.data_range(endian, data, vaddr, 8).ok().flatten())
        .and_then(|b| b.try_into().ok())
        .map(|b: [u8; 8]| match endian {
            Endianness::Little => u64::from_le_bytes(b),
            Endianness::Big => u64::from_be_bytes(b),
        })
}
