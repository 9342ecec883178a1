//! What a session did, in a few lines of text for a log or a terminal: the samples taken
//! and how, what could not be unwound or named and why, the Python frames, the processes
//! a fleet followed. Each is a [`Display`](fmt::Display) over the session's counts, so
//! that a tool and an embedder say the same thing.

use std::fmt::{self, Display, Formatter};
use std::time::Duration;

use otel_ctx_reader::ThreadError;
use otel_ctx_sampler::Following;

use super::fleet::FleetProfiler;
use super::process::ProcessProfiler;
use crate::{Profile, Stats};

/// How many followed processes [`FleetSummary`] lists, one line each.
const LISTED_MEMBERS: usize = 20;
/// How many groups of samples the off-CPU lines list, one line each.
const LISTED_GROUPS: usize = 20;

/// `n` and the noun that goes with it: `1 process`, `2 processes`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration in seconds with one decimal, as the summaries give it.
fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// [`ProcessProfiler::summary`]: one process's session and the profile made of it.
#[derive(Debug)]
pub struct ProcessSummary<'a> {
    session: &'a ProcessProfiler,
    profile: &'a Profile,
    by: &'a str,
}

impl<'a> ProcessSummary<'a> {
    /// The label whose values the off-CPU lines group the time by (a profile of
    /// off-CPU time only). Default `http.route`.
    #[must_use]
    pub const fn by(mut self, by: &'a str) -> Self {
        self.by = by;
        self
    }
}

impl ProcessProfiler {
    /// What this session did and what `profile` (made of it) holds, as text: a line of
    /// samples (with and without a context, filtered, unreadable, lost; distinct stacks;
    /// walks stopped short, by cause), a line of frames (those left `[unknown]`, by
    /// cause), the perf map read, each symbol source that failed, the Python frames
    /// (the interpreter, the samples with Python frames, the failures by reason), and
    /// the modules left out; in a profile of off-CPU time, the time on and off a CPU
    /// of each route ([`ProcessSummary::by`]). Each line ends with a newline.
    pub const fn summary<'a>(&'a self, profile: &'a Profile) -> ProcessSummary<'a> {
        ProcessSummary {
            session: self,
            profile,
            by: "http.route",
        }
    }
}

impl Display for ProcessSummary<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let (session, stats) = (self.session, &self.profile.stats);
        let sampled = session.sampler().stats();
        if let Following::StacksOnly(why) = session.following() {
            writeln!(f, "{}", stacks_only(session.pid(), why))?;
        }
        write!(
            f,
            "{} samples in {} ({}): {} with a thread context, {} without, {} filtered out, \
             {} unreadable, {} lost; {} distinct stacks; {} walks stopped short",
            stats.samples,
            seconds(session.elapsed()),
            session.sampler().method().name(),
            stats.with_context,
            stats.without_context,
            stats.filtered,
            sampled.unreadable_samples(),
            sampled.lost,
            stats.distinct_stacks,
            stats.unwind_failures(),
        )?;
        let failures: Vec<String> = stats
            .unwind_ends
            .iter()
            .filter(|(end, _)| end.is_failure())
            .map(|(end, n)| format!("{n} {}", end.name()))
            .collect();
        if !failures.is_empty() {
            write!(f, " ({})", failures.join(", "))?;
        }
        writeln!(f)?;
        let nothing = stats.samples + stats.filtered + sampled.unreadable_samples() + sampled.lost;
        if nothing == 0 && !session.has_exited() {
            writeln!(
                f,
                "process {} never ran on a CPU in the {} sampled (it slept or waited \
                 throughout): the profile is empty",
                session.pid(),
                seconds(session.elapsed()),
            )?;
        }
        if self.profile.off_cpu {
            time_by(f, self.profile, self.by, &sampled)?;
        }
        symbols(f, self.profile)?;
        match session.java_perf_map() {
            Some(Ok(java)) => {
                write!(
                    f,
                    "java perf map: asked the JVM {}, written {}",
                    count(u64::from(java.requests), "time", "times"),
                    count(u64::from(java.written), "time", "times"),
                )?;
                match &java.last_error {
                    Some(e) => writeln!(f, "; the last request failed: {e}")?,
                    None => writeln!(f)?,
                }
            }
            Some(Err(e)) => writeln!(f, "java perf map: process {} not asked: {e}", session.pid())?,
            None => {}
        }
        python(f, self.session, stats)?;
        for skipped in &stats.skipped_modules {
            writeln!(f, "skipped {}: {}", skipped.path, skipped.reason)?;
        }
        Ok(())
    }
}

/// Why a process is profiled by its stacks alone, said once: the reader's words for a
/// process that exports no slot already say that it publishes no thread contexts.
fn stacks_only(pid: u32, why: &ThreadError) -> String {
    match why {
        ThreadError::NotExported { skipped } if skipped.is_empty() => format!(
            "process {pid} publishes no thread contexts (no module exports otel_thread_ctx_v1): \
             samples are labeled by thread alone"
        ),
        // The reader's words that name the process already (a schema it does not know).
        why if why.to_string().starts_with(&format!("process {pid} ")) => {
            format!("{why}: samples are labeled by thread alone")
        }
        why => format!(
            "process {pid}: no thread contexts read ({why}): samples are labeled by thread alone"
        ),
    }
}

/// The time on and off a CPU of each group of samples by label `by`, a line each (the
/// first [`LISTED_GROUPS`]).
fn time_by(
    f: &mut Formatter<'_>,
    profile: &Profile,
    by: &str,
    sampled: &otel_ctx_sampler::SamplerStats,
) -> fmt::Result {
    if sampled.waits > 0 {
        writeln!(
            f,
            "off-CPU: {} system calls left a CPU, {} of them sampled",
            sampled.waits, sampled.off_cpu_samples
        )?;
    }
    let groups = profile.time_by(by);
    writeln!(f, "time by {by}, on a CPU and off it:")?;
    let secs = |ns: u64| seconds(Duration::from_nanos(ns));
    for (group, on, off) in groups.iter().take(LISTED_GROUPS) {
        let wall = on.saturating_add(*off).max(1);
        writeln!(
            f,
            "  {group}: {} on a CPU, {} off ({:.0}% off)",
            secs(*on),
            secs(*off),
            *off as f64 * 100.0 / wall as f64,
        )?;
    }
    if groups.len() > LISTED_GROUPS {
        writeln!(f, "  ... and {} more", groups.len() - LISTED_GROUPS)?;
    }
    Ok(())
}

/// The profile's frames: distinct ones, those left `[unknown]` by cause, the perf map
/// read, and each symbol source that failed.
fn symbols(f: &mut Formatter<'_>, profile: &Profile) -> fmt::Result {
    let stats = &profile.stats;
    write!(
        f,
        "{} distinct frames, {} left [unknown]",
        profile.locations.len(),
        stats.unknown_frame_count()
    )?;
    let causes: Vec<String> = stats
        .unknown_frames
        .iter()
        .map(|(cause, n)| format!("{n} {cause}"))
        .collect();
    if !causes.is_empty() {
        write!(f, " ({})", causes.join(", "))?;
    }
    let dwarf = &stats.debug_info;
    if dwarf.modules > 0 {
        write!(
            f,
            "; DWARF of {}: {:.1} MiB, {} of {} units parsed",
            count(dwarf.modules as u64, "module", "modules"),
            dwarf.bytes as f64 / f64::from(1 << 20),
            dwarf.units_parsed,
            dwarf.units,
        )?;
    }
    writeln!(f)?;
    if let Some(map) = &stats.perf_map {
        writeln!(
            f,
            "perf map {}: {}, {} skipped",
            map.path,
            count(map.symbols as u64, "function", "functions"),
            count(map.bad_lines, "bad line", "bad lines"),
        )?;
    }
    for problem in &stats.symbol_problems {
        writeln!(
            f,
            "symbols of {} ({}): {}",
            problem.subject, problem.cause, problem.problem
        )?;
    }
    Ok(())
}

/// The process's Python frames: its interpreter, the samples with Python frames, the
/// frames and the failures by reason; why a process that claims to run Python has none;
/// nothing for a process without Python.
fn python(f: &mut Formatter<'_>, session: &ProcessProfiler, stats: &Stats) -> fmt::Result {
    let (sampler, pid) = (session.sampler(), session.pid());
    if let Some(refused) = sampler.python_refusal(pid) {
        return writeln!(f, "python: none read: {refused}");
    }
    let Some(interpreter) = sampler.python(pid) else {
        return Ok(());
    };
    let python = &stats.python;
    write!(
        f,
        "python: CPython {} ({}): {} samples with Python frames, {} frames, {} distinct; {} \
         code objects named ({} KiB)",
        interpreter.version(),
        interpreter.module(),
        python.samples,
        python.frames,
        python.locations,
        interpreter.code_cache().reads,
        interpreter.code_cache().bytes().div_ceil(1024),
    )?;
    if !python.failures.is_empty() {
        let failures: Vec<String> = python
            .failures
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        write!(f, "; not walked: {}", failures.join(", "))?;
    }
    writeln!(f)
}

/// [`FleetProfiler::summary`]: the processes a fleet followed and its samples.
#[derive(Debug)]
pub struct FleetSummary<'a> {
    fleet: &'a FleetProfiler,
}

impl FleetProfiler {
    /// What the fleet did so far, as text: the processes followed (now, without thread
    /// contexts, exited, no longer publishing), the samples (with a context, unreadable,
    /// lost), discovery's scans and publication events, the publishers it could not
    /// follow, and a line per process followed now (the first 20). Each line ends with a
    /// newline.
    pub const fn summary(&self) -> FleetSummary<'_> {
        FleetSummary { fleet: self }
    }
}

impl Display for FleetSummary<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let fleet = self.fleet;
        let c = fleet.counts();
        let sampled = fleet.sampler().stats();
        let members = fleet.members();
        let stacks_only = members.iter().filter(|m| m.stacks_only).count();
        writeln!(
            f,
            "{} followed ({} now, {stacks_only} of them without thread contexts; {} exited, \
             {} stopped publishing); {} samples, {} with a thread context, {} unreadable, {} \
             lost",
            count(c.followed, "process", "processes"),
            members.len(),
            c.exited,
            c.unpublished,
            sampled.samples,
            sampled.with_context,
            sampled.unreadable_samples(),
            sampled.lost,
        )?;
        if c.scans > 0 {
            writeln!(
                f,
                "discovery: {} of /proc, {}{}",
                count(c.scans, "scan", "scans"),
                count(c.events, "publication event", "publication events"),
                if fleet.hook_refusal().is_none() {
                    ""
                } else {
                    " (no hook)"
                }
            )?;
        }
        if c.refused > 0 {
            writeln!(
                f,
                "{} publishers could not be followed; the last: {}",
                c.refused,
                c.last_refusal.as_deref().unwrap_or("")
            )?;
        }
        for m in members.iter().take(LISTED_MEMBERS) {
            writeln!(
                f,
                "  {} {} {}{}",
                m.pid,
                m.comm,
                m.service.as_deref().unwrap_or("(no service.name)"),
                if m.stacks_only {
                    " (stacks only: no thread contexts)"
                } else {
                    ""
                }
            )?;
        }
        if members.len() > LISTED_MEMBERS {
            writeln!(f, "  ... and {} more", members.len() - LISTED_MEMBERS)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_thread_contexts_is_said_once() {
        let none = ThreadError::NotExported {
            skipped: Vec::new(),
        };
        let line = stacks_only(687, &none);
        assert_eq!(
            line,
            "process 687 publishes no thread contexts (no module exports otel_thread_ctx_v1): \
             samples are labeled by thread alone"
        );
        assert_eq!(line.matches("no thread contexts").count(), 1, "{line}");
        // Another reason is given as the reader says it, the process named once.
        let schema = ThreadError::Schema {
            pid: 687,
            seen: Some("v9".to_owned()),
        };
        let line = stacks_only(687, &schema);
        assert!(
            line.starts_with("process 687 announces thread-context schema"),
            "{line}"
        );
        assert_eq!(line.matches("687").count(), 1, "{line}");
    }
}
