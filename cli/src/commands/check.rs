//! `otel-ctx check`: runs the conformance rules of [`otel_ctx_conformance`] against a
//! process, or against a program it starts, and prints one line (or JSON object) per rule.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use otel_ctx_conformance::{check, wait_for_context, CheckOptions, Document, Report, Status};
use otel_ctx_reader::Error;

use serde::Serialize;

use super::{json, out, Failure};

/// How long a started program has to exit once its stdin is closed.
const STDIN_GRACE: Duration = Duration::from_secs(1);
/// How long it has to exit after SIGTERM, before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// What the check is doing, on one line of a terminal's stderr (rewritten in place and
/// cleared at the end): a program that never publishes would otherwise leave the screen
/// silent for the whole `--wait`.
struct Progress {
    on: bool,
}

impl Progress {
    fn new() -> Self {
        Self {
            on: std::io::stderr().is_terminal(),
        }
    }

    fn say(&self, line: &str) {
        if self.on {
            eprint!("\r\x1b[K{line}");
        }
    }

    fn clear(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

/// `10s`, `1.5s`, `250ms`: a wait as the options give it.
fn seconds(d: Duration) -> String {
    match d.as_millis() {
        ms if ms < 1000 => format!("{ms}ms"),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{:.1}s", d.as_secs_f64()),
    }
}

/// How a started program ended.
struct Stopped {
    /// `stdin_closed`, `sigterm` or `sigkill`: what made it exit.
    how: &'static str,
    status: Option<ExitStatus>,
}

/// A program started for a check; stopped on drop if [`Program::stop`] was not called.
struct Program {
    child: Child,
    argv: Vec<String>,
    stopped: bool,
}

impl Program {
    fn start(argv: &[String]) -> Result<Self, String> {
        let (program, args) = argv
            .split_first()
            .ok_or("give a process id, or a command after --")?;
        // The program's stdout goes to this tool's stderr, so that `--json` output stays
        // one document.
        let stdout = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("cannot duplicate stderr: {e}"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(stdout));
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed; it makes one prctl system call and
        // allocates nothing. It ends the program if this tool dies before stopping it.
        unsafe {
            command.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        Ok(Self {
            child,
            argv: argv.to_vec(),
            stopped: false,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes the program's stdin, then sends SIGTERM, then SIGKILL, each after a grace
    /// period, and reaps it.
    fn stop(&mut self) -> Stopped {
        self.stopped = true;
        drop(self.child.stdin.take());
        if let Some(status) = self.wait_for(STDIN_GRACE) {
            return Stopped {
                how: "stdin_closed",
                status: Some(status),
            };
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if let Some(status) = self.wait_for(TERM_GRACE) {
            return Stopped {
                how: "sigterm",
                status: Some(status),
            };
        }
        let _ = self.child.kill();
        Stopped {
            how: "sigkill",
            status: self.child.wait().ok(),
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `check`: on `pid`, or on `command` started here and stopped afterwards. A rule
/// that fails is a [`Failure::Finding`] (exit status 1); a check that could not be made
/// (no such process, permission denied, a command that would not start or ended too
/// early) is [`Failure::Unusable`] (exit status 2).
pub fn run(
    pid: Option<u32>,
    command: &[String],
    wait: Duration,
    observe: Duration,
    as_json: bool,
) -> Result<(), Failure> {
    let (report, program) = make(pid, command, wait, observe)
        .map_err(|e| Failure::Unusable(format!("cannot check: {e}")))?;
    if as_json {
        json::print(&document(&report, program.as_ref()))?;
    } else {
        out(&text(&report, program.as_ref()))?;
    }
    let failed = report.count(Status::Fail);
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::Finding(format!(
            "{failed} of {} rules FAIL for process {}",
            report.results.len(),
            report.pid
        )))
    }
}

/// The report of a check, and the program it started, if any.
type Made = (Report, Option<(Vec<String>, Stopped)>);

/// Makes the check: of `pid`, or of `command` started for it.
fn make(
    pid: Option<u32>,
    command: &[String],
    wait: Duration,
    observe: Duration,
) -> Result<Made, String> {
    let options = CheckOptions {
        observe,
        ..CheckOptions::default()
    };
    let progress = Progress::new();
    let (report, program) = match pid {
        Some(pid) => {
            progress.say(&format!(
                "otel-ctx check: watching process {pid} for {} (--observe)",
                seconds(observe)
            ));
            let report = check(pid, &options);
            progress.clear();
            (report.map_err(|e| e.to_string())?, None)
        }
        None => {
            let mut program = Program::start(command)?;
            let report = check_program(&mut program, wait, &options, &progress);
            progress.say(&format!(
                "otel-ctx check: stopping {} (its stdin closed, then SIGTERM after {}, \
                 SIGKILL {} later)",
                program.argv[0],
                seconds(STDIN_GRACE),
                seconds(TERM_GRACE)
            ));
            let stopped = program.stop();
            progress.clear();
            let report = report.map_err(|e| match stopped.status {
                Some(status) => format!("{e} ({status})"),
                None => e,
            })?;
            (report, Some((program.argv.clone(), stopped)))
        }
    };
    Ok((report, program))
}

/// Waits for the program's process context, then checks it.
fn check_program(
    program: &mut Program,
    wait: Duration,
    options: &CheckOptions,
    progress: &Progress,
) -> Result<Report, String> {
    let pid = program.pid();
    let name = program.argv[0].clone();
    let started = Instant::now();
    let mut shown = None;
    let appeared = wait_for_context(pid, wait, &mut || {
        // Once a second: how long it has waited, of how long it will.
        let waited = started.elapsed().as_secs();
        if shown != Some(waited) {
            shown = Some(waited);
            progress.say(&format!(
                "otel-ctx check: waiting for {name} (pid {pid}) to publish a process \
                 context: {waited}s of at most {} (--wait)",
                seconds(wait)
            ));
        }
        program.exited().is_none()
    });
    progress.say(&format!(
        "otel-ctx check: watching {name} (pid {pid}) for {} (--observe)",
        seconds(options.observe)
    ));
    if program.exited().is_some() {
        return Err(format!(
            "{name} ended before its process context could be checked"
        ));
    }
    match appeared {
        // Not appearing in time is a finding of the check (pc.found), not an error.
        Ok(_) => {}
        Err(Error::ProcessGone { .. }) => {
            return Err(format!(
                "{name} ended before its process context could be checked"
            ))
        }
        Err(e) => return Err(e.to_string()),
    }
    check(pid, options).map_err(|e| match e {
        Error::ProcessGone { .. } => format!("{name} (process {pid}) ended during the check"),
        e => e.to_string(),
    })
}

/// The text report, and how the program it started ended.
fn text(report: &Report, program: Option<&(Vec<String>, Stopped)>) -> String {
    let mut out = report.text();
    if let Some((argv, stopped)) = program {
        let how = match stopped.how {
            "stdin_closed" => "exited when its stdin was closed",
            "sigterm" => "exited on SIGTERM",
            _ => "was killed (SIGKILL)",
        };
        let status = stopped
            .status
            .map_or_else(|| "status unknown".to_owned(), |s| s.to_string());
        let _ = writeln!(out, "{} {how} ({status})", argv[0]);
    }
    out
}

/// The program `check` started and stopped, in its JSON document.
#[derive(Serialize)]
struct CommandJson<'a> {
    argv: &'a [String],
    stopped: &'static str,
    exit_code: Option<i32>,
    signal: Option<i32>,
}

/// The document of `check --json`; its shape is in `JSON.md`, section `check`.
fn document<'a>(
    report: &'a Report,
    program: Option<&'a (Vec<String>, Stopped)>,
) -> Document<'a, CommandJson<'a>> {
    report.document(program.map(|(argv, stopped)| CommandJson {
        argv,
        stopped: stopped.how,
        exit_code: stopped.status.and_then(|s| s.code()),
        signal: stopped.status.and_then(|s| s.signal()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_conformance::{RuleId, RuleResult};

    fn report() -> Report {
        Report {
            pid: 42,
            comm: "app \"x\"".into(),
            observed_for: Duration::from_millis(1500),
            results: vec![
                RuleResult {
                    rule: RuleId::PcFound,
                    status: Status::Pass,
                    observed: "/memfd:OTEL_CTX (deleted) at 0x1000".into(),
                },
                RuleResult {
                    rule: RuleId::PcHeaderVersion,
                    status: Status::Fail,
                    observed: "3: readers\nrequire 2".into(),
                },
            ],
            skipped_modules: Vec::new(),
        }
    }

    #[test]
    fn waits_as_the_options_give_them() {
        assert_eq!(seconds(Duration::from_secs(10)), "10s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5s");
        assert_eq!(seconds(Duration::from_millis(250)), "250ms");
        assert_eq!(seconds(Duration::ZERO), "0ms");
    }

    #[test]
    fn text_lines() {
        let out = text(&report(), None);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "otel-ctx check: process 42 (app \"x\"), watched for 1.50s"
        );
        assert!(lines[1].starts_with("PASS  pc.found "), "{}", lines[1]);
        assert!(
            lines[1].ends_with("  [OTEP 4719 §Reading Protocol 1]"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains("3: readers require 2"), "{}", lines[2]);
        assert_eq!(lines[3], "2 rules: 1 PASS, 0 WARN, 1 FAIL, 0 SKIP");
    }

    #[test]
    fn json_document() {
        let stopped = Stopped {
            how: "sigterm",
            status: None,
        };
        let program = (vec!["./app".into()], stopped);
        let report = report();
        let doc = serde_json::to_string(&document(&report, Some(&program))).unwrap();
        assert!(doc.starts_with(
            "{\"pid\":42,\"comm\":\"app \\\"x\\\"\",\"command\":{\"argv\":[\"./app\"],\"stopped\":\"sigterm\",\"exit_code\":null,\"signal\":null},\"observed_ms\":1500,\"passed\":false,\"summary\":{\"pass\":1,\"warn\":0,\"fail\":1,\"skip\":0},\"results\":[{\"id\":\"pc.found\",\"status\":\"pass\""
        ), "{doc}");
        assert!(
            doc.contains("\"observed\":\"3: readers\\nrequire 2\"}],\"skipped_modules\":[]}"),
            "{doc}"
        );
    }

    #[test]
    fn json_shape() {
        let report = report();
        let mut rule_keys = ["id", "status", "reference", "title", "observed"].repeat(2);
        let mut expected = vec!["pid", "comm", "command", "observed_ms", "passed", "summary"];
        expected.extend(["pass", "warn", "fail", "skip", "results"]);
        expected.append(&mut rule_keys);
        expected.push("skipped_modules");

        let with_pid = serde_json::to_string(&document(&report, None)).unwrap();
        assert_eq!(json::keys(&with_pid), expected);
        let back: serde_json::Value = serde_json::from_str(&with_pid).unwrap();
        assert!(back["command"].is_null(), "{with_pid}");
        assert_eq!(back["results"][1]["status"], "fail");
        assert_eq!(
            back["results"][1]["reference"],
            RuleId::PcHeaderVersion.reference()
        );

        let program = (
            vec!["./app".into(), "--port".into()],
            Stopped {
                how: "stdin_closed",
                status: Some(ExitStatus::from_raw(3 << 8)),
            },
        );
        let with_command = serde_json::to_string(&document(&report, Some(&program))).unwrap();
        let command_keys = ["argv", "stopped", "exit_code", "signal"];
        expected.splice(3..3, command_keys);
        assert_eq!(json::keys(&with_command), expected);
        let back: serde_json::Value = serde_json::from_str(&with_command).unwrap();
        assert_eq!(
            back["command"],
            serde_json::json!({"argv": ["./app", "--port"], "stopped": "stdin_closed",
                               "exit_code": 3, "signal": null})
        );
    }
}
