//! The subcommands of `otel-ctx` and their output.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub mod check;
pub mod demo;
pub mod json;
pub mod ps;
pub mod show;
pub mod text;
pub mod threads;
pub mod watch;

/// Set by the Ctrl-C handler of the live views.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Installs a Ctrl-C handler that sets [`INTERRUPTED`], so live views end cleanly.
pub fn catch_sigint() -> Result<(), String> {
    // SAFETY: an all-zero `sigaction` is a valid starting value; the handler only stores
    // to an atomic, which is async-signal-safe; no SA_RESTART, so a sleeping read wakes.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot catch Ctrl-C: sigaction failed: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Parses `10s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(arg: &str) -> Result<Duration, String> {
    let arg = arg.trim();
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
    }
}
