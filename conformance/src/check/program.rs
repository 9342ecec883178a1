//! A check of a program started for it, as an SDK's test suite or `otel-ctx check --
//! COMMAND` runs one: the program is started, given time to publish its process context,
//! checked, then stopped the way a service expects to be (its stdin closed, then
//! `SIGTERM`, then `SIGKILL`, each after a grace period) and reaped.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use otel_ctx_reader::Error;

use super::run::{check, wait_for_context, CheckOptions};
use super::verdict::Report;

/// How long a started program has to exit once its stdin is closed.
pub const STDIN_GRACE: Duration = Duration::from_secs(1);
/// How long it then has to exit after `SIGTERM`, before `SIGKILL`.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// What made a started program exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// It exited within [`STDIN_GRACE`] of its stdin being closed.
    StdinClosed,
    /// It exited within [`TERM_GRACE`] of `SIGTERM`.
    Sigterm,
    /// It was killed.
    Sigkill,
}

impl StopReason {
    /// `stdin_closed`, `sigterm` or `sigkill`, as `check --json` names it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::StdinClosed => "stdin_closed",
            Self::Sigterm => "sigterm",
            Self::Sigkill => "sigkill",
        }
    }

    /// What happened, after the program's name: `exited on SIGTERM`.
    pub const fn description(self) -> &'static str {
        match self {
            Self::StdinClosed => "exited when its stdin was closed",
            Self::Sigterm => "exited on SIGTERM",
            Self::Sigkill => "was killed (SIGKILL)",
        }
    }
}

/// How a started program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// What made it exit.
    pub how: StopReason,
    /// Its exit status (`None`: it could not be reaped).
    pub status: Option<ExitStatus>,
}

/// Where [`check_command`] is, for a caller that shows progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Waiting for the program (this process id) to publish; said about once a second
    /// with the time waited so far.
    Waiting {
        /// The program's process id.
        pid: u32,
        /// How long it has waited.
        waited: Duration,
    },
    /// Watching the program's contexts for [`CheckOptions::observe`].
    Watching {
        /// The program's process id.
        pid: u32,
    },
    /// Stopping the program.
    Stopping,
}

/// Why a started program could not be checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramError {
    /// It would not start.
    #[error("cannot start {program}: {source}")]
    Start {
        /// Its name.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited before (or while) its process context could be checked.
    #[error("{program} ended before its process context could be checked")]
    EndedEarly {
        /// Its name.
        program: String,
        /// How it ended.
        stopped: Stopped,
    },
    /// The check could not be made (the process could not be read).
    #[error("{source}")]
    Check {
        /// How the program ended once stopped.
        stopped: Stopped,
        /// Why.
        source: Error,
    },
}

/// Starts `command` (its stdin a pipe), waits up to `wait` for it to publish a process
/// context, checks it with `options`, then stops it (stdin closed, `SIGTERM`, `SIGKILL`). `progress`
/// hears each [`Stage`]. Not publishing within `wait` is a finding of the report
/// (`pc.found`), not an error. The program is stopped and reaped on every path, an error
/// included.
pub fn check_command(
    command: &mut Command,
    wait: Duration,
    options: &CheckOptions,
    progress: &mut dyn FnMut(Stage),
) -> Result<(Report, Stopped), ProgramError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let child = command
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|source| ProgramError::Start {
            program: program.clone(),
            source,
        })?;
    let mut started = Started {
        child,
        stopped: false,
    };
    let pid = started.child.id();
    let begun = Instant::now();
    let mut shown = None;
    let appeared = wait_for_context(pid, wait, &mut || {
        let waited = begun.elapsed();
        if shown != Some(waited.as_secs()) {
            shown = Some(waited.as_secs());
            progress(Stage::Waiting { pid, waited });
        }
        started.exited().is_none()
    });
    let report = match appeared {
        Ok(_) if started.exited().is_some() => Err(None),
        Ok(_) => {
            progress(Stage::Watching { pid });
            check(pid, options).map_err(Some)
        }
        Err(Error::ProcessGone { .. }) => Err(None),
        Err(e) => Err(Some(e)),
    };
    progress(Stage::Stopping);
    let stopped = started.stop();
    match report {
        Ok(report) => Ok((report, stopped)),
        Err(None | Some(Error::ProcessGone { .. })) => {
            Err(ProgramError::EndedEarly { program, stopped })
        }
        Err(Some(source)) => Err(ProgramError::Check { stopped, source }),
    }
}

/// A started program; killed and reaped on drop unless [`Started::stop`] was called.
struct Started {
    child: Child,
    stopped: bool,
}

impl Started {
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

    /// Closes the program's stdin, then sends `SIGTERM`, then `SIGKILL`, each after its
    /// grace period, and reaps it.
    fn stop(&mut self) -> Stopped {
        self.stopped = true;
        drop(self.child.stdin.take());
        if let Some(status) = self.wait_for(STDIN_GRACE) {
            return Stopped {
                how: StopReason::StdinClosed,
                status: Some(status),
            };
        }
        let pid = i32::try_from(self.child.id()).ok();
        if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if let Some(status) = self.wait_for(TERM_GRACE) {
            return Stopped {
                how: StopReason::Sigterm,
                status: Some(status),
            };
        }
        let _ = self.child.kill();
        Stopped {
            how: StopReason::Sigkill,
            status: self.child.wait().ok(),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RuleId, Status};

    fn options() -> CheckOptions {
        CheckOptions {
            observe: Duration::ZERO,
            ..CheckOptions::default()
        }
    }

    fn run(script: &str) -> Result<(Report, Stopped), ProgramError> {
        let mut stages = Vec::new();
        let made = check_command(
            Command::new("sh").args(["-c", script]),
            Duration::from_millis(300),
            &options(),
            &mut |stage| stages.push(stage),
        );
        assert_eq!(stages.last(), Some(&Stage::Stopping), "{stages:?}");
        made
    }

    fn found(report: &Report) -> Status {
        let result = report.results.iter().find(|r| r.rule == RuleId::PcFound);
        result.expect("pc.found is judged").status
    }

    #[test]
    fn a_program_that_reads_its_stdin_stops_when_it_closes() {
        let (report, stopped) = run("cat >/dev/null").expect("a report");
        assert_eq!(found(&report), Status::Fail);
        assert_eq!(stopped.how, StopReason::StdinClosed);
        assert_eq!(stopped.status.and_then(|s| s.code()), Some(0));
    }

    #[test]
    fn then_sigterm_then_sigkill() {
        let (_, stopped) = run("exec sleep 30").expect("a report");
        assert_eq!(stopped.how, StopReason::Sigterm);
        let (_, stopped) = run("trap '' TERM; sleep 30 & wait; sleep 30").expect("a report");
        assert_eq!(stopped.how, StopReason::Sigkill);
    }

    #[test]
    fn one_that_ends_at_once_or_does_not_start() {
        let early = run("exit 3").unwrap_err();
        assert!(
            matches!(&early, ProgramError::EndedEarly { stopped, .. }
                if stopped.status.and_then(|s| s.code()) == Some(3)),
            "{early:?}"
        );
        assert!(early.to_string().contains("ended before"), "{early}");
        let missing = check_command(
            &mut Command::new("/nonexistent/program"),
            Duration::from_millis(100),
            &options(),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("cannot start /nonexistent/program"),
            "{missing}"
        );
    }
}
