//! Looking for a module's debug file ([`complete`]): by build id, by `.gnu_debuglink`,
//! then MiniDebugInfo, in the target's root and then the host's.

use otel_ctx_reader::files::{open_in, Refusal, Root};

use super::{debug_file, mini_debug_info, Lookup, Missing, UnknownCause};
use crate::module::Names;

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
}
