//! Where `otel-ctx profile` writes its profiles, and in which format: the one rule that
//! turns `-o`, `--format` and the number of processes profiled into a file per process.
//!
//! - No `-o`: `profile.<pid>.<ext>` in the current directory.
//! - `-o DIR` where `DIR` is a directory, or a name ending in `/`:
//!   `DIR/profile.<pid>.<ext>`.
//! - `-o NAME`, one process: `NAME` itself (`-`: standard output).
//! - `-o NAME`, many processes (`--all`): `NAME` with the process id before its
//!   extension, beside it: `out.svg` gives `out.<pid>.svg`, `cpu.pb.gz` `cpu.<pid>.pb.gz`.
//!
//! The format is `--format` when given, else the one the name's extension says (`.pb.gz`,
//! `.pb`, `.pprof`: pprof; `.folded`, `.txt`: folded text; `.svg`: a flame graph), for
//! every file written; pprof for a directory, folded text for standard output. A missing
//! directory is created before sampling starts.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use otel_ctx_profile::Format;

/// The format a file's name asks for, and the extension that says it (with its dot).
fn format_of(path: &Path) -> Option<(Format, &'static str)> {
    Format::of_name(path)
}

/// Where each process's profile goes, and in which format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    place: Place,
    format: Format,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// One file, as named (`-`: standard output).
    File(PathBuf),
    /// `profile.<pid>.<ext>` in this directory (empty: the current one).
    Directory(PathBuf),
    /// `<stem>.<pid><extension>` in `dir`: the name given, with the process id in it.
    PerProcess {
        dir: PathBuf,
        stem: PathBuf,
        extension: String,
    },
}

impl Outputs {
    /// Applies the rule (in this module's documentation) to `-o` (`output`) and
    /// `--format` (`format`); `many` when more than one process may be written (`--all`),
    /// `is_dir` when `output` names an existing directory. The error says what to give
    /// instead.
    pub fn new(
        output: Option<&Path>,
        format: Option<Format>,
        many: bool,
        is_dir: bool,
    ) -> Result<Self, String> {
        let Some(path) = output else {
            return Ok(Self {
                place: Place::Directory(PathBuf::new()),
                format: format.unwrap_or(Format::Pprof),
            });
        };
        if path.as_os_str() == "-" {
            if many {
                return Err(
                    "-o -: --all writes a file per process: give a directory (such as \
                     profiles/) or a file name (out.svg writes out.<pid>.svg)"
                        .to_owned(),
                );
            }
            return Ok(Self {
                place: Place::File(path.to_owned()),
                format: format.unwrap_or(Format::Folded),
            });
        }
        if is_dir || path.as_os_str().as_bytes().ends_with(b"/") {
            return Ok(Self {
                place: Place::Directory(path.to_owned()),
                format: format.unwrap_or(Format::Pprof),
            });
        }
        let named = format_of(path);
        let Some(format) = format.or(named.map(|(format, _)| format)) else {
            return Err(format!(
                "-o {}: name it .pb.gz, .folded or .svg, or give --format{}",
                path.display(),
                if many {
                    " (or end it with / for a directory)"
                } else {
                    ""
                }
            ));
        };
        if !many {
            return Ok(Self {
                place: Place::File(path.to_owned()),
                format,
            });
        }
        // The process id goes before the extension that names a format, else before the
        // name's last extension, else at the end.
        let name = path.file_name().unwrap_or(path.as_os_str()).as_bytes();
        let cut = match named {
            Some((_, extension)) => name.len() - extension.len(),
            None => match name.iter().rposition(|&b| b == b'.') {
                Some(dot) if dot > 0 => dot,
                _ => name.len(),
            },
        };
        let (stem, extension) = name.split_at(cut);
        Ok(Self {
            place: Place::PerProcess {
                dir: path.parent().map(Path::to_owned).unwrap_or_default(),
                stem: PathBuf::from(std::ffi::OsStr::from_bytes(stem)),
                extension: String::from_utf8_lossy(extension).into_owned(),
            },
            format,
        })
    }

    /// The format of every file written.
    pub const fn format(&self) -> Format {
        self.format
    }

    /// The directory the files go into, to be created when missing before the profile is
    /// taken (a profile of hours is not to be lost to a missing directory at the end);
    /// `None` for the current directory and standard output.
    pub fn directory(&self) -> Option<&Path> {
        let dir = match &self.place {
            Place::File(path) if path.as_os_str() == "-" => return None,
            Place::File(path) => path.parent()?,
            Place::Directory(dir) | Place::PerProcess { dir, .. } => dir,
        };
        (!dir.as_os_str().is_empty()).then_some(dir)
    }

    /// Where the profile of process `pid` goes (`-`: standard output).
    pub fn path(&self, pid: u32) -> PathBuf {
        match &self.place {
            Place::File(path) => path.clone(),
            Place::Directory(dir) => dir.join(format!("profile.{pid}.{}", self.format.extension())),
            Place::PerProcess {
                dir,
                stem,
                extension,
            } => {
                let mut name = stem.clone().into_os_string();
                name.push(format!(".{pid}{extension}"));
                dir.join(name)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(o: Option<&str>, format: Option<Format>, many: bool, is_dir: bool) -> Outputs {
        Outputs::new(o.map(Path::new), format, many, is_dir).expect("a plan")
    }

    fn files(o: Option<&str>, format: Option<Format>, many: bool) -> (String, Format) {
        let plan = plan(o, format, many, false);
        (plan.path(42).display().to_string(), plan.format())
    }

    #[test]
    fn without_o_the_current_directory() {
        for many in [false, true] {
            assert_eq!(
                files(None, None, many),
                ("profile.42.pb.gz".into(), Format::Pprof)
            );
            assert_eq!(
                files(None, Some(Format::Svg), many),
                ("profile.42.svg".into(), Format::Svg)
            );
            assert_eq!(plan(None, None, many, false).directory(), None);
        }
    }

    #[test]
    fn one_process_the_name_as_given() {
        for (name, format) in [
            ("cpu.pb.gz", Format::Pprof),
            ("cpu.pb", Format::Pprof),
            ("cpu.pprof", Format::Pprof),
            ("x.folded", Format::Folded),
            ("x.txt", Format::Folded),
            ("out/flame.svg", Format::Svg),
            ("-", Format::Folded),
        ] {
            assert_eq!(files(Some(name), None, false), (name.into(), format));
        }
        assert_eq!(
            files(Some("cpu.data"), Some(Format::Pprof), false),
            ("cpu.data".into(), Format::Pprof)
        );
        assert_eq!(plan(Some("cpu.svg"), None, false, false).directory(), None);
        assert_eq!(plan(Some("-"), None, false, false).directory(), None);
        assert_eq!(
            plan(Some("out/flame.svg"), None, false, false).directory(),
            Some(Path::new("out"))
        );
        let unknown = Outputs::new(Some(Path::new("cpu.data")), None, false, false);
        assert!(unknown.unwrap_err().contains("--format"));
        // A name that is only an extension names no format.
        assert!(Outputs::new(Some(Path::new(".svg")), None, false, false).is_err());
    }

    #[test]
    fn many_processes_the_pid_before_the_extension() {
        for (name, expected, format) in [
            ("out.svg", "out.42.svg", Format::Svg),
            ("cpu.pb.gz", "cpu.42.pb.gz", Format::Pprof),
            ("d/run.1.folded", "d/run.1.42.folded", Format::Folded),
            ("/tmp/x.pprof", "/tmp/x.42.pprof", Format::Pprof),
        ] {
            assert_eq!(
                files(Some(name), None, true),
                (expected.into(), format),
                "{name}"
            );
        }
        assert_eq!(plan(Some("out.svg"), None, true, false).directory(), None);
        assert_eq!(
            plan(Some("d/run.1.folded"), None, true, false).directory(),
            Some(Path::new("d"))
        );
        // --format names the format of every file; the name keeps its own extension.
        assert_eq!(
            files(Some("out.svg"), Some(Format::Folded), true),
            ("out.42.svg".into(), Format::Folded)
        );
        assert_eq!(
            files(Some("cpu.data"), Some(Format::Pprof), true),
            ("cpu.42.data".into(), Format::Pprof)
        );
        assert_eq!(
            files(Some("cpu"), Some(Format::Svg), true),
            ("cpu.42".into(), Format::Svg)
        );
        let unnamed = Outputs::new(Some(Path::new("cpu")), None, true, false).unwrap_err();
        assert!(
            unnamed.contains("--format") && unnamed.contains("/"),
            "{unnamed}"
        );
        let stdout = Outputs::new(Some(Path::new("-")), None, true, false).unwrap_err();
        assert!(stdout.contains("out.<pid>.svg"), "{stdout}");
    }

    #[test]
    fn a_directory_when_it_is_one_or_ends_with_a_slash() {
        for many in [false, true] {
            let existing = plan(Some("profiles"), None, many, true);
            assert_eq!(existing.path(42), Path::new("profiles/profile.42.pb.gz"));
            assert_eq!(existing.directory(), Some(Path::new("profiles")));
            // A directory named like a file is still a directory.
            let named = plan(Some("out.svg"), None, many, true);
            assert_eq!(named.path(7), Path::new("out.svg/profile.7.pb.gz"));
            let slash = plan(Some("new/"), Some(Format::Svg), many, false);
            assert_eq!(slash.path(42), Path::new("new/profile.42.svg"));
            assert_eq!(slash.format(), Format::Svg);
            assert_eq!(slash.directory(), Some(Path::new("new/")));
        }
    }
}
