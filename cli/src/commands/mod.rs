//! The subcommands of `otel-ctx` and their output.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use otel_ctx_reader::{Error, ThreadError};

pub mod check;
#[cfg(feature = "demo")]
pub mod demo;
#[cfg(feature = "ebpf")]
pub mod fleet;
pub mod json;
pub mod otlp;
pub mod profile;
pub mod profile_python;
pub mod ps;
pub mod show;
pub mod text;
pub mod threads;
pub mod watch;

/// Why a command did not do its job, and so its exit status: one scheme for every
/// command (0 when it did).
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Exit status 1: the process has no valid context, or a rule fails.
    Finding(String),
    /// Exit status 2: bad usage, or the process could not be read (no such process,
    /// permission denied).
    Unusable(String),
}

impl Failure {
    /// The exit status.
    pub const fn exit_code(&self) -> u8 {
        match self {
            Self::Finding(_) => 1,
            Self::Unusable(_) => 2,
        }
    }

    /// Bad usage (exit status 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::Unusable(message.into())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Finding(message) | Self::Unusable(message) => f.write_str(message),
        }
    }
}

impl From<Error> for Failure {
    /// What the process publishes is a finding (1); not being able to look is not (2).
    fn from(e: Error) -> Self {
        match e {
            Error::NoContext { .. } | Error::Malformed { .. } | Error::StillUpdating { .. } => {
                Self::Finding(e.to_string())
            }
            _ => Self::Unusable(e.to_string()),
        }
    }
}

impl From<ThreadError> for Failure {
    fn from(e: ThreadError) -> Self {
        match e {
            ThreadError::Process(e) => e.into(),
            ThreadError::NotExported { .. } | ThreadError::Schema { .. } => {
                Self::Finding(e.to_string())
            }
            e => Self::Unusable(e.to_string()),
        }
    }
}

/// Writes `text` to standard output. A closed pipe ends the program by `SIGPIPE`
/// (see [`default_sigpipe`]), so an error here is another failure of the output.
pub fn out(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::Unusable(format!("cannot write to standard output: {e}")))
}

/// Restores the default action of `SIGPIPE`, which the Rust runtime ignores: a write
/// to a closed pipe (`otel-ctx show 1 | head -1`) then ends the program quietly, as it
/// ends other Unix tools, instead of failing every later write.
pub fn default_sigpipe() {
    // SAFETY: `signal` with SIG_DFL installs no handler of ours; nothing else in this
    // program changes SIGPIPE's disposition, and it runs before any other thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Set by the Ctrl-C handler of the live views.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Installs a Ctrl-C handler that sets [`INTERRUPTED`], so live views end cleanly;
/// `SIGTERM` too, so that a service manager's stop ends them the same way.
pub fn catch_sigint() -> Result<(), String> {
    install(libc::SIGINT, on_sigint)
        .and_then(|()| install(libc::SIGTERM, on_sigint))
        .map_err(|e| format!("cannot catch Ctrl-C: sigaction failed: {e}"))
}

/// Set by the `SIGUSR1` handler of `profile --all`: print the summary so far.
#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
pub static SUMMARY_ASKED: AtomicBool = AtomicBool::new(false);

#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
extern "C" fn on_sigusr1(_: libc::c_int) {
    SUMMARY_ASKED.store(true, Ordering::Relaxed);
}

/// Installs `handler` for `signal`; no SA_RESTART, so a sleeping wait wakes.
fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> std::io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid starting value; every handler given here
    // only stores to an atomic, which is async-signal-safe.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// For a run that may last until it is stopped (`profile --all`, `--duration 0`):
/// Ctrl-C and `SIGTERM` set [`INTERRUPTED`] (it ends cleanly, sending what it has), and
/// `SIGUSR1` sets [`SUMMARY_ASKED`].
#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
pub fn catch_signals() -> Result<(), String> {
    for (signal, name, handler) in [
        (
            libc::SIGINT,
            "SIGINT",
            on_sigint as extern "C" fn(libc::c_int),
        ),
        (libc::SIGTERM, "SIGTERM", on_sigint),
        (libc::SIGUSR1, "SIGUSR1", on_sigusr1),
    ] {
        install(signal, handler)
            .map_err(|e| format!("cannot catch {name}: sigaction failed: {e}"))?;
    }
    Ok(())
}

/// Parses `10s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(arg: &str) -> Result<Duration, String> {
    let arg = arg.trim();
    if arg.starts_with('-') {
        return Err(format!(
            "{arg:?} is negative: give a duration such as 10s, 500ms or 2m"
        ));
    }
    let split = arg
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(arg.len());
    let (number, unit) = arg.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{arg:?} is not a duration such as 10s, 500ms or 2m"))?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {arg:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{arg:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").unwrap_err().contains("negative"));
    }
}
