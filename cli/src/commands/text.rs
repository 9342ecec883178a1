//! Text output: values on one line, durations, aligned tables.

use std::fmt::Write as _;

use otel_ctx_reader::{OwnedKeyValue, OwnedValue, Snapshot};

/// Longest string shown whole in a table cell or a value line.
const MAX_SHOWN: usize = 120;

/// A value on one line: strings as they are at the top level and quoted inside arrays and
/// kvlists, bytes in hex.
pub fn value(v: &OwnedValue) -> String {
    let mut out = String::new();
    match v {
        OwnedValue::String(s) => out.push_str(&shorten(s)),
        other => nested(&mut out, other),
    }
    out
}

fn nested(out: &mut String, v: &OwnedValue) {
    match v {
        OwnedValue::Empty => out.push_str("(empty)"),
        OwnedValue::String(s) => {
            let _ = write!(out, "{:?}", shorten(s));
        }
        OwnedValue::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        OwnedValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        OwnedValue::Double(d) => {
            let _ = write!(out, "{d:?}");
        }
        OwnedValue::Bytes(b) => {
            out.push_str("0x");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
        OwnedValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                nested(out, item);
            }
            out.push(']');
        }
        OwnedValue::KvList(kvs) => {
            out.push('{');
            for (i, kv) in kvs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{}: ", kv.key);
                nested(out, &kv.value);
            }
            out.push('}');
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn nested_values() {
        let v = OwnedValue::Array(vec![
            OwnedValue::String("a".into()),
            OwnedValue::Bytes(vec![0, 255]),
            OwnedValue::KvList(vec![OwnedKeyValue {
                key: "k".into(),
                value: OwnedValue::Double(1.0),
            }]),
        ]);
        assert_eq!(value(&v), r#"["a", 0x00ff, {k: 1.0}]"#);
        assert_eq!(value(&OwnedValue::String("plain".into())), "plain");
    }
}
