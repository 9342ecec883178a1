//! Files a target maps are hostile input: a process that replaced a mapped file's path
//! with a FIFO, mapped a character device, points a mapped path out of its root with a
//! symlink, maps a sparse file whose headers claim 50 GiB of tables, or rewrites and
//! replaces a mapped file all the time. `show`, `check` and `watch` each complete within
//! 2 s, read the threads' contexts through the other modules, and say which module they
//! skipped and why. (Root, as the reader runs on hosts; ptrace and chroot.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod support;

use support::{bounded, helper, otel_ctx, text};

/// What each command may take, at most.
const LIMIT: Duration = Duration::from_secs(10);

/// A running `otel-ctx-hostile <mode>`; stopped on drop.
struct Hostile {
    child: Child,
    module: String,
}

impl Hostile {
    fn start(mode: &str, dir: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(helper("otel-ctx-hostile", &[]))
            .arg(mode)
            .arg(dir)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start otel-ctx-hostile");
        let stdout = child.stdout.take().expect("stdout");
        let line = bounded::Lines::new(format!("otel-ctx-hostile {mode}"), stdout)
            .line("its `ready <module>`", bounded::DEADLINE);
        let module = line
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("{mode}: {line:?}"))
            .to_owned();
        Self { child, module }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `program args` and waits at most [`LIMIT`]: a command that takes longer is
/// killed and the test fails.
fn run_within(program: &Path, prefix: &[&str], args: &[&str]) -> Output {
    let mut command = if prefix.is_empty() {
        Command::new(program)
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(program);
        c
    };
    bounded::output(command.args(args), LIMIT).expect("run otel-ctx")
}

/// `show`, `check` and `watch` on the target: each within the limit, each reading both
/// threads' contexts. Returns their outputs (stdout and stderr together), in that order.
fn read_it(target: &Hostile, prefix: &[&str]) -> [String; 3] {
    let pid = target.pid();
    let tool = otel_ctx();
    let show = run_within(tool, prefix, &["show", &pid]);
    let shown = text(&show.stdout);
    assert_eq!(show.status.code(), Some(0), "{shown}{}", text(&show.stderr));
    assert_eq!(
        shown.matches("http.route=/hostile").count(),
        2,
        "both threads' records, read through the other modules:\n{shown}"
    );
    let check = run_within(tool, prefix, &["check", &pid, "--observe", "300ms"]);
    let checked = text(&check.stdout);
    assert!(
        checked.contains("PASS  tc.record.valid"),
        "{checked}{}",
        text(&check.stderr)
    );
    let watch = run_within(tool, prefix, &["watch", &pid, "--duration", "300ms"]);
    let watched = format!("{}{}", text(&watch.stdout), text(&watch.stderr));
    assert_eq!(watch.status.code(), Some(0), "{watched}");
    assert!(watched.contains("/hostile"), "{watched}");
    [shown, checked, watched]
}

/// Asserts that every output names `module` as skipped, with `reason`.
fn says_skipped(outputs: &[String; 3], module: &str, reason: &str) {
    for output in outputs {
        let line = output
            .lines()
            .find(|l| l.contains(&format!("skipped {module}: ")))
            .unwrap_or_else(|| panic!("{module} not said to be skipped:\n{output}"));
        assert!(line.contains(reason), "{line}");
    }
}

/// Asserts that no output says `module` was skipped: it was read (through map_files).
fn read_whole(outputs: &[String; 3], module: &str) {
    for output in outputs {
        assert!(!output.contains(&format!("skipped {module}")), "{output}");
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("hostile")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Runs the tool without `CAP_SYS_ADMIN` and `CAP_CHECKPOINT_RESTORE` (so without
/// `/proc/<pid>/map_files`), as a reader with only `CAP_SYS_PTRACE` runs.
const WITHOUT_MAP_FILES: [&str; 3] = [
    "setpriv",
    "--inh-caps=-sys_admin,-checkpoint_restore",
    "--bounding-set=-sys_admin,-checkpoint_restore",
];

#[test]
fn a_fifo_over_a_mapped_path() {
    let target = Hostile::start("fifo", &scratch("fifo"), &[]);
    // As root: the mapped file itself, through map_files.
    let outputs = read_it(&target, &[]);
    read_whole(&outputs, &target.module);
    // Without map_files: skipped, and why.
    let outputs = read_it(&target, &WITHOUT_MAP_FILES);
    says_skipped(
        &outputs,
        &target.module,
        "its path is a FIFO, not the mapped file",
    );
    says_skipped(
        &outputs,
        &target.module,
        "needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE",
    );
}

#[test]
fn a_mapped_character_device() {
    let target = Hostile::start("chardev", &scratch("chardev"), &[]);
    let outputs = read_it(&target, &[]);
    says_skipped(
        &outputs,
        "/dev/zero",
        "the mapped file itself is a character device",
    );
}

#[test]
fn a_symlink_out_of_the_target_root() {
    // A FIFO on the host, at a path the target's root does not have.
    let dir = scratch("symlink");
    let host_fifo = std::env::temp_dir().join(format!("otel-ctx-host-{}.fifo", std::process::id()));
    let _ = std::fs::remove_file(&host_fifo);
    let made = Command::new("mkfifo")
        .arg(&host_fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let host = host_fifo.to_str().expect("utf-8 path").to_owned();
    let target = Hostile::start("symlink-escape", &dir, &[&host]);
    // The symlink resolves inside the target's root, where it leads nowhere: the reader
    // never opens the host's FIFO (which would block it), and reads the mapped file
    // through map_files.
    let outputs = read_it(&target, &[]);
    read_whole(&outputs, &target.module);
    let outputs = read_it(&target, &WITHOUT_MAP_FILES);
    says_skipped(&outputs, &target.module, "its path no longer exists");
    drop(target);
    let _ = std::fs::remove_file(&host_fifo);
}

#[test]
fn a_sparse_file_that_claims_huge_tables() {
    let target = Hostile::start("sparse", &scratch("sparse"), &[]);
    let outputs = read_it(&target, &[]);
    says_skipped(
        &outputs,
        &target.module,
        "its tables claim more than the 64 MiB a file may cost",
    );
}

#[test]
fn a_file_rewritten_and_replaced_while_it_is_read() {
    let target = Hostile::start("churn", &scratch("churn"), &[]);
    // Whatever state the file is in when each command reads it: done in time, and the
    // contexts read.
    for _ in 0..3 {
        let outputs = read_it(&target, &[]);
        for output in &outputs {
            assert!(!output.contains("panicked"), "{output}");
        }
    }
}
