//! `otel-ctx check`: runs the conformance rules of [`otel_ctx_conformance`] against a
//! process, or against a program it starts, and prints one line (or JSON object) per rule.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use otel_ctx_conformance::{
    check, check_command, CheckOptions, Document, ProgramError, Report, Stage, Status, Stopped,
    STDIN_GRACE, TERM_GRACE,
};

use serde::Serialize;

use super::{json, out, Failure};

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

/// The command `argv` names, its stdout on this tool's stderr (so that `--json` output
/// stays one document), ended if this tool dies before stopping it.
fn command(argv: &[String]) -> Result<Command, String> {
    let (program, args) = argv
        .split_first()
        .ok_or("give a process id, or a command after --")?;
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("cannot duplicate stderr: {e}"))?;
    let mut command = Command::new(program);
    command.args(args).stdout(Stdio::from(stdout));
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed; it makes one prctl and two signal(2) calls
    // (both async-signal-safe) and allocates nothing. It ends the program if this tool
    // dies before stopping it, and gives it the default action of SIGINT and SIGTERM,
    // as a program started from a terminal has: started from a shell that ignores them
    // (a background job), it would otherwise ignore the SIGTERM that stops it.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    Ok(command)
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

/// Makes the check: of `pid`, or of `argv` started for it.
fn make(
    pid: Option<u32>,
    argv: &[String],
    wait: Duration,
    observe: Duration,
) -> Result<Made, String> {
    let options = CheckOptions {
        observe,
        ..CheckOptions::default()
    };
    let progress = Progress::new();
    let Some(pid) = pid else {
        let mut command = command(argv)?;
        let name = &argv[0];
        let made = check_command(&mut command, wait, &options, &mut |stage| {
            progress.say(&match stage {
                Stage::Waiting { pid, waited } => format!(
                    "otel-ctx check: waiting for {name} (pid {pid}) to publish a process \
                     context: {}s of at most {} (--wait)",
                    waited.as_secs(),
                    seconds(wait)
                ),
                Stage::Watching { pid } => format!(
                    "otel-ctx check: watching {name} (pid {pid}) for {} (--observe)",
                    seconds(observe)
                ),
                _ => format!(
                    "otel-ctx check: stopping {name} (its stdin closed, then SIGTERM after \
                     {}, SIGKILL {} later)",
                    seconds(STDIN_GRACE),
                    seconds(TERM_GRACE)
                ),
            });
        });
        progress.clear();
        return match made {
            Ok((report, stopped)) => Ok((report, Some((argv.to_vec(), stopped)))),
            Err(ProgramError::Check { stopped, source }) => Err(match stopped.status {
                Some(status) => format!("{source} ({status})"),
                None => source.to_string(),
            }),
            Err(e) => Err(e.to_string()),
        };
    };
    progress.say(&format!(
        "otel-ctx check: watching process {pid} for {} (--observe)",
        seconds(observe)
    ));
    let report = check(pid, &options);
    progress.clear();
    Ok((report.map_err(|e| e.to_string())?, None))
}

/// The text report, and how the program it started ended.
fn text(report: &Report, program: Option<&(Vec<String>, Stopped)>) -> String {
    let mut out = report.text();
    if let Some((argv, stopped)) = program {
        let how = stopped.how.description();
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
        stopped: stopped.how.name(),
        exit_code: stopped.status.and_then(|s| s.code()),
        signal: stopped.status.and_then(|s| s.signal()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_conformance::{RuleId, RuleResult, StopReason};
    use std::process::ExitStatus;

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
            how: StopReason::Sigterm,
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
                how: StopReason::StdinClosed,
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
