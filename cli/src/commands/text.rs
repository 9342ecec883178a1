//! Text output: values on one line, durations, aligned tables.

use std::fmt::Write as _;
use std::io::Write as _;

use otel_ctx_reader::process::{OwnedKeyValue, OwnedValue};
use otel_ctx_reader::Snapshot;

/// Longest string shown whole in a table cell or a value line.
const MAX_SHOWN: usize = 120;

/// A value on one line (the codec's text form of a value), cut when it is long.
pub fn value(v: &OwnedValue) -> String {
    shorten(&v.to_string())
}

/// Cuts a long string at a character boundary and marks the cut.
pub fn shorten(s: &str) -> String {
    if s.chars().count() <= MAX_SHOWN {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(MAX_SHOWN - 1).collect();
    cut.push('…');
    cut
}

/// A duration in nanoseconds, as `42µs`, `850ms`, `12.4s`, `5m12s`, `3h04m` or `2d05h`.
pub fn duration(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ns / 1_000_000_000;
    match s {
        0 if ms == 0 => format!("{}µs", ns / 1000),
        0 => format!("{ms}ms"),
        1..=59 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Rows of cells, each column padded to its widest cell; the last column is not padded.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Attribute lines `  key  type  value`, with a heading.
pub fn attributes(out: &mut String, heading: &str, kvs: &[OwnedKeyValue]) {
    let _ = writeln!(out, "{heading} ({})", kvs.len());
    let rows: Vec<Vec<String>> = kvs
        .iter()
        .map(|kv| {
            vec![
                format!("  {}", kv.key),
                kv.value.type_name().to_owned(),
                value(&kv.value),
            ]
        })
        .collect();
    out.push_str(&table(&rows));
}

/// The whole context of `show`, and the header fields above it.
pub fn snapshot(s: &Snapshot, comm: &str, now_ns: u64) -> String {
    let mut out = String::new();
    let rows = vec![
        vec!["pid".to_owned(), format!("{} ({comm})", s.pid)],
        vec![
            "mapping".to_owned(),
            format!(
                "{} at {:#x}-{:#x}",
                s.mapping.name, s.mapping.start, s.mapping.end
            ),
        ],
        vec!["version".to_owned(), s.version.to_string()],
        vec![
            "published".to_owned(),
            format!(
                "{} ago (monotonic_published_at_ns {})",
                duration(s.age_ns(now_ns)),
                s.monotonic_published_at_ns
            ),
        ],
        vec![
            "payload".to_owned(),
            format!("{} bytes at {:#x}", s.payload_size, s.payload),
        ],
    ];
    out.push_str(&table(&rows));
    out.push('\n');
    attributes(&mut out, "resource", &s.context.resource);
    out.push('\n');
    attributes(&mut out, "attributes", &s.context.attributes);
    out
}

/// `one` when `n` is 1, else `many`: `1 scan`, `2 scans`.
pub const fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// Redraws a block of lines in place on a terminal.
#[derive(Default)]
pub struct Screen {
    lines: usize,
}

/// The terminal's width in columns (80 when it cannot be asked).
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .map(|size| usize::from(size.ws_col))
        .ok()
        .filter(|&cols| cols > 0)
        .unwrap_or(80)
}

impl Screen {
    /// Replaces the previous frame with `frame`. Lines are cut to the terminal's width:
    /// a wrapped line would take rows the next redraw does not move back over.
    pub fn draw(&mut self, frame: &str) {
        let width = terminal_width();
        let mut out = String::new();
        if self.lines > 0 {
            let _ = write!(out, "\x1b[{}A", self.lines);
        }
        out.push_str("\x1b[J");
        self.lines = 0;
        for line in frame.lines() {
            out.extend(line.chars().take(width.saturating_sub(1)));
            out.push('\n');
            self.lines += 1;
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }
}

/// `debuginfod: N of M debug files fetched` (and a newline), or nothing when none was
/// asked for.
pub fn debuginfod(fetches: &[otel_ctx_profile::DebuginfodFetch]) -> String {
    if fetches.is_empty() {
        return String::new();
    }
    let fetched = fetches.iter().filter(|f| f.outcome.is_ok()).count();
    let n = fetches.len() as u64;
    let what = plural(n, "debug file fetched", "debug files fetched");
    format!("debuginfod: {fetched} of {n} {what}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "scan", "scans"), "scan");
        assert_eq!(plural(0, "scan", "scans"), "scans");
        assert_eq!(plural(3, "process", "processes"), "processes");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(850_000_000), "850ms");
        assert_eq!(duration(42_000), "42µs");
        assert_eq!(duration(12_400_000_000), "12.4s");
        assert_eq!(duration(312_000_000_000), "5m12s");
        assert_eq!(
            duration(3 * 3600 * 1_000_000_000 + 240_000_000_000),
            "3h04m"
        );
        assert_eq!(
            duration(2 * 86_400 * 1_000_000_000 + 5 * 3_600_000_000_000),
            "2d05h"
        );
    }

    #[test]
    fn aligned() {
        let t = table(&[
            vec!["PID".into(), "COMMAND".into(), "X".into()],
            vec!["1".into(), "c".into(), "long value".into()],
        ]);
        assert_eq!(t, "PID  COMMAND  X\n1    c        long value\n");
    }

    #[test]
    fn long_values_are_cut() {
        let long = OwnedValue::String("x".repeat(500));
        assert!(
            value(&long).chars().count() <= MAX_SHOWN + 3,
            "{}",
            value(&long)
        );
        assert_eq!(value(&OwnedValue::String("plain".into())), "plain");
    }
}
