//! `otel-ctx show <pid>`: one process's whole context.

use otel_ctx_reader::{boottime_ns, comm, Error, ProcessContextReader};

use super::{json, text};

/// Runs `show`. A process that publishes no context is an error (exit status 1); with
/// `--json` the document still goes to stdout, with `"process_context": null`.
pub fn run(pid: u32, as_json: bool) -> Result<(), String> {
    let read = ProcessContextReader::open(pid).and_then(|mut reader| reader.read());
    let snapshot = match read {
        Ok(snapshot) => Some(snapshot),
        Err(e @ Error::NoContext { .. }) => {
            if as_json {
                println!("{}", document(pid, None));
            }
            return Err(e.to_string());
        }
        Err(e) => return Err(e.to_string()),
    };
    if as_json {
        println!("{}", document(pid, snapshot.as_ref()));
    } else if let Some(s) = &snapshot {
        let name = comm(pid).unwrap_or_default();
        print!("{}", text::snapshot(s, &name, boottime_ns()));
    }
    Ok(())
}

/// `{"pid": N, "process_context": null | {...}, "threads": []}`.
fn document(pid: u32, snapshot: Option<&otel_ctx_reader::Snapshot>) -> String {
    let mut out = format!("{{\"pid\": {pid}, \"process_context\": ");
    match snapshot {
        Some(s) => json::process_context(&mut out, s),
        None => out.push_str("null"),
    }
    // Thread contexts are read by a later version; the key is there so that consumers
    // can rely on it now.
    out.push_str(", \"threads\": []}");
    out
}
