//! `otel-ctx show` reads thread contexts as OTEP 4947 says a reader must: only when the
//! process context announces a schema it knows, naming attributes only through the key
//! map; `--raw-keys` is the explicit way around both, for debugging writers.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

mod support;

use support::{bounded, c_writer, otel_ctx};

fn writer() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| c_writer("thread-reading-writer"))
}

/// The C writer with one thread whose record has `http.route=/checkout` at key index 0;
/// killed on drop.
struct Writer(Child);

impl Writer {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(writer())
            .args(args)
            .args(["--record", "good"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the writer");
        let stdout = child.stdout.take().expect("stdout");
        let line =
            bounded::Lines::new("the C writer", stdout).line("its `ready`", bounded::DEADLINE);
        assert_eq!(line.trim(), "ready");
        Self(child)
    }

    fn show(&self, extra: &[&str]) -> Value {
        let mut command = Command::new(otel_ctx());
        command
            .args(["show", "--json"])
            .args(extra)
            .arg(self.0.id().to_string());
        let out = bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx show");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The attributes of the one thread that has a context.
fn attributes(doc: &Value) -> &Value {
    let threads: Vec<&Value> = doc["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["context"].is_object())
        .collect();
    assert_eq!(threads.len(), 1, "{doc}");
    &threads[0]["context"]["attributes"]
}

#[test]
fn attributes_are_named_through_the_key_map() {
    let writer = Writer::start(&[]);
    let doc = writer.show(&[]);
    assert_eq!(doc["thread_context"]["schema_version"], "tlsdesc_v1_dev");
    assert_eq!(attributes(&doc)["http.route"], "/checkout", "{doc}");
}

#[test]
fn without_a_key_map_every_entry_is_ignored() {
    // OTEP 4947: entries whose index is outside the key map are ignored; with no key map,
    // every index is.
    let writer = Writer::start(&["--no-key-map"]);
    let doc = writer.show(&[]);
    assert_eq!(
        attributes(&doc),
        &Value::Object(Default::default()),
        "{doc}"
    );
    // --raw-keys names them by index instead.
    let doc = writer.show(&["--raw-keys"]);
    assert_eq!(attributes(&doc)["#0"], "/checkout", "{doc}");
}

#[test]
fn an_unknown_schema_is_not_read() {
    for (args, says) in [
        (
            &["--schema", "go_pprof_labels_v1"][..],
            "\"go_pprof_labels_v1\", which this reader does not know",
        ),
        (&["--no-reference-data"], "announces no thread contexts"),
    ] {
        let writer = Writer::start(args);
        let doc = writer.show(&[]);
        let error = doc["thread_context"]["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{args:?}: {doc}");
        assert_eq!(doc["threads"], Value::Array(Vec::new()), "{args:?}: {doc}");
        // --raw-keys reads the slot all the same.
        let doc = writer.show(&["--raw-keys"]);
        assert_eq!(attributes(&doc)["#0"], "/checkout", "{args:?}: {doc}");
    }
}

#[test]
fn the_final_schema_name_is_read_too() {
    let writer = Writer::start(&["--schema", "tls_v1"]);
    let doc = writer.show(&[]);
    assert_eq!(doc["thread_context"]["schema_version"], "tls_v1");
    assert_eq!(attributes(&doc)["http.route"], "/checkout", "{doc}");
}
