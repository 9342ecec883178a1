//! Where a profiler writes its profiles, and in which format: the one rule that turns an
//! output name (`otel-ctx profile -o`), a format and the number of processes profiled
//! into a file per process, and the check that each can be written, made before sampling
//! starts (a profile of hours is not to be lost to a path that cannot be written at the
//! end).
//!
//! - No name: `profile.<pid>.<ext>` in the current directory.
//! - `DIR` where `DIR` is a directory, or a name ending in `/`:
//!   `DIR/profile.<pid>.<ext>`.
//! - `NAME`, one process: `NAME` itself (`-`: standard output).
//! - `NAME`, many processes: `NAME` with the process id before its extension, beside
//!   it: `out.svg` gives `out.<pid>.svg`, `cpu.pb.gz` `cpu.<pid>.pb.gz`.
//!
//! The format is the one given when there is one, else the one the name's extension says
//! (`.pb.gz`, `.pb`, `.pprof`: pprof; `.folded`, `.txt`: folded text; `.svg`: a flame
//! graph), for every file written; pprof for a directory, folded text for standard
//! output. [`Outputs::prepare`] makes a missing directory and checks that the files can
//! be created; [`check_writable`] checks one file (such as a file of OTLP requests).

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::Format;

/// The format a file's name asks for, and the extension that says it (with its dot).
fn format_of(path: &Path) -> Option<(Format, &'static str)> {
    Format::of_name(path)
}

/// Why an output cannot be written, found before sampling starts.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutputError {
    /// A part of the path that has to be a directory is not one (a file, say).
    NotADirectory {
        /// The output.
        path: PathBuf,
        /// The part that is not a directory.
        part: PathBuf,
    },
    /// The directory could not be created.
    CreateDirectory {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file (or a file in the directory) could not be created or opened for writing.
    Write {
        /// The file, or the directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADirectory { path, part } if path == part => {
                write!(f, "{}: not a directory", path.display())
            }
            Self::NotADirectory { path, part } => write!(
                f,
                "{}: {} is not a directory",
                path.display(),
                part.display()
            ),
            Self::CreateDirectory { path, source } => {
                write!(
                    f,
                    "{}: cannot create the directory: {source}",
                    path.display()
                )
            }
            Self::Write { path, source } => {
                write!(f, "{}: cannot write there: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotADirectory { .. } => None,
            Self::CreateDirectory { source, .. } | Self::Write { source, .. } => Some(source),
        }
    }
}

/// The first part of `path` (itself included) that exists and is not a directory.
fn not_a_directory(path: &Path) -> Option<PathBuf> {
    // Rebuilt part by part: `a/file/` has no ancestor `a/file` of its own.
    let mut part = PathBuf::new();
    for component in path.components() {
        part.push(component);
        if std::fs::metadata(&part).is_ok_and(|m| !m.is_dir()) {
            return Some(part);
        }
    }
    None
}

/// What a failed creation at `looked` (for the output `named`) means: a part of
/// `looked` that is not a directory, said as such, else `other` of the system's error.
fn refused(
    looked: &Path,
    named: &Path,
    source: io::Error,
    other: impl FnOnce(io::Error) -> OutputError,
) -> OutputError {
    let not_dir = matches!(
        source.kind(),
        io::ErrorKind::NotADirectory | io::ErrorKind::AlreadyExists
    );
    match not_dir.then(|| not_a_directory(looked)).flatten() {
        Some(part) => OutputError::NotADirectory {
            path: named.to_owned(),
            part,
        },
        None => other(source),
    }
}

/// Checks that the file `path` can be written, as the write at the end will: a file that
/// exists is opened for writing (not truncated; a FIFO or a device only looked at, so
/// that nothing blocks); one that does not is created, then removed.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    let write = |path, source| OutputError::Write { path, source };
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.is_dir() {
            let source = io::Error::from(io::ErrorKind::IsADirectory);
            return Err(write(path.to_owned(), source));
        }
        if !meta.is_file() {
            return Ok(());
        }
        return OpenOptions::new()
            .write(true)
            .open(path)
            .map(drop)
            .map_err(|e| refused(path, path, e, |e| write(path.to_owned(), e)));
    }
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => {
            drop(file);
            std::fs::remove_file(path).map_err(|e| write(path.to_owned(), e))
        }
        Err(e) => Err(refused(path, path, e, |e| write(path.to_owned(), e))),
    }
}

/// Makes the directory `dir` of `output` when it is missing; an error names `output`.
fn make_directory(dir: &Path, output: &Path) -> Result<(), OutputError> {
    std::fs::create_dir_all(dir).map_err(|source| {
        refused(dir, output, source, |source| OutputError::CreateDirectory {
            path: dir.to_owned(),
            source,
        })
    })
}

/// Makes the directory `dir` of `output` when it is missing, and checks that a file can
/// be created in it (one is, then removed).
fn prepare_directory(dir: &Path, output: &Path) -> Result<(), OutputError> {
    if !dir.as_os_str().is_empty() {
        make_directory(dir, output)?;
    }
    let base = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let probe = base.join(format!(".write-check.{}", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(file) => {
            drop(file);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(source) => Err(OutputError::Write {
            path: base.to_owned(),
            source,
        }),
    }
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
    /// Applies the rule (in this module's documentation) to the output's name (`output`,
    /// such as `-o`'s) and the format asked for (`format`); `many` when more than one process may be written (`--all`),
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
    /// taken ([`prepare`](Self::prepare)); `None` for the current directory and standard
    /// output.
    pub fn directory(&self) -> Option<&Path> {
        let dir = match &self.place {
            Place::File(path) if path.as_os_str() == "-" => return None,
            Place::File(path) => path.parent()?,
            Place::Directory(dir) | Place::PerProcess { dir, .. } => dir,
        };
        (!dir.as_os_str().is_empty()).then_some(dir)
    }

    /// Before sampling starts: makes the directory the files go into when it is missing,
    /// and checks that the file (or a file in the directory) can be created, so that what
    /// would fail at the end fails now. Nothing for standard output.
    pub fn prepare(&self) -> Result<(), OutputError> {
        match &self.place {
            Place::File(path) if path.as_os_str() == "-" => Ok(()),
            Place::File(path) => {
                if let Some(dir) = self.directory() {
                    make_directory(dir, path)?;
                }
                check_writable(path)
            }
            Place::Directory(dir) => prepare_directory(dir, dir),
            Place::PerProcess {
                dir,
                stem,
                extension,
            } => {
                let mut name = stem.clone().into_os_string();
                name.push(extension);
                prepare_directory(dir, &dir.join(name))
            }
        }
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

    /// A directory of this test's own under the temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    }

    fn prepare(o: &Path, many: bool) -> Result<(), OutputError> {
        let format = Some(Format::Svg);
        Outputs::new(Some(o), format, many, o.is_dir())
            .expect("a plan")
            .prepare()
    }

    #[test]
    fn what_cannot_be_written_is_said_before_sampling() {
        let dir = scratch("refused");
        let file = dir.join("plain");
        std::fs::write(&file, "kept").unwrap();
        // A file where a directory has to be: said as such, for one file and for many.
        let under = file.join("x.svg");
        for many in [false, true] {
            let e = prepare(&under, many).unwrap_err();
            assert!(matches!(e, OutputError::NotADirectory { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!("{}: {} is not a directory", under.display(), file.display())
            );
        }
        let slash = PathBuf::from(format!("{}/", file.display()));
        for many in [false, true] {
            let e = prepare(&slash, many).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("{}: not a directory", slash.display())
            );
        }
        // /proc takes no new files: the error the write would have met, now.
        let e = prepare(Path::new("/proc/x.svg"), false).unwrap_err();
        assert!(matches!(e, OutputError::Write { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("/proc/x.svg: cannot write there: "),
            "{e}"
        );
        // A directory is no file to write.
        let e = check_writable(&dir).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn what_can_be_written_is_left_as_it_was() {
        let dir = scratch("accepted");
        // A missing directory is made; the file itself is not left behind.
        let new = dir.join("new/flame.svg");
        prepare(&new, false).expect("a new directory");
        assert!(dir.join("new").is_dir() && !new.exists());
        for many in [false, true] {
            prepare(&dir.join("more/"), many).expect("a directory");
            prepare(&dir.join("out.svg"), many).expect("a file name");
        }
        let probes = std::fs::read_dir(dir.join("more")).unwrap().count();
        assert_eq!(probes, 0, "the check leaves no file");
        // An existing file is not truncated; a device is only looked at.
        let kept = dir.join("kept.svg");
        std::fs::write(&kept, "kept").unwrap();
        prepare(&kept, false).expect("an existing file");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "kept");
        check_writable(Path::new("/dev/null")).expect("a device");
        let stdout = Outputs::new(Some(Path::new("-")), None, false, false).unwrap();
        stdout.prepare().expect("standard output");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
