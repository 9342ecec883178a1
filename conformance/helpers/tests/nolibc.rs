//! The example program without libc (`writer-linux/examples/nolibc`), built by
//! `scripts/build-nolibc.sh`: it links nothing (`nm -u` lists no symbol, `ldd` finds no
//! dynamic executable), checks on both of its threads that the TLS slot is where a reader
//! computes it and reads back what it published; on x86_64 `otel-ctx show` reads its
//! process context and both threads' contexts and `otel-ctx check` passes it; on aarch64
//! it runs under qemu-user (which cannot ptrace), and its own report is checked.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the example's own build goes: beside the workspace's, never in it (other flags).
fn nolibc_target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from)
        .join("nolibc")
}

/// Builds the example for `arch` with the script and returns the path it printed last.
fn build(arch: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(workspace().join("scripts/build-nolibc.sh"))
        .arg(arch)
        .env("CARGO_TARGET_DIR", nolibc_target_dir())
        .stderr(Stdio::inherit())
        .output()
        .expect("run bash scripts/build-nolibc.sh");
    assert!(
        out.status.success(),
        "scripts/build-nolibc.sh {arch} failed"
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    let path = PathBuf::from(stdout.lines().last().expect("the script printed a path"));
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

/// `nm -u` lists no undefined symbol, and `ldd` says it is not a dynamic executable.
fn assert_links_nothing(binary: &Path) {
    let nm = Command::new("nm")
        .arg("-u")
        .arg(binary)
        .output()
        .expect("run nm (binutils)");
    assert!(
        nm.status.success(),
        "nm failed: {}",
        String::from_utf8_lossy(&nm.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&nm.stdout),
        "",
        "undefined symbols in {}",
        binary.display()
    );
    let ldd = Command::new("ldd").arg(binary).output().expect("run ldd");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    assert!(
        said.contains("not a dynamic executable"),
        "ldd says: {said}"
    );
}

/// The program's stdout, line by line, as it comes.
struct Output(bounded::Lines);

impl Output {
    fn of(child: &mut Child) -> Self {
        let stdout = child.stdout.take().expect("piped stdout");
        Self(bounded::Lines::new("the example", stdout))
    }

    /// Reads lines until one starts with `prefix`, for at most a minute, and returns it.
    fn until(&mut self, prefix: &str) -> String {
        let what = format!("a line starting with {prefix:?}");
        let mut lines = self
            .0
            .until(&what, bounded::DEADLINE, |l| l.starts_with(prefix));
        lines.pop().expect("the line")
    }
}

/// Checks the program's report of itself, up to `READY <pid>`, and returns the pid.
fn assert_self_report(output: &mut Output) -> u32 {
    let symbol = output.until("TLS-SYMBOL ");
    assert!(
        symbol.contains("table=.dynsym"),
        "the slot is not in .dynsym: {symbol}"
    );
    let context = output.until("PROCESS-CONTEXT ");
    assert!(
        context.contains("service.name=otel-ctx-nolibc")
            && context.contains("schema=tlsdesc_v1_dev")
            && context.contains("key_map=thread.role,tick"),
        "{context}"
    );
    let mut slots = [output.until("TLS-SLOT "), output.until("TLS-SLOT ")];
    slots.sort();
    for (line, role) in slots.iter().zip(["main", "worker"]) {
        assert!(
            line.contains(&format!("thread={role} "))
                && line.contains("valid=1")
                && line.contains(&format!("thread.role={role} tick=0")),
            "{line}"
        );
    }
    assert_eq!(output.until("SELF-CHECK"), "SELF-CHECK ok");
    let ready = output.until("READY ");
    ready["READY ".len()..].parse().expect("READY <pid>")
}

#[cfg(target_arch = "x86_64")]
fn otel_ctx() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "otel-ctx", "--message-format=json"])
        .current_dir(workspace())
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build -p otel-ctx");
    assert!(out.status.success(), "building otel-ctx failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter(|line| line.contains("\"name\":\"otel-ctx\""))
        .find_map(|line| {
            let start = line.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = start + line[start..].find('"')?;
            Some(PathBuf::from(&line[start..end]))
        })
        .expect("cargo named the otel-ctx executable")
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_64_links_nothing_and_the_tool_reads_and_passes_it() {
    let binary = build("x86_64");
    assert_links_nothing(&binary);
    let tool = otel_ctx();
    let mut child = Command::new(&binary)
        .args(["--seconds", "120"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the example");
    let mut output = Output::of(&mut child);
    let pid = assert_self_report(&mut output);
    assert_eq!(pid, child.id());

    let show = bounded::output(
        Command::new(&tool).args(["show", &pid.to_string()]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx show");
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "otel-ctx show failed: {shown}");
    assert!(shown.contains("otel-ctx-nolibc"), "{shown}");
    assert!(
        shown.contains("threadlocal.attribute_key_map") && shown.contains("\"thread.role\""),
        "{shown}"
    );
    assert!(shown.contains("threads (2)"), "{shown}");
    assert!(shown.contains("local-exec, dynsym"), "{shown}");
    for role in ["main", "worker"] {
        assert!(
            shown.contains(&format!("thread.role={role} tick=")),
            "no {role} thread context in: {shown}"
        );
    }

    let check = bounded::output(
        Command::new(&tool).args(["check", &pid.to_string()]),
        bounded::DEADLINE,
    )
    .expect("run otel-ctx check");
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "otel-ctx check failed: {report}");
    assert!(report.contains(" 0 FAIL"), "{report}");
    assert!(
        report
            .lines()
            .any(|line| line.starts_with("PASS  tc.symbol.dynsym")),
        "{report}"
    );
    assert!(
        report
            .lines()
            .any(|line| line.starts_with("PASS  tc.record.valid")),
        "{report}"
    );

    let target = rustix::process::Pid::from_raw(pid as i32).expect("a pid is positive");
    rustix::process::kill_process(target, rustix::process::Signal::TERM).expect("send SIGTERM");
    let exit = output.until("EXIT after ");
    let status = bounded::wait(&mut child, "the example, after SIGTERM,", bounded::DEADLINE);
    assert!(status.success(), "the example exited with {status}: {exit}");
}

#[test]
fn aarch64_under_qemu_finds_its_own_slot_and_context() {
    let binary = build("aarch64");
    assert_links_nothing(&binary);
    let mut child = Command::new("qemu-aarch64")
        .arg(&binary)
        .args(["--seconds", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run qemu-aarch64 (install qemu-user)");
    let mut output = Output::of(&mut child);
    assert_self_report(&mut output);
    let exit = output.until("EXIT after ");
    let ticks: u64 = exit["EXIT after ".len()..]
        .trim_end_matches(" ticks")
        .parse()
        .expect("EXIT after <n> ticks");
    assert!(ticks >= 1, "{exit}");
    // It runs for a second.
    let status = bounded::wait(&mut child, "qemu-aarch64", bounded::DEADLINE);
    assert!(status.success(), "the example exited with {status}");
}
