//! Cross-checks the payload vectors against protoc, an implementation that shares no code
//! with this repository: every vector with `expected` is decoded by `protoc --decode`
//! against `spec-vectors/proto/process_context.proto` and must print the same resource
//! and extra attributes; every vector with `error` must make protoc fail too, except
//! where protoc's rules differ (see [`protoc_accepts`]).
//!
//! Needs `protoc` on the PATH (Debian: `apt-get install protobuf-compiler`).

use std::io::Write;
use std::process::{Command, Stdio};

use otel_ctx_conformance::vectors::payload::{self, PayloadExpected};
use otel_ctx_conformance::{spec_vectors_dir, text_format, Outcome, Vector};

#[path = "../../reader-linux/tests/support/bounded.rs"]
mod bounded;

const MESSAGE: &str = "opentelemetry.proto.processcontext.v1development.ProcessContext";

/// What protoc made of some bytes.
enum Decoded {
    /// Exit status 0, and the text it printed.
    Text(String),
    /// A non-zero exit status, and what it said.
    Failed(String),
}

fn protoc_decode(bytes: &[u8]) -> Decoded {
    let proto_dir = spec_vectors_dir().join("proto");
    let mut child = match Command::new("protoc")
        .arg(format!("--proto_path={}", proto_dir.display()))
        .arg(format!("--decode={MESSAGE}"))
        .arg("process_context.proto")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "protoc is not installed or not on the PATH; this test needs it \
             (Debian/Ubuntu: apt-get install protobuf-compiler)"
        ),
        Err(e) => panic!("cannot run protoc: {e}"),
    };
    // protoc reads all of stdin before writing, so writing first cannot deadlock.
    let mut stdin = child.stdin.take().expect("stdin was piped");
    stdin.write_all(bytes).expect("writing to protoc");
    drop(stdin);
    let out = bounded::wait_with_output(child, "protoc --decode", bounded::DEADLINE);
    if out.status.success() {
        Decoded::Text(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Decoded::Failed(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Error kinds protoc does not report, with the reason. For these the test checks that
/// protoc decodes the bytes, so the exception stays exactly as documented here.
fn protoc_accepts(kind: &str) -> Option<&'static str> {
    match kind {
        // protobuf runtimes keep a known field that arrives with another wire type as an
        // unknown field; this project's readers refuse it.
        "wrong_wire_type" => Some("protoc keeps the field as an unknown field"),
        // Reader limits belong to the reader, not to protobuf.
        "too_deep" => Some("protoc's recursion limit is 100, the reader's default 16"),
        "too_many_attributes" => Some("protoc has no limit on the number of attributes"),
        "payload_too_large" => Some("protoc has no payload size limit"),
        _ => None,
    }
}

fn check_expected(v: &Vector<PayloadExpected>, want: &PayloadExpected) -> Result<(), String> {
    let text = match protoc_decode(&v.bytes) {
        Decoded::Text(t) => t,
        Decoded::Failed(e) => return Err(format!("protoc refused the bytes: {}", e.trim())),
    };
    let message = text_format::parse(&text)
        .map_err(|e| format!("cannot read protoc's output ({e}):\n{text}"))?;
    let got = text_format::process_context(&message)
        .map_err(|e| format!("cannot read protoc's output ({e}):\n{text}"))?;
    if !payload::same_values(&got.resource, &want.resource)
        || !payload::same_values(&got.attributes, &want.attributes)
    {
        return Err(format!(
            "protoc decodes differently\n  expected resource   {}\n  protoc   resource   {}\n  \
             expected attributes {}\n  protoc   attributes {}",
            payload::to_json(&want.resource),
            payload::to_json(&got.resource),
            payload::to_json(&want.attributes),
            payload::to_json(&got.attributes)
        ));
    }
    Ok(())
}

fn check_error(v: &Vector<PayloadExpected>, kind: &str) -> Result<(), String> {
    match (protoc_decode(&v.bytes), protoc_accepts(kind)) {
        (Decoded::Failed(_), None) => Ok(()),
        (Decoded::Text(text), None) => Err(format!(
            "error `{kind}` expected, but protoc decodes the bytes:\n{text}"
        )),
        (Decoded::Text(text), Some(why)) => {
            if kind == "wrong_wire_type" {
                let message = text_format::parse(&text)
                    .map_err(|e| format!("cannot read protoc's output ({e}):\n{text}"))?;
                if !text_format::has_unknown_fields(&message) {
                    return Err(format!(
                        "protoc should keep the mistyped field as an unknown field:\n{text}"
                    ));
                }
            }
            eprintln!("vector `{}`: not an error for protoc: {why}", v.name);
            Ok(())
        }
        (Decoded::Failed(e), Some(why)) => Err(format!(
            "protoc was expected to accept these bytes ({why}) but refused them: {}",
            e.trim()
        )),
    }
}

#[test]
fn payload_vectors_agree_with_protoc() {
    let vectors = payload::load().unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for v in &vectors {
        let result = match &v.outcome {
            Outcome::Expected(want) => check_expected(v, want),
            Outcome::Error(kind) => check_error(v, kind),
        };
        if let Err(e) = result {
            failures.push(format!("vector `{}` ({}): {e}", v.name, v.description));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} payload vectors disagree with protoc:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}
