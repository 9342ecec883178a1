//! C and Python programs using the library, read from outside by `otel-ctx show` and
//! judged by `otel-ctx check` (run as root: thread contexts are read through ptrace).
//!
//! - `c/process_reference.c`, written only against the reference-compatible
//!   `otel_process_ctx.h`, linked with the shared and with the static library, and with
//!   `musl-gcc` against the musl static library (static-PIE, and `-static`);
//! - `c/threads.c`, three threads attaching contexts through `otel_ctx.h`, both ways and
//!   as a static-PIE musl executable;
//! - `c/append.c`, the in-place append and truncate of `otel_ctx.h` and their refusals;
//! - `python/threads.py`, the same through `ctypes`.

mod support;

#[path = "../../reader-linux/tests/support/bounded.rs"]
mod bounded;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use support::{built, compile, Link};

/// A started program: it prints `ready <pid>` (after `child <pid>` for a forked one) and
/// waits for its stdin to close.
struct Program {
    child: Child,
    stdout: bounded::Lines,
}

impl Program {
    fn start(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the program");
        let piped = child.stdout.take().expect("piped");
        let stdout = bounded::Lines::new(format!("{command:?}"), piped);
        Self { child, stdout }
    }

    /// The pid of the next line, which must be `ready <pid>`.
    fn ready_pid(&mut self) -> String {
        let [pid] = <[String; 1]>::try_from(self.pids(&["ready"])).expect("one pid");
        pid
    }

    /// The pids of the next `words.len()` lines `<word> <pid>`, in the order of `words`
    /// (a parent and its forked child print in either order).
    fn pids(&mut self, words: &[&str]) -> Vec<String> {
        let mut pids = vec![String::new(); words.len()];
        for _ in words {
            let line = self.stdout.line("a line `<word> <pid>`", bounded::DEADLINE);
            let (word, pid) = line
                .trim()
                .split_once(' ')
                .unwrap_or_else(|| panic!("expected `<word> <pid>`, got {line:?}"));
            let at = words
                .iter()
                .position(|w| *w == word)
                .unwrap_or_else(|| panic!("expected one of {words:?}, got {line:?}"));
            pids[at] = pid.to_owned();
        }
        pids
    }

    /// Closes stdin and checks that the program then exits with 0.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let what = "the program, its stdin closed,";
        let status = bounded::wait(&mut self.child, what, bounded::DEADLINE);
        assert!(status.success(), "the program failed: {status}");
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `otel-ctx show --json <pid>`.
fn show(pid: &str) -> Value {
    let out = bounded::output(
        Command::new(&built().otel_ctx).args(["show", "--json", pid]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    assert!(
        out.status.success(),
        "otel-ctx show {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `otel-ctx check <pid>` passes.
fn check(pid: &str) {
    check_failing(pid, &[]);
}

/// `otel-ctx check <pid>` fails exactly the rules `failing` (none: it passes).
fn check_failing(pid: &str, failing: &[&str]) {
    let out = bounded::output(
        Command::new(&built().otel_ctx).args(["check", pid, "--observe", "200ms", "--json"]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "otel-ctx check {pid} --json: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let failed: Vec<&str> = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["status"] == "fail")
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(failed, failing, "otel-ctx check {pid}: {doc}");
    let code = if failing.is_empty() { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(code), "otel-ctx check {pid}: {doc}");
}

/// Runs `c/process_reference.c` linked as `link`; `otel-ctx show` finds the slot with
/// the access model and in the symbol table of `slot`, and `otel-ctx check` fails exactly
/// the rules `failing`, for it and its forked child.
fn process_reference(link: Link, slot: [&str; 2], failing: &[&str]) {
    let exe = compile("process_reference", link);
    let mut program = Program::start(&mut Command::new(exe));
    let [parent, child] =
        <[String; 2]>::try_from(program.pids(&["ready", "child"])).expect("two pids");
    for (pid, instance) in [
        (&parent, "00000000-0000-4000-8000-000000000001"),
        (&child, "00000000-0000-4000-8000-000000000002"),
    ] {
        let doc = show(pid);
        let resource = &doc["process_context"]["resource"];
        assert_eq!(resource["service.name"], "c-reference", "{doc}");
        assert_eq!(resource["service.version"], "2.0.0", "{doc}");
        assert_eq!(resource["service.instance.id"], instance, "{doc}");
        assert_eq!(resource["deployment.environment.name"], "test", "{doc}");
        assert_eq!(resource["telemetry.sdk.language"], "c", "{doc}");
        assert_eq!(resource["host.name"], "c-host", "{doc}");
        let found = &doc["thread_context"];
        assert_eq!(
            [&found["access_model"], &found["symbol_table"]],
            slot,
            "{doc}"
        );
        let attributes = &doc["process_context"]["attributes"];
        assert_eq!(attributes["example.extra"], "yes", "{doc}");
        assert_eq!(
            attributes["threadlocal.attribute_key_map"],
            serde_json::json!(["http.route", "http.method"]),
            "{doc}"
        );
        check_failing(pid, failing);
    }
    program.finish();
}

/// The library is loaded at start-up: glibc resolves its TLSDESC access to the static TLS
/// block.
#[test]
fn reference_program_with_the_shared_library() {
    process_reference(Link::Shared, ["tlsdesc-static", "dynsym"], &[]);
}

/// GNU ld turns the archive's TLSDESC access into initial-exec, with a `TPOFF64`
/// relocation that the dynamic loader applies.
#[test]
fn reference_program_with_the_static_library() {
    process_reference(Link::Static, ["initial-exec", "dynsym"], &[]);
}

/// A static-PIE musl executable has a `.dynsym`, where the slot is exported; lld made the
/// access local-exec.
#[cfg(target_arch = "x86_64")]
#[test]
fn reference_program_with_the_musl_static_library_as_static_pie() {
    process_reference(Link::MuslStaticPie, ["local-exec", "dynsym"], &[]);
}

/// `musl-gcc -static` makes an executable that is not position-independent and has no
/// `.dynsym`: `otel-ctx show` reads it (the slot is found in `.symtab`), and the one rule
/// `otel-ctx check` fails is that the slot is not in `.dynsym`, where readers following
/// the specification look.
#[cfg(target_arch = "x86_64")]
#[test]
fn reference_program_with_musl_gcc_static() {
    process_reference(
        Link::MuslStatic,
        ["local-exec", "symtab"],
        &["tc.symbol.dynsym"],
    );
}

/// `musl-gcc -static` with lld and an empty shared object `--as-needed`: the executable is
/// still static and not position-independent, and now has a `.dynsym` with the slot, so
/// `otel-ctx check` passes it.
#[cfg(target_arch = "x86_64")]
#[test]
fn reference_program_with_musl_gcc_static_and_a_dynsym() {
    process_reference(Link::MuslStaticDynsym, ["local-exec", "dynsym"], &[]);
}

/// Checks the three threads' contexts of `pid`: trace id `first_byte * (i + 1)` repeated,
/// span id `span_byte + i` repeated, flags 1, and the attributes `route(i)`, `worker(i)`.
fn three_threads(
    pid: &str,
    first_byte: u8,
    span_byte: u8,
    route: impl Fn(u8) -> String,
    worker: impl Fn(u8) -> String,
) {
    let doc = show(pid);
    let mut contexts: Vec<&Value> = doc["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| &t["context"])
        .filter(|c| !c.is_null())
        .collect();
    contexts.sort_by_key(|c| c["trace_id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(contexts.len(), 3, "{doc}");
    for (i, context) in (0u8..).zip(contexts) {
        let trace_id = format!("{:02x}", first_byte * (i + 1)).repeat(16);
        let span_id = format!("{:02x}", span_byte + i).repeat(8);
        assert_eq!(context["trace_id"], trace_id.as_str(), "{doc}");
        assert_eq!(context["span_id"], span_id.as_str(), "{doc}");
        assert_eq!(context["trace_flags"], 1, "{doc}");
        assert_eq!(context["attributes"]["http.route"], route(i), "{doc}");
        assert_eq!(context["attributes"]["worker"], worker(i), "{doc}");
    }
    check(pid);
}

fn c_threads(link: Link) {
    let exe = compile("threads", link);
    let mut program = Program::start(&mut Command::new(exe));
    let pid = program.ready_pid();
    three_threads(
        &pid,
        0x11,
        0xa0,
        |i| format!("/thread/{i}"),
        |i| format!("worker-{i}"),
    );
    program.finish();
}

#[test]
fn c_threads_with_the_shared_library() {
    c_threads(Link::Shared);
}

#[test]
fn c_threads_with_the_static_library() {
    c_threads(Link::Static);
}

/// Three threads of a static-PIE musl executable: the reader finds each thread's block
/// from musl's thread pointer and the local-exec offset.
#[cfg(target_arch = "x86_64")]
#[test]
fn c_threads_with_the_musl_static_library_as_static_pie() {
    c_threads(Link::MuslStaticPie);
}

#[test]
fn c_append_and_truncate_in_place() {
    let exe = compile("append", Link::Shared);
    let mut program = Program::start(&mut Command::new(exe));
    let pid = program.ready_pid();
    let doc = show(&pid);
    let contexts: Vec<&Value> = doc["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| &t["context"])
        .filter(|c| !c.is_null())
        .collect();
    assert_eq!(contexts.len(), 1, "{doc}");
    let context = contexts[0];
    assert_eq!(context["trace_id"], "31".repeat(16), "{doc}");
    assert_eq!(context["span_id"], "c1".repeat(8), "{doc}");
    assert_eq!(context["trace_flags"], 1, "{doc}");
    // The two notes were appended and then truncated away; the agent was cut to 254 bytes.
    assert_eq!(
        context["attributes"],
        serde_json::json!({
            "http.route": "/items",
            "http.method": "GET",
            "user.agent": "\u{e9}".repeat(127),
        }),
        "{doc}"
    );
    check(&pid);
    program.finish();
}

#[test]
fn python_threads_through_ctypes() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/threads.py");
    let mut program = Program::start(Command::new("python3").arg(script).arg(&built().shared));
    let pid = program.ready_pid();
    three_threads(
        &pid,
        0x21,
        0xb0,
        |i| format!("/python/{i}"),
        |i| format!("py-{i}"),
    );
    program.finish();
}
