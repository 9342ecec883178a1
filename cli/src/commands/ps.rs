//! `otel-ctx ps`: every process that publishes a process context.

use std::fmt::Write as _;

use otel_ctx_reader::process::{boottime_ns, Scan, ScanEntry};
use otel_ctx_reader::procfs::{comm, diagnose};
use otel_ctx_reader::{scan, Snapshot};
use serde::Serialize;

use super::{json, out, text, Failure};

/// The thread-context schema a process announces, if any.
fn schema(s: &Snapshot) -> Option<&str> {
    s.threadlocal()
        .ok()
        .and_then(|tl| tl.schema_version.as_deref())
}

/// Runs `ps`. Processes whose maps the kernel would not show do not change the exit
/// status: a line on stderr counts them (the same ones on every run, such as pid 1 under a
/// security module), and `verbose` lists each with what refused it.
pub fn run(as_json: bool, verbose: bool) -> Result<(), Failure> {
    let result = scan().map_err(|e| Failure::Unusable(format!("cannot list /proc: {e}")))?;
    let now = boottime_ns();
    if as_json {
        json::print(&to_json(&result, now))?;
    } else {
        out(&to_text(&result, now))?;
    }
    if !result.denied.is_empty() {
        eprint!("{}", denied_text(&result.denied, verbose));
    }
    Ok(())
}

/// The note on processes the kernel would not let this reader look at: their number, or
/// with `verbose` each with what refused it.
fn denied_text(denied: &[u32], verbose: bool) -> String {
    let (count, its) = match denied.len() {
        1 => ("1 process".to_owned(), "its"),
        n => (format!("{n} processes"), "their"),
    };
    if !verbose {
        return format!(
            "otel-ctx: {count} not checked (the kernel refused to show {its} maps; -v says \
             which and why)\n"
        );
    }
    let mut note =
        format!("otel-ctx: {count} not checked (the kernel refused to show {its} maps):\n");
    for &pid in denied {
        let name = comm(pid).unwrap_or_default();
        let _ = writeln!(note, "  {pid} ({name}): {}", diagnose(pid));
    }
    note
}

fn to_text(result: &Scan, now: u64) -> String {
    let dash = || "-".to_owned();
    let mut rows = vec![[
        "PID",
        "COMMAND",
        "SERVICE.NAME",
        "SERVICE.INSTANCE.ID",
        "SERVICE.VERSION",
        "PUBLISHED",
        "THREAD.SCHEMA",
    ]
    .map(str::to_owned)
    .to_vec()];
    let mut problems = String::new();
    for ScanEntry { pid, comm, context } in &result.entries {
        let row = match context {
            Ok(s) => {
                let ctx = &s.context;
                vec![
                    pid.to_string(),
                    comm.clone(),
                    ctx.service_name().map_or_else(dash, text::shorten),
                    ctx.service_instance_id().map_or_else(dash, text::shorten),
                    ctx.service_version().map_or_else(dash, text::shorten),
                    format!("{} ago", text::duration(s.age_ns(now))),
                    schema(s).map_or_else(dash, str::to_owned),
                ]
            }
            Err(e) => {
                let _ = writeln!(problems, "{pid}: {e}");
                vec![
                    pid.to_string(),
                    comm.clone(),
                    format!("({})", e.kind()),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ]
            }
        };
        rows.push(row);
    }
    let mut out = text::table(&rows);
    if result.entries.is_empty() {
        out.push_str("(no process publishes a process context)\n");
    }
    if !problems.is_empty() {
        out.push('\n');
        out.push_str(&problems);
    }
    out
}

/// The document of `ps --json`.
#[derive(Serialize)]
struct Document<'a> {
    processes: Vec<Process<'a>>,
    denied: &'a [u32],
}

/// One element of `processes`: every field but `pid`, `comm` and `error` is `null` when
/// the context could not be read.
#[derive(Serialize)]
struct Process<'a> {
    pid: u32,
    comm: &'a str,
    #[serde(rename = "service.name")]
    service_name: Option<&'a str>,
    #[serde(rename = "service.instance.id")]
    service_instance_id: Option<&'a str>,
    #[serde(rename = "service.version")]
    service_version: Option<&'a str>,
    monotonic_published_at_ns: Option<u64>,
    age_ns: Option<u64>,
    #[serde(rename = "threadlocal.schema_version")]
    schema_version: Option<&'a str>,
    error: Option<ProcessError>,
}

/// Why a process's context could not be read.
#[derive(Serialize)]
struct ProcessError {
    kind: &'static str,
    message: String,
}

fn to_json(result: &Scan, now: u64) -> Document<'_> {
    let processes = result
        .entries
        .iter()
        .map(|ScanEntry { pid, comm, context }| match context {
            Ok(s) => Process {
                pid: *pid,
                comm,
                service_name: s.context.service_name(),
                service_instance_id: s.context.service_instance_id(),
                service_version: s.context.service_version(),
                monotonic_published_at_ns: Some(s.monotonic_published_at_ns),
                age_ns: Some(s.age_ns(now)),
                schema_version: schema(s),
                error: None,
            },
            Err(e) => Process {
                pid: *pid,
                comm,
                service_name: None,
                service_instance_id: None,
                service_version: None,
                monotonic_published_at_ns: None,
                age_ns: None,
                schema_version: None,
                error: Some(ProcessError {
                    kind: e.kind(),
                    message: e.to_string(),
                }),
            },
        })
        .collect();
    Document {
        processes,
        denied: &result.denied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::Error;

    const PROCESS_KEYS: [&str; 9] = [
        "pid",
        "comm",
        "service.name",
        "service.instance.id",
        "service.version",
        "monotonic_published_at_ns",
        "age_ns",
        "threadlocal.schema_version",
        "error",
    ];

    #[test]
    fn refused_processes_counted_in_one_line() {
        assert_eq!(
            denied_text(&[1, 2, 3], false),
            "otel-ctx: 3 processes not checked (the kernel refused to show their maps; -v \
             says which and why)\n"
        );
        assert!(denied_text(&[1], false).starts_with("otel-ctx: 1 process not checked"));
        let pid = std::process::id();
        let listed = denied_text(&[pid], true);
        let lines: Vec<&str> = listed.lines().collect();
        assert_eq!(
            lines[0],
            "otel-ctx: 1 process not checked (the kernel refused to show its maps):"
        );
        assert!(lines[1].starts_with(&format!("  {pid} (")), "{listed}");
        assert_eq!(lines.len(), 2, "{listed}");
    }

    #[test]
    fn unreadable_process_shape() {
        let scan = Scan {
            entries: vec![ScanEntry {
                pid: 7,
                comm: "app".into(),
                context: Err(Error::NoContext { pid: 7 }),
            }],
            denied: vec![1, 2],
        };
        let out = serde_json::to_string(&to_json(&scan, 0)).unwrap();
        let mut expected = vec!["processes"];
        expected.extend(PROCESS_KEYS);
        expected.extend(["kind", "message", "denied"]);
        assert_eq!(json::keys(&out), expected);
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        let process = &back["processes"][0];
        assert_eq!(process["pid"], 7);
        assert_eq!(process["comm"], "app");
        for key in &PROCESS_KEYS[2..8] {
            assert!(process[key].is_null(), "{key}: {out}");
        }
        assert_eq!(process["error"]["kind"], "no_context");
        assert!(process["error"]["message"].is_string(), "{out}");
        assert_eq!(back["denied"], serde_json::json!([1, 2]));
    }

    #[test]
    fn published_process_shape() {
        let doc = Document {
            processes: vec![Process {
                pid: 4242,
                comm: "checkout",
                service_name: Some("checkout"),
                service_instance_id: Some("8b49bea6"),
                service_version: None,
                monotonic_published_at_ns: Some(8_123_456_789_012),
                age_ns: Some(5_120_000_000),
                schema_version: Some("tlsdesc_v1_dev"),
                error: None,
            }],
            denied: &[],
        };
        let out = serde_json::to_string(&doc).unwrap();
        let mut expected = vec!["processes"];
        expected.extend(PROCESS_KEYS);
        expected.push("denied");
        assert_eq!(json::keys(&out), expected);
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"processes": [{
                "pid": 4242,
                "comm": "checkout",
                "service.name": "checkout",
                "service.instance.id": "8b49bea6",
                "service.version": null,
                "monotonic_published_at_ns": 8_123_456_789_012_u64,
                "age_ns": 5_120_000_000_u64,
                "threadlocal.schema_version": "tlsdesc_v1_dev",
                "error": null
            }], "denied": []})
        );
        let empty = Scan::default();
        assert_eq!(
            serde_json::to_string(&to_json(&empty, 0)).unwrap(),
            r#"{"processes":[],"denied":[]}"#
        );
    }
}
