//! Which stream each line goes to, for every command: stdout holds only what was asked
//! for (the table, the JSON document, the report, the profile with `-o -`), and every
//! progress and summary line goes to stderr, so that `otel-ctx <command> > file` keeps
//! the data alone. Run on the profile tests' C fixture (`routes.c`: a process context,
//! thread contexts with `http.route`, three busy threads). Root (ptrace), gcc.

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use fixture::{build_routes, Fixture, ROUTES};
use support::{otel_ctx, text};

/// The fixture's threads spin on both CPUs: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Lines of progress and summary, which never belong on stdout.
const PROGRESS: [&str; 10] = [
    "otel-ctx:",
    "time is up",
    "interrupted after",
    "samples in",
    "sampling every thread",
    "written to",
    "demo service",
    "thread samples per",
    "distinct frames",
    "warning",
];

/// Runs `otel-ctx <args>`, killed if it has not exited within 60 s; the fixture's busy
/// threads may slow a ptrace round, never by that much.
fn run(args: &[&str]) -> Output {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let name = format!("streams-{}", std::process::id());
    let (stdout, stderr) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let mut child = Command::new(otel_ctx())
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("run otel-ctx");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("otel-ctx {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(&stdout).unwrap_or_default(),
        stderr: std::fs::read(&stderr).unwrap_or_default(),
    }
}

/// `otel-ctx <args>` exits with one of `codes`, with no progress line on stdout; its
/// stdout and stderr.
fn data_alone(args: &[&str], codes: &[i32]) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let code = out.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "{args:?} exited {code}:\n{stdout}\n{stderr}"
    );
    for line in stdout.lines() {
        for progress in PROGRESS {
            assert!(
                !line.contains(progress),
                "{args:?}: a progress line on stdout: {line}\n(stderr: {stderr})"
            );
        }
    }
    (stdout, stderr)
}

/// One JSON document, all of stdout.
fn json(stdout: &str, args: &[&str]) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{args:?}: {e}:\n{stdout}"))
}

#[test]
fn stdout_holds_the_data_and_stderr_the_rest_for_every_command() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = build_routes("streams-routes", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "streams")]);
    let pid = fixture.pid.to_string();

    // ps: the table (its header first), the JSON document.
    let (stdout, _) = data_alone(&["ps"], &[0]);
    assert!(stdout.starts_with("PID "), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with(&pid)), "{stdout}");
    let args = ["ps", "--json"];
    let doc = json(&data_alone(&args, &[0]).0, &args);
    assert!(doc["processes"].is_array(), "{doc}");

    // show: the context, the JSON document.
    let (stdout, _) = data_alone(&["show", &pid], &[0]);
    assert!(stdout.contains("streams"), "{stdout}");
    let args = ["show", &pid, "--json"];
    let doc = json(&data_alone(&args, &[0]).0, &args);
    assert_eq!(doc["pid"].as_u64(), Some(u64::from(fixture.pid)), "{doc}");

    // watch: the table alone; the heading and the closing line on stderr.
    let (stdout, stderr) = data_alone(&["watch", &pid, "--duration", "500ms"], &[0]);
    assert!(stdout.starts_with("  HTTP.ROUTE "), "{stdout}");
    for (route, _) in ROUTES {
        assert!(stdout.contains(route), "{route} in\n{stdout}");
    }
    // The heading of either sampler (eBPF by default where the build has it).
    assert!(
        stderr.contains("sampling every thread of") || stderr.contains("eBPF sampling of"),
        "{stderr}"
    );
    assert!(stderr.contains("time is up after"), "{stderr}");
    let args = ["watch", &pid, "--duration", "300ms", "--json"];
    let doc = json(&data_alone(&args, &[0]).0, &args);
    assert!(doc["samples"].as_u64().unwrap_or(0) > 0, "{doc}");

    // check: the report (a rule may fail: 1), the JSON document.
    let (stdout, _) = data_alone(&["check", &pid, "--observe", "0"], &[0, 1]);
    assert!(stdout.contains("PASS"), "{stdout}");
    let args = ["check", &pid, "--observe", "0", "--json"];
    let doc = json(&data_alone(&args, &[0, 1]).0, &args);
    assert!(doc["results"].is_array(), "{doc}");

    // profile -o -: folded stacks alone; the summary on stderr.
    let args = ["profile", &pid, "--ptrace", "--duration", "1s", "-o", "-"];
    let (stdout, stderr) = data_alone(&args, &[0]);
    assert!(!stdout.is_empty(), "no stacks:\n{stderr}");
    for line in stdout.lines() {
        let count = line.rsplit_once(' ').map(|(_, n)| n.parse::<u64>());
        assert!(matches!(count, Some(Ok(_))), "not a folded line: {line}");
    }
    assert!(stderr.contains("samples in"), "{stderr}");
    // ... and to a file: nothing on stdout.
    let file = fixture::out_path("streams.folded");
    let file = file.to_str().expect("UTF-8 path");
    let args = [
        "profile",
        &pid,
        "--ptrace",
        "--duration",
        "500ms",
        "-o",
        file,
    ];
    let (stdout, stderr) = data_alone(&args, &[0]);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("written to"), "{stderr}");

    // demo, in a build that has it: the context and the table; the rest on stderr.
    if cfg!(feature = "demo") {
        let (stdout, stderr) = data_alone(&["demo", "--duration", "1500ms"], &[0]);
        assert!(stdout.contains("published: "), "{stdout}");
        assert!(stderr.contains("demo service started: pid "), "{stderr}");
        assert!(stderr.contains("demo service stopped"), "{stderr}");
    }
    fixture.finish();
}

/// `watch --by` an attribute the key map does not have: a warning (a service may register
/// the key later), sampling goes on and the exit status is 0, as the words say; the table
/// counts every sample as `(no <key>)`.
#[test]
fn an_attribute_not_in_the_key_map_is_a_warning_and_exits_0() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = build_routes("streams-by", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    let pid = fixture.pid.to_string();
    let args = ["watch", &pid, "--duration", "300ms", "--by", "nosuch.attr"];
    let (stdout, stderr) = data_alone(&args, &[0]);
    assert!(
        stderr.starts_with(
            "otel-ctx: warning: nosuch.attr is not in the key map; its keys are: http.route"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("unless the process registers it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("otel-ctx: warning: nosuch.attr is still not in the key map"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("error"), "{stderr}");
    assert!(stdout.contains("(no nosuch.attr)"), "{stdout}");
    // The JSON document carries the note; the warning stays on stderr.
    let args = [&args[..], &["--json"]].concat();
    let (stdout, stderr) = data_alone(&args, &[0]);
    let doc = json(&stdout, &args);
    assert!(
        doc["key_note"]
            .as_str()
            .is_some_and(|n| n.contains("nosuch.attr")),
        "{doc}"
    );
    assert!(stderr.contains("warning: nosuch.attr"), "{stderr}");
    fixture.finish();
}
