//! `otel-ctx profile <pid>`: a CPU profile of one process by trace and route. Every sample
//! is a thread's user registers and the top of its stack, with its thread context (a
//! process that publishes none is profiled by its stacks alone); the stacks are unwound
//! (DWARF CFI, frame pointers) and symbolized in user space by `otel-ctx-profile` (with
//! debuginfod, once sampling is over, when `DEBUGINFOD_URLS` is set), and the profile is
//! written as pprof, folded text or an SVG flame graph.
//!
//! Samples come from the eBPF sampler (a CPU-clock tick on every CPU: threads are sampled
//! while they run) in a build with the `ebpf` feature, or with `--sampler ptrace` (or when BPF
//! cannot be used) from ptrace rounds that stop, at the rate, every thread that ran on a
//! CPU since the last round, each sample weighted by the CPU time the thread's scheduler
//! counted (a thread waiting for a CPU is not counted).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use otel_ctx_profile::{DebuginfodFetch, Filter, FoldedOptions, Format, ProcessProfiler, Profile};
use otel_ctx_sampler::Method;

use super::profile_request::{write, Request};
use super::{catch_sigint, text, Failure, INTERRUPTED};

/// `--trace`: 32 hex digits.
fn trace_id(text: &str) -> Result<[u8; 16], Failure> {
    let bytes = otel_ctx_codec::hex::decode(text)
        .map_err(|e| Failure::usage(format!("--trace {text}: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| Failure::usage(format!("--trace {text}: a trace id has 32 hex digits")))
}

/// Runs `profile`.
pub fn run(request: &Request) -> Result<(), Failure> {
    if request.hz == 0 || request.hz > 10_000 {
        return Err(Failure::usage(format!(
            "--hz {}: use a rate between 1 and 10000",
            request.hz
        )));
    }
    let mut filter = Filter::default();
    if let Some(trace) = &request.trace {
        filter = filter.with_trace_id(trace_id(trace)?);
    }
    let fleet = request.all || request.otlp.is_some() || request.otlp_file.is_some();
    let pid = match request.pid {
        Some(pid) if !fleet => pid,
        _ => return run_fleet(request, filter),
    };
    let outputs = request.outputs()?;
    let (path, format) = (outputs.path(pid), outputs.format());
    catch_sigint().map_err(Failure::Unusable)?;
    let mut session =
        ProcessProfiler::start(pid, request.session(filter)).map_err(super::sampler_failure)?;
    if let Some(why) = session.sampler().fallback() {
        if !request.quiet || cfg!(feature = "ebpf") {
            eprintln!("otel-ctx: {why}; sampling with ptrace");
        }
    }
    let progress = !request.quiet && std::io::stderr().is_terminal();
    let mut last_progress = Instant::now();
    session
        .run(request.duration, |session| {
            if progress && last_progress.elapsed() >= Duration::from_millis(250) {
                last_progress = Instant::now();
                eprint!("\r\x1b[K{}", progress_line(session, request));
            }
            INTERRUPTED.load(Ordering::Relaxed)
        })
        .map_err(super::sampler_failure)?;
    if progress {
        eprint!("\r\x1b[K");
    }
    // Sampling is over: the sampler stops, and debuginfod may be waited on, for at most
    // --debuginfod-time.
    let asking = progress && std::env::var_os("DEBUGINFOD_URLS").is_some();
    if asking {
        eprint!("asking debuginfod for the debug files of stripped modules...");
    }
    session.finish();
    if asking {
        eprint!("\r\x1b[K");
    }
    let fetches = session.debuginfod();
    let profile = session.profile();
    let folded = FoldedOptions::default()
        .with_by(Some(request.by.clone()))
        .with_show(request.show);
    write(&profile, format, &folded, &path)?;
    // Summaries and progress go to stderr, whatever the output: stdout is the profile's
    // when it is `-`, and a script's otherwise.
    eprint!(
        "{}",
        summary(&session, &profile, fetches, request, (&path, format))
    );
    Ok(())
}

/// `--all`, or an OTLP destination: many processes (or one) from one eBPF sampler,
/// exported as they go.
fn run_fleet(request: &Request, filter: Filter) -> Result<(), Failure> {
    if request.sampler.method() == Some(Method::Ptrace) {
        return Err(Failure::usage(
            "--sampler ptrace: profile --all, --otlp and --otlp-file sample with eBPF only",
        ));
    }
    #[cfg(feature = "ebpf")]
    {
        super::fleet::run(request, filter)
    }
    #[cfg(not(feature = "ebpf"))]
    {
        let _ = filter;
        Err(Failure::usage(format!(
            "{}, which profile --all, --otlp and --otlp-file need",
            super::NO_EBPF
        )))
    }
}

fn progress_line(session: &ProcessProfiler, request: &Request) -> String {
    let stats = session.sampler().stats();
    let of = match request.duration.is_zero() {
        true => "until stopped".to_owned(),
        false => format!("of {}", text::duration(request.duration.as_nanos() as u64)),
    };
    format!(
        "profiling {} ({}): {} {of}, {} samples, {} lost",
        session.pid(),
        session.sampler().method().name(),
        text::duration(session.elapsed().as_nanos() as u64),
        stats.samples,
        stats.lost,
    )
}

/// The closing summary: the session's (samples, frames, Python), then the debug files
/// fetched and where the profile went.
fn summary(
    session: &ProcessProfiler,
    profile: &Profile,
    fetches: &[DebuginfodFetch],
    request: &Request,
    (path, format): (&Path, Format),
) -> String {
    let mut out = session.summary(profile).by(&request.by).to_string();
    out.push_str(&text::debuginfod(fetches));
    if path.as_os_str() != "-" {
        let what = format.description();
        out.push_str(&format!("{what} written to {}\n", path.display()));
    }
    out
}
