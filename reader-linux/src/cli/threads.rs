//! Thread contexts in `show`: text and JSON.

use std::fmt::Write as _;

use otel_ctx_reader::tls::{SymbolTable, TlsError};
use otel_ctx_reader::{OwnedThreadContext, ThreadError, ThreadReader, ThreadReport};

use super::{json, text};

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What `show` learned of a process's threads.
pub enum Threads {
    /// No module exports `otel_thread_ctx_v1`.
    NotPublished,
    /// The slot could not be located, or the threads could not be listed.
    Failed(String),
    /// Every thread, read through `reader`.
    Read {
        /// The reader, which knows the resolution.
        reader: Box<ThreadReader>,
        /// One report per thread.
        reports: Vec<ThreadReport>,
    },
}

/// Reads every thread of `pid`.
pub fn read(pid: u32) -> Threads {
    let mut reader = match ThreadReader::open(pid) {
        Ok(reader) => reader,
        Err(ThreadError::Tls(TlsError::SymbolNotFound)) => return Threads::NotPublished,
        Err(e) => return Threads::Failed(e.to_string()),
    };
    match reader.read_all() {
        Ok(reports) => Threads::Read {
            reader: Box::new(reader),
            reports,
        },
        Err(e) => Threads::Failed(e.to_string()),
    }
}

fn table_name(table: SymbolTable) -> &'static str {
    match table {
        SymbolTable::Dynsym => "dynsym",
        SymbolTable::Symtab => "symtab",
    }
}

/// The text section: how the slot was found, then a row per thread.
pub fn text(threads: &Threads) -> String {
    let mut out = String::new();
    match threads {
        Threads::NotPublished => {
            out.push_str("threads    no module exports otel_thread_ctx_v1: no thread contexts\n")
        }
        Threads::Failed(e) => {
            let _ = writeln!(out, "threads    cannot be read: {e}");
        }
        Threads::Read { reader, reports } => {
            let r = reader.resolution();
            let _ = writeln!(
                out,
                "threads ({}) through otel_thread_ctx_v1 in {} ({}, {}, {} {})",
                reports.len(),
                r.defining_module,
                r.model.name(),
                table_name(r.symbol_table),
                r.libc.name(),
                r.machine.name(),
            );
            let mut rows = vec![[
                "  TID",
                "NAME",
                "TRACE_ID",
                "SPAN_ID",
                "FLAGS",
                "ATTRIBUTES",
            ]
            .map(String::from)
            .to_vec()];
            for report in reports {
                let mut row = vec![format!("  {}", report.tid), report.name.clone()];
                match &report.context {
                    Ok(Some(c)) => row.extend(context_cells(c)),
                    Ok(None) => row.push("-".into()),
                    Err(e) => row.push(format!("(unreadable: {e})")),
                }
                rows.push(row);
            }
            out.push_str(&text::table(&rows));
        }
    }
    out
}

fn context_cells(c: &OwnedThreadContext) -> Vec<String> {
    let attributes = c
        .attributes
        .iter()
        .map(|(k, v)| format!("{k}={}", text::shorten(v)))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        hex(&c.trace_id()),
        hex(&c.span_id()),
        format!("{:02x}", c.trace_flags()),
        attributes,
    ]
}

/// Appends `"thread_context": {...} | null, "threads": [...]`.
pub fn json(out: &mut String, threads: &Threads) {
    out.push_str("\"thread_context\": ");
    match threads {
        Threads::NotPublished => out.push_str("null, \"threads\": []"),
        Threads::Failed(e) => {
            out.push_str("{\"error\": ");
            json::string(out, e);
            out.push_str("}, \"threads\": []");
        }
        Threads::Read { reader, reports } => {
            let r = reader.resolution();
            out.push_str("{\"module\": ");
            json::string(out, &r.module);
            out.push_str(", \"defining_module\": ");
            json::string(out, &r.defining_module);
            let _ = write!(
                out,
                ", \"access_model\": \"{}\", \"symbol_table\": \"{}\", \"libc\": \"{}\", \"arch\": \"{}\"}}",
                r.model.name(),
                table_name(r.symbol_table),
                r.libc.name(),
                r.machine.name()
            );
            out.push_str(", \"threads\": [");
            for (i, report) in reports.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{{\"tid\": {}, \"name\": ", report.tid);
                json::string(out, &report.name);
                out.push_str(", \"context\": ");
                match &report.context {
                    Ok(Some(c)) => context_json(out, c),
                    Ok(None) => out.push_str("null"),
                    Err(e) => {
                        out.push_str("null, \"error\": ");
                        json::string(out, &e.to_string());
                    }
                }
                out.push('}');
            }
            out.push(']');
        }
    }
}

fn context_json(out: &mut String, c: &OwnedThreadContext) {
    let _ = write!(
        out,
        "{{\"trace_id\": \"{}\", \"span_id\": \"{}\", \"trace_flags\": {}, \"attributes\": {{",
        hex(&c.trace_id()),
        hex(&c.span_id()),
        c.trace_flags()
    );
    for (i, (k, v)) in c.attributes.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        json::string(out, k);
        out.push_str(": ");
        json::string(out, v);
    }
    out.push_str("}}");
}
