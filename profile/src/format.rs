//! The file formats a [`Profile`] is written in, and the one way to pick one from a
//! file's name.

use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;

use crate::{FoldedOptions, Profile};

/// A profile's file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Gzipped `profile.proto`, which `go tool pprof`, Pyroscope and Grafana read.
    Pprof,
    /// The folded text of flamegraph.pl (`root;caller;leaf count`).
    Folded,
    /// An SVG flame graph.
    Svg,
}

impl Format {
    /// Every format, in the order the names list them.
    pub const ALL: [Self; 3] = [Self::Pprof, Self::Folded, Self::Svg];

    /// The format a file's name asks for: `.pb.gz` (or `.pb`, `.pprof`), `.folded` (or
    /// `.txt`), `.svg`.
    pub fn of_path(path: &Path) -> Option<Self> {
        Self::of_name(path).map(|(format, _)| format)
    }

    /// The format a file's name asks for, with the extension that says it (its dot
    /// included), when the name is more than that extension.
    pub fn of_name(path: &Path) -> Option<(Self, &'static str)> {
        use std::os::unix::ffi::OsStrExt;
        // Longest first: `.pb.gz` before `.pb`.
        const EXTENSIONS: [(&str, Format); 6] = [
            (".pb.gz", Format::Pprof),
            (".pprof", Format::Pprof),
            (".pb", Format::Pprof),
            (".folded", Format::Folded),
            (".txt", Format::Folded),
            (".svg", Format::Svg),
        ];
        let name = path.file_name()?.as_bytes();
        EXTENSIONS
            .into_iter()
            .find(|(ext, _)| name.len() > ext.len() && name.ends_with(ext.as_bytes()))
            .map(|(extension, format)| (format, extension))
    }

    /// The extension of its files, without the dot.
    pub const fn extension(self) -> &'static str {
        match self {
            Self::Pprof => "pb.gz",
            Self::Folded => "folded",
            Self::Svg => "svg",
        }
    }

    /// `pprof`, `folded` or `svg`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pprof => "pprof",
            Self::Folded => "folded",
            Self::Svg => "svg",
        }
    }

    /// What a file of the format is, for people: `pprof profile`, `folded stacks`,
    /// `flame graph`.
    pub const fn description(self) -> &'static str {
        match self {
            Self::Pprof => "pprof profile",
            Self::Folded => "folded stacks",
            Self::Svg => "flame graph",
        }
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("{s:?}: the formats are pprof, folded and svg"))
    }
}

impl Profile {
    /// Writes the profile in `format` (`folded` says what the root frame of folded text
    /// and SVG is).
    pub fn write(&self, format: Format, folded: &FoldedOptions, out: impl Write) -> io::Result<()> {
        match format {
            Format::Pprof => self.write_pprof(out),
            Format::Folded => self.write_folded(folded, out),
            Format::Svg => self.write_svg(folded, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_name_and_path() {
        for (name, format) in [
            ("cpu.pb.gz", Format::Pprof),
            ("x.pprof", Format::Pprof),
            ("x.folded", Format::Folded),
            ("x.txt", Format::Folded),
            ("flame.svg", Format::Svg),
        ] {
            assert_eq!(Format::of_path(Path::new(name)), Some(format), "{name}");
        }
        assert_eq!(Format::of_path(Path::new("cpu.data")), None);
        assert_eq!(Format::of_path(Path::new(".svg")), None);
        assert_eq!(
            Format::of_name(Path::new("dir/cpu.pb.gz")),
            Some((Format::Pprof, ".pb.gz"))
        );
        assert_eq!("svg".parse(), Ok(Format::Svg));
        assert!("png"
            .parse::<Format>()
            .unwrap_err()
            .contains("pprof, folded and svg"));
        for format in Format::ALL {
            assert_eq!(format.name().parse(), Ok(format));
        }
    }
}
