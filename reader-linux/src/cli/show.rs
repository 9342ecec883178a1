//! `otel-ctx show <pid>`: one process's whole context.

use otel_ctx_reader::{boottime_ns, comm, Error, ProcessContextReader};

use super::threads::{self, Threads};
use super::{json, text};

/// Runs `show`. A process that publishes no context is an error (exit status 1); with
/// `--json` the document still goes to stdout, with `"process_context": null`.
pub fn run(pid: u32, as_json: bool) -> Result<(), String> {
    let read = ProcessContextReader::open(pid).and_then(|mut reader| reader.read());
    let snapshot = match read {
        Ok(snapshot) => Some(snapshot),
        Err(e @ Error::NoContext { .. }) => {
            if as_json {
                println!("{}", document(pid, None, &threads::read(pid)));
            }
            return Err(e.to_string());
        }
        Err(e) => return Err(e.to_string()),
    };
    let threads = threads::read(pid);
    if as_json {
        println!("{}", document(pid, snapshot.as_ref(), &threads));
    } else if let Some(s) = &snapshot {
        let name = comm(pid).unwrap_or_default();
        print!("{}", text::snapshot(s, &name, boottime_ns()));
        println!();
        print!("{}", threads::text(&threads));
    }
    Ok(())
}

/// `{"pid": N, "process_context": null | {...}, "thread_context": null | {...},
/// "threads": [...]}`.
fn document(pid: u32, snapshot: Option<&otel_ctx_reader::Snapshot>, threads: &Threads) -> String {
    let mut out = format!("{{\"pid\": {pid}, \"process_context\": ");
    match snapshot {
        Some(s) => json::process_context(&mut out, s),
        None => out.push_str("null"),
    }
    out.push_str(", ");
    threads::json(&mut out, threads);
    out.push('}');
    out
}
