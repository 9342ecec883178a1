//! `otel-ctx show <pid>`: one process's whole context.

use otel_ctx_reader::{boottime_ns, comm, Error, ProcessContextReader, Snapshot};
use serde::Serialize;

use super::threads::{self, Threads};
use super::{json, text};

/// The threads of `pid`: stopped and read one by one (ptrace), or with `ebpf`, sampled
/// while they run.
fn read_threads(pid: u32, raw_keys: bool, ebpf: bool) -> Result<Threads, String> {
    if !ebpf {
        return Ok(threads::read(pid, raw_keys));
    }
    #[cfg(feature = "ebpf")]
    return threads::read_ebpf(pid, raw_keys);
    #[cfg(not(feature = "ebpf"))]
    Err(super::watch::NO_EBPF.to_owned())
}

/// Runs `show`. A process that publishes no context is an error (exit status 1); with
/// `--json` the document still goes to stdout, with `"process_context": null`. `ebpf`
/// takes the threads' contexts from the eBPF sampler: only threads that ran during its
/// window are listed.
pub fn run(pid: u32, as_json: bool, raw_keys: bool, ebpf: bool) -> Result<(), String> {
    let read = ProcessContextReader::open(pid).and_then(|mut reader| reader.read());
    let snapshot = match read {
        Ok(snapshot) => Some(snapshot),
        Err(e @ Error::NoContext { .. }) => {
            if as_json {
                json::print(&document(pid, None, &read_threads(pid, raw_keys, ebpf)?))?;
            }
            return Err(e.to_string());
        }
        Err(e) => return Err(e.to_string()),
    };
    let threads = read_threads(pid, raw_keys, ebpf)?;
    if as_json {
        json::print(&document(pid, snapshot.as_ref(), &threads))?;
    } else if let Some(s) = &snapshot {
        let name = comm(pid).unwrap_or_default();
        print!("{}", text::snapshot(s, &name, boottime_ns()));
        println!();
        print!("{}", threads::text(&threads));
        #[cfg(feature = "ebpf")]
        if ebpf {
            println!(
                "(eBPF: the threads that ran during {} ms, each as last sampled; threads that \
                 did not run are not listed)",
                threads::EBPF_WINDOW.as_millis()
            );
        }
    }
    Ok(())
}

/// The document of `show --json`: `{"pid": N, "process_context": null | {...},
/// "thread_context": null | {...}, "threads": [...]}`.
#[derive(Serialize)]
struct Document<'a> {
    pid: u32,
    process_context: Option<json::ProcessContext<'a>>,
    thread_context: Option<threads::SlotJson<'a>>,
    threads: Vec<threads::ThreadJson<'a>>,
}

fn document<'a>(pid: u32, snapshot: Option<&'a Snapshot>, threads: &'a Threads) -> Document<'a> {
    let (thread_context, threads) = threads::json(threads);
    Document {
        pid,
        process_context: snapshot.map(json::ProcessContext::new),
        thread_context,
        threads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::{OwnedKeyValue, OwnedValue};

    #[test]
    fn no_context_shape() {
        let out = serde_json::to_string(&document(7, None, &Threads::NotPublished)).unwrap();
        assert_eq!(
            out,
            r#"{"pid":7,"process_context":null,"thread_context":null,"threads":[]}"#
        );
    }

    #[test]
    fn document_shape() {
        let resource = [OwnedKeyValue {
            key: "service.name".into(),
            value: OwnedValue::String("checkout".into()),
        }];
        let attributes = [OwnedKeyValue {
            key: "threadlocal.schema_version".into(),
            value: OwnedValue::String("tlsdesc_v1_dev".into()),
        }];
        let failed = Threads::Failed("cannot find the TLS block".into());
        let (thread_context, threads) = threads::json(&failed);
        let doc = Document {
            pid: 4242,
            process_context: Some(json::ProcessContext {
                mapping: "[anon_shmem:OTEL_CTX]".into(),
                version: 2,
                monotonic_published_at_ns: 1,
                payload_size: 80,
                resource: json::KvList(&resource),
                attributes: json::KvList(&attributes),
            }),
            thread_context,
            threads,
        };
        let out = serde_json::to_string(&doc).unwrap();
        assert_eq!(
            json::keys(&out),
            [
                "pid",
                "process_context",
                "mapping",
                "version",
                "monotonic_published_at_ns",
                "payload_size",
                "resource",
                "service.name",
                "attributes",
                "threadlocal.schema_version",
                "thread_context",
                "error",
                "threads",
            ]
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["pid"], 4242);
        assert_eq!(back["process_context"]["version"], 2);
        assert_eq!(
            back["process_context"]["resource"],
            serde_json::json!({"service.name": "checkout"})
        );
        assert_eq!(
            back["thread_context"],
            serde_json::json!({"error": "cannot find the TLS block"})
        );
        assert_eq!(back["threads"], serde_json::json!([]));
    }
}
