//! Where names come from, besides a module's own symbol tables: one [`SymbolSource`]
//! per origin of bytes, as a symbolizer such as blazesym names its sources.
//!
//! - **A separate debug file by build id**: `/usr/lib/debug/.build-id/xx/yyyy.debug`,
//!   in the target's root first, then in the host's ([`debug_file`]).
//! - **`.gnu_debuglink`**: a file name (no `/`, no `..`) looked up beside the module,
//!   in its `.debug` folder and under `/usr/lib/debug`, its CRC-32 checked.
//! - **MiniDebugInfo** (`.gnu_debugdata`): the xz-compressed symbol table Fedora puts
//!   in its binaries ([`mini_debug_info`]).
//! - **debuginfod**: a server's debug file by build id, fetched into its cache before
//!   symbolization, never while samples are taken (`debuginfod`, feature
//!   `debuginfod`).
//! - **The vDSO**: its image copied out of the target's memory ([`vdso`]).
//! - **A perf map**: `/tmp/perf-<nspid>.map` in the target's root, where JIT runtimes
//!   name their generated code ([`perf_map`]).
//!
//! Every file is a target's, or named by one, and so hostile: opened with the reader's
//! safe open ([`open_in`]), read under the module budget, never mapped; [`lookup`] looks
//! for a stripped module's debug file.
//!
//! [`open_in`]: otel_ctx_reader::files::open_in

use std::fmt;

use otel_ctx_reader::files::{FileBudget, Root};

use crate::bytes::Bytes;
use crate::dwarf::Dwarf;
use crate::symbolize::SymbolTable;

pub(crate) mod debug_file;
#[cfg(feature = "debuginfod")]
pub(crate) mod debuginfod;
pub mod jvm;
pub(crate) mod lookup;
pub(crate) mod mini_debug_info;
pub(crate) mod perf_map;
pub(crate) mod vdso;

/// Where a module's names (or a frame's) came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SymbolSource {
    /// The module's own file: `.symtab`, `.dynsym` and DWARF.
    Module,
    /// A separate debug file named by the module's build id,
    /// `/usr/lib/debug/.build-id/xx/yyyy.debug`.
    BuildId {
        /// Its path.
        path: String,
        /// The root it was found in.
        root: Root,
    },
    /// The separate debug file the module's `.gnu_debuglink` names, its CRC checked.
    DebugLink {
        /// Its path.
        path: String,
        /// The root it was found in.
        root: Root,
    },
    /// The module's `.gnu_debugdata` (MiniDebugInfo): an xz-compressed ELF file with
    /// the function symbols `.dynsym` lacks.
    MiniDebugInfo,
    /// A debuginfod server's debug file (or executable), by build id.
    Debuginfod {
        /// The server.
        url: String,
        /// The file in the client's cache.
        path: String,
    },
    /// The vDSO's image, copied out of the target's memory.
    Vdso,
    /// A perf map, where a JIT runtime names its generated code.
    PerfMap {
        /// Its path in the target's root.
        path: String,
    },
}

impl fmt::Display for SymbolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Module => f.write_str("its own symbols"),
            Self::BuildId { path, root } => write!(f, "debug file {path} (build id, {root})"),
            Self::DebugLink { path, root } => write!(f, "debug file {path} (debuglink, {root})"),
            Self::MiniDebugInfo => f.write_str("MiniDebugInfo (.gnu_debugdata)"),
            Self::Debuginfod { url, path } => write!(f, "debuginfod {url} ({path})"),
            Self::Vdso => f.write_str("the vDSO image in memory"),
            Self::PerfMap { path } => write!(f, "perf map {path}"),
        }
    }
}

/// Why a frame is left `[unknown]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum UnknownCause {
    /// Nothing names the address: the module has symbols but none covers it, the
    /// module could not be read, or the address is in no module and no perf map names
    /// it.
    NoSymbols,
    /// A file was larger or slower to read than the budget allows (the module, its
    /// debug file, or a perf map read only in part).
    Budget,
    /// The module is stripped and no separate debug file was found (or the one found
    /// is not its own: another build id, a CRC that does not match).
    MissingDebugFile,
    /// The module is stripped and debuginfod was asked for its debug file, and failed.
    Debuginfod,
}

impl UnknownCause {
    /// Every cause, in order.
    pub const ALL: [Self; 4] = [
        Self::NoSymbols,
        Self::Budget,
        Self::MissingDebugFile,
        Self::Debuginfod,
    ];

    /// A short name (`"missing debug file"`), for summaries.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NoSymbols => "no symbols",
            Self::Budget => "budget",
            Self::MissingDebugFile => "missing debug file",
            Self::Debuginfod => "debuginfod failure",
        }
    }
}

impl fmt::Display for UnknownCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A symbol source that failed, or was read only in part: what the profile says, and
/// the cause its frames left `[unknown]` are counted under.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SymbolProblem {
    /// The module (its path in the target), or the perf map.
    pub subject: String,
    /// What went wrong, naming the file or the server.
    pub problem: String,
    /// The cause its unknown frames are counted under.
    pub cause: UnknownCause,
}

/// Why a module has no full names, and what its unknown frames are counted under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Missing {
    pub cause: UnknownCause,
    pub reason: String,
}

impl Missing {
    pub fn new(cause: UnknownCause, reason: impl Into<String>) -> Self {
        Self {
            cause,
            reason: reason.into(),
        }
    }
}

/// Names read from a source other than the module's own file.
pub(crate) struct DebugNames {
    pub source: SymbolSource,
    pub symbols: SymbolTable,
    /// Whether `symbols` is a full table (a `.symtab`), not only dynamic symbols.
    pub full: bool,
    pub dwarf: Option<Dwarf>,
    pub dwarf_note: Option<String>,
}

/// What looking for a module's debug file starts from.
pub(crate) struct Lookup<'a> {
    pub pid: u32,
    /// The module's path in the target.
    pub module_path: &'a str,
    pub build_id: Option<&'a [u8]>,
    /// `.gnu_debuglink`: a file name and the CRC-32 of the file.
    pub debuglink: Option<(String, u32)>,
    /// `.gnu_debugdata`, compressed.
    pub debugdata: Option<Bytes>,
    pub budget: FileBudget,
    pub debug_info: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_a_name() {
        for cause in UnknownCause::ALL {
            assert!(!cause.name().is_empty());
            assert_eq!(cause.to_string(), cause.name());
        }
    }
}
