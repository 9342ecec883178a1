//! `otel-ctx profile --all`, and `profile <pid> --otlp`: CPU profiles of many processes
//! from one sampler (the profile layer's [`FleetProfiler`]: one BPF program and one
//! CPU-clock perf event per CPU for all of them), each process with its own resource,
//! key map, modules and aggregate, exported every `--export-interval` as OTLP profiles
//! (or, without `--otlp`, written as one file per process at the end).
//!
//! With `--all`, the processes are every process on the host that publishes a process
//! context: those found by a scan of `/proc` at the start and every `--rescan`, and those
//! the publication hook reports as they publish. A process that exits (or stops
//! publishing) is dropped after its last samples are exported. A process that publishes
//! a process context but no thread context is profiled with its stacks alone.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use otel_ctx_profile::export::{self, Exporter};
use otel_ctx_profile::otlp::OtlpScope;
use otel_ctx_profile::{
    ExportingFleet, Filter, FleetOptions, FleetProfiler, FoldedOptions, Outputs, Profile,
};
use otel_ctx_sampler::Method;

use super::otlp;
use super::profile_request::{self, Request};
use super::{sampler_failure, text, Failure, INTERRUPTED, SUMMARY_ASKED};

/// How long a step of the loop lasts at most.
const TICK: Duration = Duration::from_millis(100);

/// The fleet's loop: its profiles sent as it goes, or written at the end. One per run,
/// on the stack: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Run {
    Exporting(ExportingFleet),
    Files(FleetProfiler),
}

/// Runs `profile --all` or `profile <pid> --otlp`.
pub fn run(request: &Request, filter: Filter) -> Result<(), Failure> {
    let env = export::ProcessEnvironment;
    let destination = otlp::destination(
        request.otlp.as_ref().map(Option::as_deref),
        &request.otlp_header,
        request.otlp_file.as_deref(),
        otlp::TlsFlags {
            ca: request.otlp_ca.as_deref(),
            client: request
                .otlp_client_cert
                .as_deref()
                .zip(request.otlp_client_key.as_deref()),
        },
        &env,
    )
    .map_err(Failure::Unusable)?;
    let timeout = otlp::timeout(request.otlp_timeout, &env).map_err(Failure::Unusable)?;
    if request.export_interval.is_zero() {
        return Err(Failure::usage(
            "--export-interval 0: give an interval such as 10s",
        ));
    }
    if let Some(export::Destination::File(path)) = &destination {
        otel_ctx_profile::output::check_writable(path)
            .map_err(|e| Failure::Unusable(format!("--otlp-file {e}")))?;
    }
    let files = match &destination {
        Some(_) if request.output.is_some() || request.format.is_some() => {
            return Err(Failure::usage(
                "-o and --format write files; with --otlp or --otlp-file the profiles are sent",
            ))
        }
        Some(_) => None,
        None => Some(request.outputs()?),
    };
    super::catch_signals().map_err(Failure::Unusable)?;
    let mut session = request.session(filter);
    // eBPF only: one BPF program for every process (ptrace rounds over a host's
    // processes would stop every thread of each).
    session.sampler = session.sampler.with_method(Some(Method::Ebpf));
    let options = FleetOptions::default()
        .with_session(session)
        .with_discover(request.pid.is_none().then_some(request.rescan));
    let mut fleet = FleetProfiler::start(options).map_err(|e| {
        Failure::Unusable(format!(
            "{e}; profile --all and --otlp sample with eBPF only (profile <pid> without \
             --otlp falls back to ptrace)"
        ))
    })?;
    if let Some(why) = fleet.hook_refusal() {
        eprintln!(
            "otel-ctx: new publishers are found by the scan every {} only: {why}",
            text::duration(request.rescan.as_nanos() as u64)
        );
    }
    if let Some(pid) = request.pid {
        fleet.follow(pid).map_err(sampler_failure)?;
    }
    let exporter = match destination {
        Some(destination) => Some(
            Exporter::start(
                export::Options::new(
                    destination,
                    OtlpScope {
                        name: "otel-ctx".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    },
                )
                .with_queue_bytes(request.otlp_queue)
                .with_timeout(timeout)
                .with_user_agent(concat!("otel-ctx/", env!("CARGO_PKG_VERSION"))),
            )
            .map_err(|e| Failure::Unusable(e.to_string()))?,
        ),
        None => None,
    };
    let progress = std::io::stderr().is_terminal() && !request.quiet;
    let mut said_failure = false;
    let started = Instant::now();
    let mut shown = started;
    let forever = request.duration.is_zero();
    let mut run = match exporter {
        Some(exporter) => Run::Exporting(ExportingFleet::new(
            fleet,
            exporter,
            request.export_interval,
        )),
        None => Run::Files(fleet),
    };
    while (forever || started.elapsed() < request.duration) && !INTERRUPTED.load(Ordering::Relaxed)
    {
        let (fleet, exporter) = match &mut run {
            Run::Exporting(run) => {
                run.step(TICK).map_err(sampler_failure)?;
                said_failure = say_failure(run.exporter(), said_failure);
                (run.fleet(), Some(run.exporter()))
            }
            Run::Files(fleet) => {
                fleet.step(TICK).map_err(sampler_failure)?;
                (&*fleet, None)
            }
        };
        if request.pid.is_some() && fleet.is_empty() {
            break;
        }
        if SUMMARY_ASKED.swap(false, Ordering::Relaxed) {
            let export = exporter.map(|e| (e.destination().describe(), e.stats()));
            eprint!("{}", summary(fleet, export, started));
        }
        if progress && shown.elapsed() >= Duration::from_millis(500) {
            shown = Instant::now();
            eprint!("\r\x1b[K{}", progress_line(fleet, exporter, started));
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    // The samples taken since the last step; then sampling ends, before the last profiles
    // are made (and debuginfod waited for), and what is queued is sent.
    let (mut fleet, stats) = match run {
        Run::Exporting(run) => {
            if said_failure {
                eprintln!(
                    "otel-ctx: trying what is queued again for at most {} (--otlp-timeout)",
                    text::duration(timeout.as_nanos() as u64)
                );
            }
            let to = run.exporter().destination().describe();
            let (fleet, stats) = run
                .finish(|exporter| said_failure = say_failure(exporter, said_failure))
                .map_err(sampler_failure)?;
            (fleet, Some((to, stats)))
        }
        Run::Files(mut fleet) => {
            fleet.step(Duration::ZERO).map_err(sampler_failure)?;
            fleet.finish();
            (fleet, None)
        }
    };
    if let Some(outputs) = files {
        write_files(fleet.profiles(), &outputs, request)?;
    }
    eprint!("{}", summary(&fleet, stats.clone(), started));
    // What reached the collector is the exit status: all (or nothing to send) 0, none 3,
    // part 4.
    match stats.map(|(to, stats)| (to, stats.delivery())) {
        Some((to, export::Delivery::Failed(loss))) => Err(Failure::Undelivered(format!(
            "nothing was delivered to {to}: {loss}"
        ))),
        Some((to, export::Delivery::Partial(loss))) => Err(Failure::PartlyDelivered(format!(
            "part of the profiles was not delivered to {to}: {loss}"
        ))),
        _ => Ok(()),
    }
}

/// Says the exporter's first failure on stderr once, when it is first seen: where to and
/// why. Whether it is said now.
fn say_failure(exporter: &Exporter, said: bool) -> bool {
    if said {
        return true;
    }
    let stats = exporter.stats();
    let Some(error) = stats.first_error else {
        return false;
    };
    let to = exporter.destination().describe();
    let then = match stats.retries {
        0 => "that request is not sent again",
        _ => "the requests wait and are tried again",
    };
    eprintln!("otel-ctx: cannot deliver to {to}: {error} ({then})");
    true
}

/// Without an OTLP destination: each process's whole profile, where `outputs` says.
fn write_files(
    profiles: Vec<Profile>,
    outputs: &Outputs,
    request: &Request,
) -> Result<(), Failure> {
    let folded = FoldedOptions::default()
        .with_by(Some(request.by.clone()))
        .with_show(request.show);
    for profile in &profiles {
        let service = profile.service_name.as_deref().unwrap_or("no service.name");
        if profile.stats.samples == 0 {
            eprintln!(
                "process {} ({service}): no samples (it did not run on a CPU), no file",
                profile.pid
            );
            continue;
        }
        let path = outputs.path(profile.pid);
        profile_request::write(profile, outputs.format(), &folded, &path)?;
        eprintln!(
            "process {} ({service}): {} samples written to {}",
            profile.pid,
            profile.stats.samples,
            path.display()
        );
    }
    Ok(())
}

fn progress_line(fleet: &FleetProfiler, exporter: Option<&Exporter>, started: Instant) -> String {
    let mut line = format!(
        "profiling {} (eBPF): {}, {} samples",
        processes(fleet.members().len() as u64),
        text::duration(started.elapsed().as_nanos() as u64),
        fleet.sampler().stats().samples,
    );
    if let Some(stats) = exporter.map(Exporter::stats) {
        line.push_str(&format!(
            ", {} requests sent, {} queued, {} dropped",
            stats.sent,
            stats.queued,
            stats.dropped + stats.rejected + stats.dropped_batches
        ));
    }
    line
}

/// `1 process`, `2 processes`.
fn processes(n: u64) -> String {
    format!("{n} {}", text::plural(n, "process", "processes"))
}

/// What was profiled and sent; on stderr at the end and on `SIGUSR1`.
fn summary(
    fleet: &FleetProfiler,
    export: Option<(String, export::Stats)>,
    started: Instant,
) -> String {
    let elapsed = text::duration(started.elapsed().as_nanos() as u64);
    let mut out = format!("otel-ctx profile: {elapsed}; {}", fleet.summary());
    out.push_str(&text::debuginfod(fleet.debuginfod()));
    if let Some((to, stats)) = export {
        out.push_str(&format!("otlp to {to}: {stats}\n"));
    }
    out
}
