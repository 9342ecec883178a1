//! Thread contexts in `show`: text and JSON.

use std::fmt::Write as _;

use otel_ctx_codec::hex::encode as hex;

use otel_ctx_reader::thread::tls::SymbolTable;
use otel_ctx_reader::thread::{OwnedThreadContext, ThreadReport};
use otel_ctx_reader::ProcessMaps;
use otel_ctx_sampler::Method;

use serde::Serialize;

use super::{json, text, Failure};

/// What `show` learned of a process's threads: the sampler's list of them.
pub use otel_ctx_sampler::list::ThreadList as Threads;

/// Reads every thread of the process of `maps` (see [`Threads::read`]).
pub fn read(maps: ProcessMaps, raw_keys: bool, method: Method) -> Result<Threads, Failure> {
    Threads::read(maps, raw_keys, method).map_err(|e| Failure::Unusable(e.to_string()))
}

fn table_name(table: SymbolTable) -> &'static str {
    match table {
        SymbolTable::Dynsym => "dynsym",
        SymbolTable::Symtab => "symtab",
    }
}

/// The text section: how the slot was found, then a row per thread. Why a thread could
/// not be read is said below the table, once per reason, so that the rows stay short.
pub fn text(threads: &Threads) -> String {
    let mut out = String::new();
    match threads {
        Threads::NotPublished { .. } => {
            out.push_str("threads    no module exports otel_thread_ctx_v1: no thread contexts\n")
        }
        Threads::Failed(e) => {
            let _ = writeln!(out, "threads    cannot be read: {e}");
        }
        Threads::Read { reader, reports } => {
            let r = reader.resolution();
            let _ = writeln!(
                out,
                "threads ({}) through otel_thread_ctx_v1 in {} ({}, {}, {} {}), schema {}",
                reports.len(),
                r.defining_module,
                r.model.name(),
                table_name(r.symbol_table),
                r.libc.name(),
                r.machine.name(),
                reader.schema_version().unwrap_or("(none announced)"),
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
            let mut reasons: Vec<(String, Vec<u32>)> = Vec::new();
            for report in reports {
                let mut row = vec![format!("  {}", report.tid), report.name.clone()];
                match &report.context {
                    Ok(Some(c)) => row.extend(context_cells(c)),
                    Ok(None) => row.push("-".into()),
                    Err(e) => {
                        let reason = e.to_string();
                        let n = match reasons.iter().position(|(r, _)| *r == reason) {
                            Some(n) => n,
                            None => {
                                reasons.push((reason, Vec::new()));
                                reasons.len() - 1
                            }
                        };
                        reasons[n].1.push(report.tid);
                        row.push(format!("(unreadable [{}])", n + 1));
                    }
                }
                rows.push(row);
            }
            out.push_str(&text::table(&rows));
            for (n, (reason, tids)) in reasons.iter().enumerate() {
                let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
                let _ = writeln!(out, "  [{}] {reason} (thread {})", n + 1, tids.join(", "));
            }
        }
    }
    for skipped in threads.skipped() {
        let _ = writeln!(out, "  skipped {skipped}");
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

/// The `thread_context` object of `show --json`: how `otel_thread_ctx_v1` was found, or
/// why it could not be.
#[derive(Serialize)]
#[serde(untagged)]
pub enum SlotJson<'a> {
    /// The slot was located.
    Located {
        /// The module whose relocation (or local-exec code) the reader used.
        module: &'a str,
        /// The module that defines the symbol.
        defining_module: &'a str,
        /// The TLS access model.
        access_model: &'static str,
        /// `dynsym` or `symtab`.
        symbol_table: &'static str,
        /// The C library whose DTV layout was assumed.
        libc: &'static str,
        /// The architecture.
        arch: &'static str,
        /// `threadlocal.schema_version` as the process context announced it.
        schema_version: Option<&'a str>,
    },
    /// The slot could not be located, or the threads could not be listed.
    Failed {
        /// Why.
        error: &'a str,
    },
}

/// One element of `skipped_modules` in `show --json`: an executable mapping whose file
/// was not analysed.
#[derive(Serialize)]
pub struct SkippedJson {
    /// The path maps shows.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

/// The `skipped_modules` of `show --json`.
pub fn skipped_json(threads: &Threads) -> Vec<SkippedJson> {
    threads
        .skipped()
        .iter()
        .map(|s| SkippedJson {
            path: s.path.clone(),
            reason: s.reason.to_string(),
        })
        .collect()
}

/// One element of `threads` in `show --json`.
#[derive(Serialize)]
pub struct ThreadJson<'a> {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub name: &'a str,
    /// The context; `None` when none is attached or it could not be read.
    pub context: Option<ContextJson<'a>>,
    /// Why the context could not be read; the key is absent when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<'a> ThreadJson<'a> {
    /// The object for one thread.
    pub fn new(report: &'a ThreadReport) -> Self {
        let (context, error) = match &report.context {
            Ok(context) => (context.as_ref().map(ContextJson::new), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Self {
            tid: report.tid,
            name: &report.name,
            context,
            error,
        }
    }
}

/// A thread's context in `show --json`.
#[derive(Serialize)]
pub struct ContextJson<'a> {
    /// Lowercase hex, 32 digits.
    pub trace_id: String,
    /// Lowercase hex, 16 digits.
    pub span_id: String,
    /// The W3C trace flags byte.
    pub trace_flags: u8,
    /// Attribute name to value.
    pub attributes: json::StringPairs<'a>,
}

impl<'a> ContextJson<'a> {
    /// The object for one context.
    pub fn new(c: &'a OwnedThreadContext) -> Self {
        Self {
            trace_id: hex(&c.trace_id()),
            span_id: hex(&c.span_id()),
            trace_flags: c.trace_flags(),
            attributes: json::StringPairs(&c.attributes),
        }
    }
}

/// The `thread_context` and `threads` members of `show --json`: `null` and `[]` when
/// no module exports the symbol, `{"error": ...}` and `[]` when it cannot be located.
pub fn json(threads: &Threads) -> (Option<SlotJson<'_>>, Vec<ThreadJson<'_>>) {
    match threads {
        Threads::NotPublished { .. } => (None, Vec::new()),
        Threads::Failed(e) => (Some(SlotJson::Failed { error: e }), Vec::new()),
        Threads::Read { reader, reports } => {
            let r = reader.resolution();
            let slot = SlotJson::Located {
                module: &r.module,
                defining_module: &r.defining_module,
                access_model: r.model.name(),
                symbol_table: table_name(r.symbol_table),
                libc: r.libc.name(),
                arch: r.machine.name(),
                schema_version: reader.schema_version(),
            };
            (Some(slot), reports.iter().map(ThreadJson::new).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use json::keys;

    #[test]
    fn thread_shapes() {
        let attributes = [
            ("http.route".to_owned(), "/api/cart".to_owned()),
            ("http.request.method".to_owned(), "GET".to_owned()),
        ];
        let threads = [
            ThreadJson {
                tid: 4242,
                name: "checkout",
                context: None,
                error: None,
            },
            ThreadJson {
                tid: 4245,
                name: "worker-0",
                context: Some(ContextJson {
                    trace_id: hex(&[0x4b; 16]),
                    span_id: hex(&[0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]),
                    trace_flags: 1,
                    attributes: json::StringPairs(&attributes),
                }),
                error: None,
            },
            ThreadJson {
                tid: 4246,
                name: "worker-1",
                context: None,
                error: Some("cannot read the record header".into()),
            },
        ];
        let out = serde_json::to_string(&threads).unwrap();
        assert_eq!(
            keys(&out),
            [
                "tid",
                "name",
                "context",
                "tid",
                "name",
                "context",
                "trace_id",
                "span_id",
                "trace_flags",
                "attributes",
                "http.route",
                "http.request.method",
                "tid",
                "name",
                "context",
                "error",
            ]
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            serde_json::json!([
                {"tid": 4242, "name": "checkout", "context": null},
                {"tid": 4245, "name": "worker-0", "context": {
                    "trace_id": "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b",
                    "span_id": "00f067aa0ba902b7",
                    "trace_flags": 1,
                    "attributes": {"http.route": "/api/cart", "http.request.method": "GET"}
                }},
                {"tid": 4246, "name": "worker-1", "context": null,
                 "error": "cannot read the record header"}
            ])
        );
    }

    #[test]
    fn slot_shapes() {
        let located = SlotJson::Located {
            module: "/usr/bin/checkout",
            defining_module: "/usr/lib/libotel.so",
            access_model: "local-exec",
            symbol_table: "dynsym",
            libc: "glibc",
            arch: "x86_64",
            schema_version: Some("tlsdesc_v1_dev"),
        };
        let out = serde_json::to_string(&located).unwrap();
        assert_eq!(
            keys(&out),
            [
                "module",
                "defining_module",
                "access_model",
                "symbol_table",
                "libc",
                "arch",
                "schema_version"
            ]
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["defining_module"], "/usr/lib/libotel.so");
        assert_eq!(back["schema_version"], "tlsdesc_v1_dev");
        let failed = Threads::Failed("cannot list the threads".into());
        assert_eq!(
            serde_json::to_string(&json(&failed)).unwrap(),
            r#"[{"error":"cannot list the threads"},[]]"#
        );
        assert_eq!(
            serde_json::to_string(&json(&Threads::NotPublished {
                skipped: Vec::new()
            }))
            .unwrap(),
            "[null,[]]"
        );
    }
}
