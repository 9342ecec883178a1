//! `otel-ctx watch <pid>`: a small profiler view. Samples every thread at a fixed rate
//! and counts samples per value of one thread-context attribute (such as `http.route`).
//!
//! The library's sampler takes the samples: by default (`--sampler ebpf`, in a build with
//! the `ebpf` feature, where the kernel allows it) a BPF program reads the record of
//! whichever target thread a CPU-clock tick interrupts, at the rate on every CPU, without
//! stopping anything; otherwise (`--sampler ptrace`) each round stops every thread with
//! ptrace and reads its record. Both name attributes with the same
//! key map and count into the same table ([`Tally`]).

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::tally::Tally;
use super::text::Screen;
use super::{catch_sigint, json, out, text, Failure, INTERRUPTED};

/// `watch`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Request {
    /// The process id.
    pid: u32,
    /// Samples per second: on every CPU with eBPF, of every thread with ptrace.
    #[arg(long, default_value_t = 99)]
    hz: u32,
    /// How long to sample, such as `10s`; Ctrl-C stops earlier.
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    duration: Duration,
    /// The attribute whose values group the samples.
    #[arg(long, default_value = "http.route")]
    by: String,
    /// As for `show`: name attributes by key index (`--by '#0'`), whatever the process
    /// context announces.
    #[arg(long)]
    raw_keys: bool,
    /// Print one JSON summary at the end instead of a table.
    #[arg(long)]
    json: bool,
    /// Show each value's time on a CPU and off it (as `profile --off-cpu` measures it).
    #[arg(long)]
    off_cpu: bool,
    #[command(flatten)]
    sampler: super::SamplerFlag,
}

/// Runs `watch` with the sampler `--sampler` asks for (none: eBPF where it can be used,
/// else ptrace rounds).
pub fn run(request: &Request) -> Result<(), Failure> {
    let Request {
        pid,
        hz,
        duration,
        raw_keys,
        json: as_json,
        ..
    } = *request;
    let by = request.by.as_str();
    if hz == 0 || hz > 10_000 {
        return Err(Failure::usage(format!(
            "--hz {hz}: use a rate between 1 and 10000"
        )));
    }
    catch_sigint().map_err(Failure::Unusable)?;
    let method = request.sampler.method();
    let mut sampler = Tally::open(pid, hz, by, raw_keys, method, request.off_cpu)?;
    // What the reader could not analyse, and a grouping key the process does not have,
    // are said before sampling starts (on stderr, so that --json stays one document). A
    // key may be registered later (the key map grows as a service runs): a warning, and
    // sampling goes on.
    eprint!("{}", sampler.skipped_lines());
    if let Some(note) = sampler.key_note() {
        eprintln!(
            "otel-ctx: warning: {note} (its samples count as (no {by}) unless the process \
             registers it)"
        );
    }
    let tty = !as_json && std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut screen = Screen::default();
    let mut last_draw = started;
    let mut ended_by = "time is up";
    if !as_json && !tty {
        eprintln!("{}; {}", sampler.heading(), sampler.how());
    }
    while started.elapsed() < duration {
        if INTERRUPTED.load(Ordering::Relaxed) {
            ended_by = "interrupted";
            break;
        }
        let left = duration.saturating_sub(started.elapsed());
        if !sampler.step(left.min(Duration::from_millis(100)))? {
            ended_by = "the process exited";
            break;
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            screen.draw(&frame(&sampler, pid, hz, started.elapsed(), duration));
        }
    }
    if sampler.is_ebpf() {
        // The samples the BPF program took since the last wait: counted, without waiting.
        let _ = sampler.step(Duration::ZERO);
    }
    let elapsed = started.elapsed();
    if as_json {
        json::print(&sampler.json(elapsed))?;
    } else {
        if tty {
            screen.draw(&frame(&sampler, pid, hz, elapsed, duration));
        } else {
            out(&format!(
                "{}{}",
                sampler.table(),
                sampler.unreadable_lines()
            ))?;
        }
        eprintln!(
            "{ended_by} after {}: {}",
            text::duration(elapsed.as_nanos() as u64),
            sampler.totals(elapsed)
        );
    }
    if sampler.key_note().is_some() {
        eprintln!(
            "otel-ctx: warning: {by} is still not in the key map: samples without it counted \
             as (no {by})"
        );
    }
    Ok(())
}

/// One frame of the live view.
pub fn frame(sampler: &Tally, pid: u32, hz: u32, elapsed: Duration, duration: Duration) -> String {
    let how = if sampler.is_ebpf() { " (eBPF)" } else { "" };
    let note = sampler
        .key_note()
        .map_or_else(String::new, |note| format!("({note})\n"));
    format!(
        "otel-ctx watch: pid {pid} at {hz} Hz{how}, {} of {} (Ctrl-C stops)\n{}\n{note}{}{}",
        text::duration(elapsed.as_nanos() as u64),
        text::duration(duration.as_nanos() as u64),
        sampler.heading(),
        sampler.table(),
        sampler.unreadable_lines()
    )
}
