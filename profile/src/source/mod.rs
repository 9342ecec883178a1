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
//! safe open ([`open_in`]), read under the module budget, never mapped.

use std::fmt;

use otel_ctx_reader::files::{open_in, FileBudget, Refusal, Root};

use crate::module::DwarfContext;
use crate::module::{Bytes, Names};
use crate::symbolize::SymbolTable;

pub(crate) mod debug_file;
#[cfg(feature = "debuginfod")]
pub(crate) mod debuginfod;
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
    pub dwarf: Option<DwarfContext>,
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

/// Where separate debug files live (GDB's and elfutils' default debug directory).
pub(crate) const DEBUG_DIR: &str = "/usr/lib/debug";

/// `/usr/lib/debug/.build-id/xx/yyyy.debug` for build id `id`.
pub(crate) fn build_id_path(id: &[u8]) -> Option<String> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(format!(
        "{DEBUG_DIR}/.build-id/{}/{}.debug",
        crate::hex(&[*first]),
        crate::hex(rest)
    ))
}

/// The paths a `.gnu_debuglink` name is looked for at, for a module at `module_path`:
/// beside it, in its `.debug` folder, and under `/usr/lib/debug` with its folder.
pub(crate) fn debuglink_paths(module_path: &str, name: &str) -> Vec<String> {
    let dir = match module_path.rfind('/') {
        Some(0) => "",
        Some(at) => &module_path[..at],
        None => return Vec::new(),
    };
    vec![
        format!("{dir}/{name}"),
        format!("{dir}/.debug/{name}"),
        format!("{DEBUG_DIR}{dir}/{name}"),
    ]
}

/// The roots to look in: the target's first, then the host's when it is another.
fn roots(pid: u32) -> Vec<Root> {
    let same = |a: &str, b: &str| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    };
    if same(&format!("/proc/{pid}/root"), "/") {
        vec![Root::Target(pid)]
    } else {
        vec![Root::Target(pid), Root::Host]
    }
}

/// Why a debug file at a path was not used.
pub(crate) enum NotUsed {
    /// Nothing there.
    Absent,
    /// Something there, and a reason not to use it.
    Problem(Missing),
}

/// What a refused open says, for a file named by a module or a target.
pub(crate) fn refused(path: &str, root: Root, refusal: &Refusal) -> NotUsed {
    let what = match refusal {
        Refusal::Missing => return NotUsed::Absent,
        Refusal::NotRegular(kind) => format!("is {kind}, not a regular file"),
        other => other.to_string(),
    };
    NotUsed::Problem(Missing::new(
        UnknownCause::MissingDebugFile,
        format!("{path} ({root}) {what}"),
    ))
}

/// Looks for the debug file of a module whose own names are not complete, in the order
/// GDB and elfutils do: by build id, by debuglink, then MiniDebugInfo. What is found is
/// added to `names`; when nothing gives a full table, `names.missing` says why.
pub(crate) fn complete(names: &mut Names, lookup: &Lookup<'_>) {
    let mut problems: Vec<Missing> = Vec::new();
    let roots = roots(lookup.pid);
    let mut try_path = |names: &mut Names, path: &str, expect: debug_file::Expect| -> bool {
        for &root in &roots {
            match open_in(root, path) {
                Ok(opened) => match debug_file::load(opened, path, root, expect, lookup) {
                    Ok(found) => {
                        names.absorb(found);
                        return true;
                    }
                    Err(problem) => problems.push(problem),
                },
                Err(refusal) => {
                    if let NotUsed::Problem(problem) = refused(path, root, &refusal) {
                        problems.push(problem);
                    }
                }
            }
        }
        false
    };
    if let Some(id) = lookup.build_id {
        if let Some(path) = build_id_path(id) {
            try_path(names, &path, debug_file::Expect::BuildId(id));
        }
    }
    if names.wants_debug_file(lookup.debug_info) {
        if let Some((name, crc)) = &lookup.debuglink {
            for path in debuglink_paths(lookup.module_path, name) {
                if try_path(names, &path, debug_file::Expect::Crc(*crc)) {
                    break;
                }
            }
        }
    }
    if !names.full {
        if let Some(compressed) = &lookup.debugdata {
            match mini_debug_info::load(compressed, lookup.budget) {
                Ok(found) => names.absorb(found),
                Err(problem) => problems.push(problem),
            }
        }
    }
    if !names.full {
        names.missing = Some(problems.into_iter().next().unwrap_or_else(|| {
            let mut looked = Vec::new();
            if let Some(path) = lookup.build_id.and_then(build_id_path) {
                looked.push(path);
            }
            if let Some((name, _)) = &lookup.debuglink {
                looked.push(format!("debuglink {name}"));
            }
            let reason = match looked.is_empty() {
                true => "stripped, with no build id or debuglink to find its debug file by".into(),
                false => format!("stripped, and no debug file at {}", looked.join(" or ")),
            };
            Missing::new(UnknownCause::MissingDebugFile, reason)
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_and_debuglink_paths() {
        assert_eq!(
            build_id_path(&[0x93, 0xac, 0x61]).as_deref(),
            Some("/usr/lib/debug/.build-id/93/ac61.debug")
        );
        assert_eq!(build_id_path(&[0x93]), None);
        assert_eq!(build_id_path(&[]), None);
        assert_eq!(
            debuglink_paths("/usr/lib/libx.so.1", "libx.debug"),
            [
                "/usr/lib/libx.debug",
                "/usr/lib/.debug/libx.debug",
                "/usr/lib/debug/usr/lib/libx.debug"
            ]
        );
        assert_eq!(
            debuglink_paths("/libx.so", "libx.debug"),
            [
                "/libx.debug",
                "/.debug/libx.debug",
                "/usr/lib/debug/libx.debug"
            ]
        );
        assert!(debuglink_paths("relative", "x.debug").is_empty());
    }

    #[test]
    fn every_cause_has_a_name() {
        for cause in UnknownCause::ALL {
            assert!(!cause.name().is_empty());
            assert_eq!(cause.to_string(), cause.name());
        }
    }
}
