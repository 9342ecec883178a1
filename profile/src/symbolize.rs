//! Symbols: an address of a module to the functions it is in, innermost (inlined)
//! first, from DWARF where the module has it and from its ELF symbol tables (`.symtab`
//! and `.dynsym`) otherwise; Rust and C++ names demangled. Each module keeps what it
//! resolved, so a long profile resolves each address once.

use std::borrow::Cow;

use object::{Object, ObjectSymbol, ReadRef, SymbolKind};

use crate::dwarf::Dwarf;
use crate::elf::Elf;
use crate::plt;

/// Most symbols kept of one module (libxul has about a million).
const MAX_SYMBOLS: usize = 1 << 22;

/// Longest name kept, in bytes: a longer one is cut (and not demangled).
const MAX_NAME: usize = 4096;

/// How far past a symbol of unknown size an address may lie and still be given its
/// name, when no other symbol follows.
const UNSIZED_REACH: u64 = 64 * 1024;

/// The name of a PLT stub whose target is unknown, and of the PLT's header (PLT0, which
/// enters the dynamic linker): an honest name for code that is in the PLT, rather than
/// the symbol before it (`_init`) or no name at all.
pub(crate) const PLT_UNNAMED: &str = "[plt]";

/// What is added to a function's name to name its PLT stub, as perf and objdump do.
const PLT_SUFFIX: &str = "@plt";

/// One function an address is in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The function's name, demangled.
    pub name: String,
    /// Its source file, with the `lines` option and DWARF.
    pub file: Option<String>,
    /// The line in that file.
    pub line: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    address: u64,
    size: u64,
    name: (u32, u32),
}

/// A module's function symbols, by address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    entries: Vec<Entry>,
    names: String,
}

impl SymbolTable {
    /// The function symbols of `.symtab` and `.dynsym`, and the PLT's stubs (each one
    /// `NAME@plt`, or [`PLT_UNNAMED`]: every byte of the PLT sections is covered, so
    /// none is given the name of a symbol before it). Names that cannot be read are
    /// left out; the caller asks the file's budget whether reading ran out. At one
    /// address, a PLT stub wins, then a symbol with a size over one without, and a
    /// global one over a weak alias (`__vdso_clock_gettime` over `clock_gettime`).
    pub fn read<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> Self {
        let mut table = Self::default();
        // 0 for a PLT stub, 1 for a global symbol, 2 for a weak one.
        let mut rank = Vec::new();
        let mut stub_name = Vec::new();
        for stub in plt::stubs(elf) {
            stub_name.clear();
            match stub.name {
                Some(name) => {
                    stub_name.extend_from_slice(&name[..name.len().min(MAX_NAME)]);
                    stub_name.extend_from_slice(PLT_SUFFIX.as_bytes());
                }
                None => stub_name.extend_from_slice(PLT_UNNAMED.as_bytes()),
            }
            if table.entries.len() >= MAX_SYMBOLS
                || table.push(stub.address, stub.size, &stub_name).is_err()
            {
                break;
            }
            rank.push(0u8);
        }
        for symbol in elf.symbols().chain(elf.dynamic_symbols()) {
            if table.entries.len() >= MAX_SYMBOLS {
                break;
            }
            if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
                continue;
            }
            let address = symbol.address();
            let Ok(name) = symbol.name_bytes() else {
                continue;
            };
            if address == 0 || name.is_empty() {
                continue;
            }
            if table.push(address, symbol.size(), name).is_err() {
                break;
            }
            rank.push(if symbol.is_weak() { 2 } else { 1 });
        }
        let mut order: Vec<usize> = (0..table.entries.len()).collect();
        order.sort_unstable_by_key(|&at| {
            let e = &table.entries[at];
            let rank = rank.get(at).copied().unwrap_or(2);
            (e.address, rank != 0, std::cmp::Reverse(e.size), rank)
        });
        table.entries = order.into_iter().map(|at| table.entries[at]).collect();
        table.entries.dedup_by_key(|e| e.address);
        table.entries.shrink_to_fit();
        table
    }

    /// Adds a symbol; an error once the names no longer fit the table's indexes.
    fn push(&mut self, address: u64, size: u64, name: &[u8]) -> Result<(), ()> {
        let name = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)]);
        let (Ok(start), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return Err(());
        };
        self.names.push_str(&name);
        self.entries.push(Entry {
            address,
            size,
            name: (start, len),
        });
        Ok(())
    }

    /// Adds `other`'s symbols (a debug file's full table to a module's dynamic one); at
    /// one address, `other`'s wins unless only this one has a size.
    pub fn extend(&mut self, other: Self) {
        if other.entries.is_empty() {
            return;
        }
        let mine = std::mem::take(&mut self.entries);
        let mut merged = Self {
            entries: Vec::with_capacity(mine.len() + other.entries.len()),
            names: String::with_capacity(self.names.len() + other.names.len()),
        };
        for (table, entries) in [(&other, &other.entries), (&*self, &mine)] {
            for entry in entries {
                if merged.entries.len() >= MAX_SYMBOLS
                    || merged
                        .push(entry.address, entry.size, table.name(entry).as_bytes())
                        .is_err()
                {
                    break;
                }
            }
        }
        merged
            .entries
            .sort_by_key(|e| (e.address, std::cmp::Reverse(e.size)));
        merged.entries.dedup_by_key(|e| e.address);
        merged.entries.shrink_to_fit();
        *self = merged;
    }

    /// Symbols kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn name(&self, entry: &Entry) -> &str {
        let (start, len) = (entry.name.0 as usize, entry.name.1 as usize);
        self.names.get(start..start + len).unwrap_or("")
    }

    /// The name of the function symbol that holds `svma`, and where it starts.
    pub fn lookup(&self, svma: u64) -> Option<(&str, u64)> {
        let after = self.entries.partition_point(|e| e.address <= svma);
        let last = after.checked_sub(1)?;
        let next = self.entries.get(after).map(|e| e.address);
        // A few symbols back: a large function may enclose a smaller symbol's start.
        for at in (last.saturating_sub(3)..=last).rev() {
            let entry = &self.entries[at];
            let holds = if entry.size > 0 {
                svma - entry.address < entry.size
            } else {
                at == last
                    && match next {
                        Some(next) => svma < next,
                        None => svma - entry.address < UNSIZED_REACH,
                    }
            };
            if holds {
                return Some((self.name(entry), entry.address));
            }
        }
        None
    }
}

/// `name` demangled (Rust, then C++), or as it is; a PLT stub's name is its function's,
/// demangled, then `@plt`.
pub(crate) fn demangle(name: &str) -> String {
    if name.len() >= MAX_NAME {
        return name.to_owned();
    }
    if let Some(function) = name.strip_suffix(PLT_SUFFIX) {
        let mut out = addr2line::demangle_auto(Cow::Borrowed(function), None).into_owned();
        out.push_str(PLT_SUFFIX);
        return out;
    }
    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
}

/// The functions `svma` (an address of the file, already moved back into the call
/// instruction for a return address) is in, by a module's DWARF and symbol table,
/// innermost first; empty when nothing names it.
pub(crate) fn resolve(
    symbols: &SymbolTable,
    dwarf: Option<&Dwarf>,
    svma: u64,
    lines: bool,
) -> Vec<Symbol> {
    let out = dwarf.map(|d| d.frames(svma, lines)).unwrap_or_default();
    let table_name = || symbols.lookup(svma).map(|(name, _)| demangle(name));
    if out.is_empty() {
        return table_name()
            .map(|name| Symbol {
                name,
                file: None,
                line: None,
            })
            .into_iter()
            .collect();
    }
    let outermost = out.len() - 1;
    out.into_iter()
        .enumerate()
        .filter_map(|(at, (name, file, line))| {
            // DWARF without a name: the symbol table's for the function itself, a
            // placeholder for an inlined one.
            let name = match name {
                Some(name) => name,
                None if at == outermost => table_name()?,
                None => "[inlined]".to_owned(),
            };
            Some(Symbol { name, file, line })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_and_cpp_names_demangled() {
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
        assert!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE")
            .starts_with("core::ptr::drop_in_place"));
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(demangle("cart_leaf"), "cart_leaf");
        assert_eq!(demangle("_Z3fooi@plt"), "foo(int)@plt");
        assert_eq!(demangle("rand_r@plt"), "rand_r@plt");
        let long = "_Z".to_owned() + &"a".repeat(MAX_NAME);
        assert_eq!(demangle(&long), long);
    }
}
