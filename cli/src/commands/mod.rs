//! The subcommands of `otel-ctx` and their output.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use libc::{SIGINT, SIGTERM, SIGUSR1};
use otel_ctx_reader::{Error, ThreadError};
use otel_ctx_sampler::Method;

pub mod check;
#[cfg(feature = "demo")]
pub mod demo;
#[cfg(feature = "ebpf")]
pub mod fleet;
pub mod json;
pub mod otlp;
pub mod profile;
pub mod profile_request;
pub mod ps;
pub mod show;
pub mod tally;
pub mod text;
pub mod threads;
pub mod watch;

/// The ways `--sampler` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplerKind {
    /// A BPF program reads the thread that a CPU-clock tick interrupts; nothing is stopped.
    Ebpf,
    /// Each thread is stopped in turn with ptrace.
    Ptrace,
}

/// `--sampler`, the one sampler flag of every command that samples (`show`, `watch`,
/// `demo`, `profile`), with its older spellings `--ebpf` and `--ptrace` kept hidden.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct SamplerFlag {
    /// How threads are sampled: `ebpf`, a BPF program at CPU-clock ticks that stops
    /// nothing (root, a kernel with BTF, a build with the `ebpf` feature), or `ptrace`,
    /// each thread stopped in turn. Default: eBPF where the build has it and the kernel
    /// allows it, else ptrace; `show` defaults to ptrace, which reads every thread, idle
    /// ones too, where eBPF sees only the threads that run.
    #[arg(long, value_enum, value_name = "SAMPLER")]
    pub sampler: Option<SamplerKind>,
    /// `--sampler ebpf`.
    #[arg(long, hide = true, conflicts_with_all = ["sampler", "ptrace"])]
    pub ebpf: bool,
    /// `--sampler ptrace`.
    #[arg(long, hide = true, conflicts_with_all = ["sampler", "ebpf"])]
    pub ptrace: bool,
}

impl SamplerFlag {
    /// The way asked for; `None`: the command's default.
    pub fn method(self) -> Option<Method> {
        match (self.sampler, self.ebpf, self.ptrace) {
            (Some(SamplerKind::Ebpf), ..) | (None, true, _) => Some(Method::Ebpf),
            (Some(SamplerKind::Ptrace), ..) | (None, _, true) => Some(Method::Ptrace),
            (None, false, false) => None,
        }
    }
}

/// Why a command did not do its job, and so its exit status: one scheme for every
/// command (0 when it did).
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Exit status 1: the process has no valid context, or a rule fails.
    Finding(String),
    /// Exit status 2: bad usage, or the process could not be read (no such process,
    /// permission denied).
    Unusable(String),
    /// Exit status 3: there were profiles to send, and none was delivered.
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    Undelivered(String),
    /// Exit status 4: part of the profiles was not delivered (dropped or rejected).
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    PartlyDelivered(String),
}

impl Failure {
    /// The exit status.
    pub const fn exit_code(&self) -> u8 {
        match self {
            Self::Finding(_) => 1,
            Self::Unusable(_) => 2,
            Self::Undelivered(_) => 3,
            Self::PartlyDelivered(_) => 4,
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
            Self::Finding(message)
            | Self::Unusable(message)
            | Self::Undelivered(message)
            | Self::PartlyDelivered(message) => f.write_str(message),
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

/// What a build without the eBPF sampler says when asked for it.
pub const NO_EBPF: &str = "this otel-ctx was built without the eBPF sampler: install it with \
    `cargo install --locked --path cli --features ebpf`";

/// What the tool says of a sampler that cannot start or cannot follow a process: as
/// for the reader's errors, a process that publishes nothing valid is a finding (1), one
/// that cannot be read is not (2).
pub fn sampler_failure(e: otel_ctx_sampler::SamplerError) -> Failure {
    match e {
        otel_ctx_sampler::SamplerError::NoEbpf => {
            Failure::usage(format!("{NO_EBPF}, or sample with ptrace"))
        }
        otel_ctx_sampler::SamplerError::Process(e) => e.into(),
        otel_ctx_sampler::SamplerError::Thread(e) => e.into(),
        e => Failure::Unusable(e.to_string()),
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

/// Set by the Ctrl-C handler of the live views (an `Arc`, as signal-hook's flags are).
pub static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Set by the `SIGUSR1` handler of `profile --all`: print the summary so far.
#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
pub static SUMMARY_ASKED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Has `signal` set `flag`: signal-hook's handler only stores to the atomic, which is
/// async-signal-safe. It installs with `SA_RESTART`, which no wait of the live views
/// needs to be without: `poll` is never restarted (the eBPF sampler's wait wakes), and
/// `thread::sleep` resumes its sleep after a signal either way, so the loops see the
/// flag at their next tick.
fn on(signal: libc::c_int, flag: &Arc<AtomicBool>) -> std::io::Result<()> {
    signal_hook::flag::register(signal, Arc::clone(flag)).map(drop)
}

/// Installs a Ctrl-C handler that sets [`INTERRUPTED`], so live views end cleanly;
/// `SIGTERM` too, so that a service manager's stop ends them the same way.
pub fn catch_sigint() -> Result<(), String> {
    on(SIGINT, &INTERRUPTED)
        .and_then(|()| on(SIGTERM, &INTERRUPTED))
        .map_err(|e| format!("cannot catch Ctrl-C: sigaction failed: {e}"))
}

/// For a run that may last until it is stopped (`profile --all`, `--duration 0`):
/// Ctrl-C and `SIGTERM` set [`INTERRUPTED`] (it ends cleanly, sending what it has), and
/// `SIGUSR1` sets [`SUMMARY_ASKED`].
#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
pub fn catch_signals() -> Result<(), String> {
    for (signal, name, flag) in [
        (SIGINT, "SIGINT", &*INTERRUPTED),
        (SIGTERM, "SIGTERM", &*INTERRUPTED),
        (SIGUSR1, "SIGUSR1", &*SUMMARY_ASKED),
    ] {
        on(signal, flag).map_err(|e| format!("cannot catch {name}: sigaction failed: {e}"))?;
    }
    Ok(())
}

/// Parses `10s`, `500ms`, `2m`, `1h`, `1h30m` (humantime's units: `ns` to `d`), or a
/// bare number of seconds (`1.5`).
pub fn parse_duration(arg: &str) -> Result<Duration, String> {
    let arg = arg.trim();
    if arg.starts_with('-') {
        return Err(format!(
            "{arg:?} is negative: give a duration such as 10s, 500ms or 2m"
        ));
    }
    // humantime wants a unit; a number alone has always meant seconds here.
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = arg
            .parse()
            .map_err(|_| format!("{arg:?} is not a duration such as 10s, 500ms or 2m"))?;
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{arg:?}: {e}"));
    }
    humantime::parse_duration(arg)
        .map_err(|e| format!("{arg:?} is not a duration such as 10s, 500ms or 2m: {e}"))
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
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("1.2.3").is_err());
        assert!(parse_duration("5 parsecs")
            .unwrap_err()
            .contains("unknown time unit \"parsecs\""));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").unwrap_err().contains("negative"));
        assert!(parse_duration("-2s").unwrap_err().contains("negative"));
    }
}
