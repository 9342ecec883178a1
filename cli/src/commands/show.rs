//! `otel-ctx show <pid>`: one process's whole context.

use otel_ctx_reader::memory::is_gone;
use otel_ctx_reader::process::{boottime_ns, ReaderOptions};
use otel_ctx_reader::procfs::comm;
use otel_ctx_reader::{Error, ProcessContextReader, ProcessMaps, Snapshot};
use otel_ctx_sampler::Method;
use serde::Serialize;

use super::threads::{self, Threads};
use super::{json, out, text, Failure};

/// One pass over the maps of `pid`, for both the process context and the modules.
pub fn read_maps(pid: u32) -> Result<ProcessMaps, Failure> {
    if is_gone(pid) {
        return Err(Error::gone(pid).into());
    }
    ProcessMaps::read(pid)
        .map_err(|e| Error::from_io(pid, format!("read /proc/{pid}/maps"), e).into())
}

/// Runs `show`. A process that publishes no valid context is a finding (exit status 1);
/// with `--json` the document still goes to stdout, with `"process_context": null`.
/// `method` `Some(Method::Ebpf)` takes the threads' contexts from the eBPF sampler: only
/// threads that ran during its window are listed. By default (`None`) every thread is
/// stopped and read with ptrace, idle ones too.
pub fn run(pid: u32, as_json: bool, raw_keys: bool, method: Option<Method>) -> Result<(), Failure> {
    let maps = read_maps(pid)?;
    let read = ProcessContextReader::from_maps(&maps, ReaderOptions::default())
        .and_then(|mut reader| reader.read());
    let (snapshot, finding) = match read {
        Ok(snapshot) => (Some(snapshot), None),
        Err(
            e @ (Error::NoContext { .. } | Error::Malformed { .. } | Error::StillUpdating { .. }),
        ) => (None, Some(Failure::from(e))),
        Err(e) => return Err(e.into()),
    };
    let threads = threads::read(maps, raw_keys, method.unwrap_or(Method::Ptrace))?;
    if as_json {
        json::print(&document(pid, snapshot.as_ref(), &threads))?;
    } else if let Some(s) = &snapshot {
        let name = comm(pid).unwrap_or_default();
        let mut text = text::snapshot(s, &name, boottime_ns());
        text.push('\n');
        text.push_str(&threads::text(&threads));
        if method == Some(Method::Ebpf) {
            text.push_str(&format!(
                "(eBPF: the threads that ran during {} ms, each as last sampled; threads that \
                 did not run are not listed)\n",
                otel_ctx_sampler::list::EBPF_WINDOW.as_millis()
            ));
        }
        out(&text)?;
    }
    finding.map_or(Ok(()), Err)
}

/// The document of `show --json`: `{"pid": N, "process_context": null | {...},
/// "thread_context": null | {...}, "threads": [...]}`.
#[derive(Serialize)]
struct Document<'a> {
    pid: u32,
    process_context: Option<json::ProcessContext<'a>>,
    thread_context: Option<threads::SlotJson<'a>>,
    threads: Vec<threads::ThreadJson<'a>>,
    skipped_modules: Vec<threads::SkippedJson>,
}

fn document<'a>(pid: u32, snapshot: Option<&'a Snapshot>, read: &'a Threads) -> Document<'a> {
    let (thread_context, threads) = threads::json(read);
    Document {
        pid,
        process_context: snapshot.map(json::ProcessContext::new),
        thread_context,
        threads,
        skipped_modules: threads::skipped_json(read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::process::{OwnedKeyValue, OwnedValue};

    #[test]
    fn no_context_shape() {
        let none = Threads::NotPublished {
            skipped: Vec::new(),
        };
        let out = serde_json::to_string(&document(7, None, &none)).unwrap();
        assert_eq!(
            out,
            r#"{"pid":7,"process_context":null,"thread_context":null,"threads":[],"skipped_modules":[]}"#
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
            skipped_modules: Vec::new(),
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
                "skipped_modules",
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
