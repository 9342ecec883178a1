//! What is kept of one module once read: its key, segments, unwind sections and names
//! ([`ModuleData`]), or why it was not read ([`SkipReason`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use otel_ctx_reader::maps::FileRange;

use crate::arch::Arch;
use crate::dwarf::Dwarf;
use crate::elf::{Head, Segment, UnwindSections};
use crate::hex;
use crate::source::{DebugNames, Missing, SymbolSource, UnknownCause};
use crate::symbolize::{self, Symbol, SymbolTable};

/// What identifies a module's contents across processes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKey {
    /// The GNU build id (`NT_GNU_BUILD_ID` note).
    BuildId(Box<[u8]>),
    /// No build id: the file's device and inode.
    File {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        inode: u64,
    },
}

impl fmt::Display for ModuleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BuildId(id) => f.write_str(&hex(id)),
            Self::File { dev, inode } => write!(f, "dev {dev:#x} inode {inode}"),
        }
    }
}

/// A module's names: its symbols and DWARF, its own file's and those of the sources
/// that completed them (a debug file, MiniDebugInfo, debuginfod).
pub(crate) struct Names {
    pub symbols: SymbolTable,
    pub dwarf: Option<Dwarf>,
    /// Why the DWARF was left out, when a file has some.
    pub dwarf_note: Option<String>,
    /// Where the names come from, the module's own file first.
    pub sources: Vec<SymbolSource>,
    /// Whether `symbols` is a full table (a `.symtab`): the module is not stripped, or
    /// a debug file gave its table.
    pub full: bool,
    /// Why no source gave a full table, when none did.
    pub missing: Option<Missing>,
}

impl Names {
    /// Whether a debug file would add something: a full table, or the DWARF asked for.
    pub fn wants_debug_file(&self, debug_info: bool) -> bool {
        !self.full || (debug_info && self.dwarf.is_none())
    }

    /// Adds what another source found.
    pub fn absorb(&mut self, found: DebugNames) {
        self.symbols.extend(found.symbols);
        if self.dwarf.is_none() && found.dwarf.is_some() {
            self.dwarf = found.dwarf;
            self.dwarf_note = None;
        } else if self.dwarf.is_none() && found.dwarf_note.is_some() {
            self.dwarf_note = found.dwarf_note;
        }
        self.full |= found.full;
        if self.full {
            self.missing = None;
        }
        self.sources.push(found.source);
    }

    /// The cause a frame of this module that nothing names is counted under.
    pub fn unknown_cause(&self) -> UnknownCause {
        self.missing
            .as_ref()
            .map_or(UnknownCause::NoSymbols, |m| m.cause)
    }
}

/// One module's contents, as read once.
pub(crate) struct ModuleData {
    pub key: ModuleKey,
    pub build_id: Option<Box<[u8]>>,
    pub arch: Arch,
    pub segments: Vec<Segment>,
    pub unwind: UnwindSections,
    /// Its names; a source found later (debuginfod) completes them in place.
    pub names: RefCell<Names>,
    pub bytes_read: u64,
    /// Symbolized addresses (`svma`, with lines or not), at most
    /// [`MAX_SYMBOLIZED_PER_MODULE`].
    pub symbolized: RefCell<Symbolized>,
}

/// A module's symbolized addresses: by `svma` and whether lines were asked for.
pub(crate) type Symbolized = HashMap<(u64, bool), Rc<[Symbol]>>;

/// Addresses a module keeps symbolized; past that the cache starts over.
pub(crate) const MAX_SYMBOLIZED_PER_MODULE: usize = 1 << 16;

impl fmt::Debug for ModuleData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.names.borrow();
        f.debug_struct("ModuleData")
            .field("key", &self.key)
            .field("arch", &self.arch)
            .field("symbols", &names.symbols.len())
            .field("dwarf", &names.dwarf)
            .field("sources", &names.sources)
            .field("bytes_read", &self.bytes_read)
            .finish_non_exhaustive()
    }
}

impl ModuleData {
    /// A module of `head`, unwound with `unwind` and named by `names`.
    pub fn new(
        key: ModuleKey,
        head: Head,
        unwind: UnwindSections,
        names: Names,
        bytes_read: u64,
    ) -> Self {
        Self {
            key,
            build_id: head.build_id,
            arch: head.arch,
            segments: head.segments,
            unwind,
            names: RefCell::new(names),
            bytes_read,
            symbolized: RefCell::new(HashMap::new()),
        }
    }

    /// The load bias of the file mapped as `ranges`: what is added to an address of
    /// the file (`svma`) to give the address in the process. `None` when no mapping of
    /// the file lines up with one of its `PT_LOAD` segments.
    pub fn bias(&self, ranges: &[FileRange]) -> Option<u64> {
        ranges.iter().filter(|r| r.is_executable()).find_map(|r| {
            let seg = self.segments.iter().find(|s| {
                s.executable
                    && s.offset & !0xfff <= r.offset
                    && r.offset < s.offset.saturating_add(s.filesz.max(1))
            })?;
            // r.start holds file offset r.offset, which the segment puts at
            // vaddr + (r.offset - offset).
            let svma = seg.vaddr.wrapping_add(r.offset).wrapping_sub(seg.offset);
            Some(r.start.wrapping_sub(svma))
        })
    }
}

/// Why a module was not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SkipReason {
    pub text: String,
    /// Whether it was the budget: a file larger or slower to read than it allows.
    pub budget: bool,
}

impl SkipReason {
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            budget: false,
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl ModuleData {
    /// The functions `svma` (an address of the file, already moved back into the call
    /// instruction for a return address) is in, innermost first; empty when nothing
    /// names it. Cached per module.
    pub(crate) fn symbolize(&self, svma: u64, lines: bool) -> Rc<[Symbol]> {
        if let Some(found) = self.symbolized.borrow().get(&(svma, lines)) {
            return found.clone();
        }
        let resolved: Rc<[Symbol]> = {
            let names = self.names.borrow();
            symbolize::resolve(&names.symbols, names.dwarf.as_ref(), svma, lines).into()
        };
        let mut cache = self.symbolized.borrow_mut();
        if cache.len() >= MAX_SYMBOLIZED_PER_MODULE {
            cache.clear();
        }
        cache.insert((svma, lines), resolved.clone());
        resolved
    }
}
