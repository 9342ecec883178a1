//! `otel-ctx profile --all`, and `profile <pid> --otlp`: CPU profiles of many processes
//! from one eBPF sampler (one BPF program and one CPU-clock perf event per CPU for all of
//! them), each process with its own resource, key map, modules and aggregate, exported
//! every `--export-interval` as OTLP profiles (or, without `--otlp`, written as one file
//! per process at the end).
//!
//! With `--all`, the processes are every process on the host that publishes a process
//! context: those found by a scan of `/proc` at the start and every `--rescan` (on the
//! discovery thread of [`scout`], with the first read of each new publisher), and those
//! the publication hook reports as they publish (a BPF program on `prctl`'s
//! `PR_SET_VMA_ANON_NAME` call that OTEP 4719 has every writer make; it also reports
//! updates, which are read again). A process that exits (or stops publishing) is dropped
//! after its last samples are exported. A process that publishes a process context but
//! no thread context is profiled with its stacks alone.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use otel_ctx_profile::otlp::OtlpScope;
use otel_ctx_profile::{Filter, FoldedOptions, ModuleCache, Profile, ProfileOptions, Profiler};
use otel_ctx_reader::{ProcessContextReader, ProcessMaps, ReaderOptions, Snapshot, ThreadReader};

use super::otlp::{self, Exporter};

mod scout;

use super::profile::Request;
use super::{text, Failure, INTERRUPTED, SUMMARY_ASKED};
use scout::{Found, Report, Scout};

/// How often, at most, one process's maps are read again on evidence (samples outside
/// every known module, a slot that cannot be computed).
const MAPS_REFRESH: Duration = Duration::from_secs(1);
/// How often the followed processes are checked for having exited.
const EXIT_CHECK: Duration = Duration::from_secs(1);
/// How soon after a publication event its process is read (a burst of updates is read
/// once).
const EVENT_DELAY: Duration = Duration::from_millis(20);
/// How long a sampler wait lasts: the loop's tick.
const TICK: Duration = Duration::from_millis(100);

/// One followed process.
struct Followed {
    /// Its start time (`/proc/<pid>/stat` field 22): a process with the same id and
    /// another start time is another process.
    start_time: u64,
    comm: String,
    /// Its resource's `service.name`.
    service: Option<String>,
    profiler: Profiler,
    context: ProcessContextReader,
    published_at: u64,
    /// Sampled without a thread context (no `otel_thread_ctx_v1` to read, yet).
    stacks_only: bool,
    names: HashMap<u32, String>,
    maps_suspect: bool,
    maps_read: Instant,
    unreadable: u64,
}

/// What happened to the processes.
#[derive(Default)]
struct Counts {
    followed: u64,
    exited: u64,
    unpublished: u64,
    /// Processes that publish a context but could not be followed, and why (the last).
    refused: u64,
    last_refusal: Option<String>,
    events: u64,
    samples: u64,
    with_context: u64,
    unreadable: u64,
}

struct Fleet {
    sampler: otel_ctx_reader::EbpfSampler,
    hook: Option<otel_ctx_reader::PublicationHook>,
    /// The discovery thread (`--all`).
    scout: Option<Scout>,
    readers: HashMap<u32, ThreadReader>,
    processes: HashMap<u32, Followed>,
    cache: ModuleCache,
    options: ProfileOptions,
    /// Processes to read soon (publication events), by when.
    pending: HashMap<u32, Instant>,
    /// The last profiles of processes gone since the last export.
    finished: Vec<Profile>,
    counts: Counts,
    own_pid: u32,
}

/// `/proc/<pid>/stat`'s start time, in clock ticks since boot; `None` when the process
/// is gone (or the file lies).
fn start_time(pid: u32) -> Option<u64> {
    stat_start_time(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time in a `/proc/<pid>/stat` line.
fn stat_start_time(stat: &[u8]) -> Option<u64> {
    // `pid (comm) state ppid ...`: comm may contain anything, the fields after the last
    // `)` do not. The start time is field 22, the 20th after comm.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

impl Fleet {
    /// Starts following process `pid`, which must publish a process context; an error
    /// says why it cannot be followed (a process without a context is `Finding`).
    fn follow(&mut self, pid: u32) -> Result<(), Failure> {
        if pid == self.own_pid || self.processes.contains_key(&pid) {
            return Ok(());
        }
        self.adopt(scout::prepare(pid)?)
    }

    /// Follows the process `found` describes (read by [`scout::prepare`]).
    fn adopt(&mut self, found: Found) -> Result<(), Failure> {
        let Found {
            pid,
            start_time,
            maps,
            context,
            snapshot,
            reader,
        } = found;
        if pid == self.own_pid || self.processes.contains_key(&pid) {
            return Ok(());
        }
        let stacks_only = reader.is_none();
        match &reader {
            Some(reader) => self.sampler.add_process(reader),
            None => self.sampler.add_process_stacks(pid),
        }
        .map_err(|e| Failure::Unusable(e.to_string()))?;
        if let Some(reader) = reader {
            self.readers.insert(pid, reader);
        }
        let mut profiler = Profiler::with_cache(pid, self.options.clone(), self.cache.clone());
        profiler.update_maps(&maps);
        profiler.set_process_context(Some(&snapshot));
        self.processes.insert(
            pid,
            Followed {
                start_time,
                comm: otel_ctx_reader::comm(pid).unwrap_or_default(),
                service: snapshot.context.service_name().map(str::to_owned),
                profiler,
                context,
                published_at: snapshot.monotonic_published_at_ns,
                stacks_only,
                names: HashMap::new(),
                maps_suspect: false,
                maps_read: Instant::now(),
                unreadable: 0,
            },
        );
        if let Some(scout) = &self.scout {
            scout.set_followed(pid, true);
        }
        self.counts.followed += 1;
        Ok(())
    }

    fn refuse(&mut self, pid: u32, why: &str) {
        self.counts.refused += 1;
        self.counts.last_refusal = Some(format!("process {pid}: {why}"));
    }

    /// Reads `pid`'s process context again after a publication event: its resource and
    /// key map may have changed, or it may publish thread contexts now.
    fn refresh(&mut self, pid: u32) {
        let Some(followed) = self.processes.get_mut(&pid) else {
            if let Some(scout) = &self.scout {
                scout.look(pid);
            }
            return;
        };
        let started = followed.start_time;
        match followed.context.read_if_changed(followed.published_at) {
            Ok(Some(snapshot)) => self.take_snapshot(pid, &snapshot),
            Ok(None) => {}
            Err(_) => {
                // Republished elsewhere, or unpublished: look for it from the maps.
                let found = ProcessMaps::read(pid).ok().and_then(|maps| {
                    let mut reader =
                        ProcessContextReader::from_maps(&maps, ReaderOptions::default()).ok()?;
                    let snapshot = reader.read().ok()?;
                    Some((reader, snapshot))
                });
                match found {
                    Some((reader, snapshot)) => {
                        if let Some(f) = self.processes.get_mut(&pid) {
                            f.context = reader;
                        }
                        self.take_snapshot(pid, &snapshot);
                    }
                    None => {
                        let exited = start_time(pid) != Some(started);
                        self.drop_process(pid, exited);
                    }
                }
            }
        }
    }

    /// Takes a new snapshot of `pid`'s process context: the profile's resource, the
    /// reader's key map, and a thread reader when the process has none yet.
    fn take_snapshot(&mut self, pid: u32, snapshot: &Snapshot) {
        let Some(followed) = self.processes.get_mut(&pid) else {
            return;
        };
        followed.published_at = snapshot.monotonic_published_at_ns;
        followed.service = snapshot.context.service_name().map(str::to_owned);
        followed.profiler.set_process_context(Some(snapshot));
        if let Some(reader) = self.readers.get_mut(&pid) {
            reader.refresh_key_map();
        } else if followed.stacks_only {
            let reader = ProcessMaps::read(pid)
                .ok()
                .and_then(|maps| scout::open_reader(&maps));
            if let Some(reader) = reader {
                if self
                    .sampler
                    .set_process_resolution(pid, reader.resolution())
                    .is_ok()
                {
                    followed.stacks_only = false;
                    self.readers.insert(pid, reader);
                }
            }
        }
    }

    /// Stops following `pid`; its samples so far go out with the next export.
    fn drop_process(&mut self, pid: u32, exited: bool) {
        let Some(followed) = self.processes.remove(&pid) else {
            return;
        };
        self.sampler.remove_process(pid);
        self.readers.remove(&pid);
        self.pending.remove(&pid);
        if let Some(scout) = &self.scout {
            scout.set_followed(pid, false);
        }
        if exited {
            self.counts.exited += 1;
        } else {
            self.counts.unpublished += 1;
        }
        self.counts.unreadable += followed.unreadable;
        let profile = followed.profiler.profile();
        if !profile.entries.is_empty() && self.finished.len() < otel_ctx_reader::EBPF_MAX_PROCESSES
        {
            self.finished.push(profile);
        }
    }

    /// Drops the processes that exited (or were replaced by another with their id).
    fn check_exits(&mut self) {
        let gone: Vec<u32> = self
            .processes
            .iter()
            .filter(|(&pid, f)| start_time(pid) != Some(f.start_time))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in gone {
            self.drop_process(pid, true);
        }
    }

    /// Takes the discovery thread's reports: new publishers are followed; followed ones
    /// a scan no longer found are read again (and dropped if they stopped publishing).
    fn take_reports(&mut self) {
        let Some(scout) = &self.scout else { return };
        let mut reports = Vec::new();
        while let Some(report) = scout.report() {
            reports.push(report);
        }
        for report in reports {
            match report {
                Report::Found(found) => {
                    let pid = found.pid;
                    if let Err(Failure::Unusable(why)) = self.adopt(*found) {
                        self.refuse(pid, &why);
                    }
                }
                Report::Refused(pid, why) => self.refuse(pid, &why),
                Report::Scanned(publishers) => {
                    let missing: Vec<u32> = self
                        .processes
                        .keys()
                        .copied()
                        .filter(|pid| !publishers.contains(pid))
                        .collect();
                    for pid in missing {
                        self.refresh(pid);
                    }
                }
            }
        }
    }

    /// Takes the publication events: each process is read once they stop coming for
    /// [`EVENT_DELAY`].
    fn take_events(&mut self) {
        let Some(hook) = &mut self.hook else { return };
        while let Some(pid) = hook.next_pid() {
            self.counts.events += 1;
            self.pending.insert(pid, Instant::now() + EVENT_DELAY);
        }
        let now = Instant::now();
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in due {
            self.pending.remove(&pid);
            self.refresh(pid);
        }
    }

    /// Profiles every sample waiting in the ring.
    fn take_samples(&mut self) {
        while let Some((stack, context)) = self.sampler.next_stack_sample(&mut self.readers) {
            let Some(followed) = self.processes.get_mut(&stack.pid) else {
                continue;
            };
            let context = match context {
                Ok(context) => context,
                Err(e) => {
                    followed.unreadable += 1;
                    followed.maps_suspect |= matches!(e, otel_ctx_reader::SampleError::Tls(_));
                    None
                }
            };
            self.counts.samples += 1;
            self.counts.with_context += u64::from(context.is_some());
            let pid = stack.pid;
            let name = followed.names.entry(stack.tid).or_insert_with(|| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{}/comm", stack.tid))
                    .map(|n| n.trim_end().to_owned())
                    .unwrap_or_default()
            });
            let sample =
                otel_ctx_profile::Sample::new(stack.tid, name, stack.registers, stack.stack)
                    .with_context(context.as_ref().map(Into::into));
            followed.maps_suspect |= followed.profiler.add(&sample).outside_modules;
        }
    }

    /// Reads the maps again of the processes whose samples say they changed.
    fn refresh_maps(&mut self) {
        for (&pid, followed) in &mut self.processes {
            if !followed.maps_suspect || followed.maps_read.elapsed() < MAPS_REFRESH {
                continue;
            }
            followed.maps_suspect = false;
            followed.maps_read = Instant::now();
            if let Ok(maps) = ProcessMaps::read(pid) {
                followed.profiler.update_maps(&maps);
            }
            if let Some(reader) = self.readers.get_mut(&pid) {
                if let Ok(true) = reader.refresh_modules() {
                    let _ = self
                        .sampler
                        .set_process_resolution(pid, reader.resolution());
                }
                reader.refresh_key_map();
            }
        }
    }

    /// The profiles of the interval that ends now (the processes gone since included),
    /// each process's aggregate started again.
    fn take_profiles(&mut self) -> Vec<Profile> {
        let mut profiles = std::mem::take(&mut self.finished);
        for followed in self.processes.values_mut() {
            let profile = followed.profiler.profile();
            followed.profiler.reset();
            // Thread names are looked up again in the next interval: threads come and go.
            followed.names.clear();
            if !profile.entries.is_empty() {
                profiles.push(profile);
            }
        }
        profiles
    }
}

/// Runs `profile --all` or `profile <pid> --otlp`.
pub fn run(request: &Request, filter: Filter) -> Result<(), Failure> {
    let env = otlp::ProcessEnvironment;
    let destination = otlp::destination(
        request.otlp.as_ref().map(Option::as_deref),
        &request.otlp_header,
        request.otlp_file.as_deref(),
        &env,
    )
    .map_err(Failure::Unusable)?;
    let timeout = match request.otlp_timeout {
        Some(timeout) => timeout,
        None => otlp::timeout(&env).map_err(Failure::Unusable)?,
    };
    if request.export_interval.is_zero() {
        return Err(Failure::usage(
            "--export-interval 0: give an interval such as 10s",
        ));
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
    let period = 1_000_000_000 / u64::from(request.hz);
    let options = ProfileOptions::default()
        .with_period_ns(period)
        .with_lines(request.lines)
        .with_filter(filter);
    super::catch_signals().map_err(Failure::Unusable)?;
    let ebpf = otel_ctx_reader::EbpfOptions::default()
        .with_frequency_hz(u64::from(request.hz))
        .with_stack_size(request.stack_size)
        .with_max_processes(request.max_processes);
    let sampler = otel_ctx_reader::EbpfSampler::new(ebpf).map_err(|e| {
        Failure::Unusable(format!(
            "{e}; profile --all and --otlp sample with eBPF only (profile <pid> without \
             --otlp falls back to ptrace)"
        ))
    })?;
    let hook = if request.pid.is_none() {
        match otel_ctx_reader::PublicationHook::new() {
            Ok(hook) => Some(hook),
            Err(e) => {
                eprintln!(
                    "otel-ctx: new publishers are found by the scan every {} only: {e}",
                    text::duration(request.rescan.as_nanos() as u64)
                );
                None
            }
        }
    } else {
        None
    };
    let scout = match request.pid {
        Some(_) => None,
        None => Some(Scout::start(request.rescan, std::process::id()).map_err(Failure::Unusable)?),
    };
    let mut fleet = Fleet {
        sampler,
        hook,
        scout,
        readers: HashMap::new(),
        processes: HashMap::new(),
        cache: ModuleCache::default(),
        options,
        pending: HashMap::new(),
        finished: Vec::new(),
        counts: Counts::default(),
        own_pid: std::process::id(),
    };
    if let Some(pid) = request.pid {
        fleet.follow(pid)?;
    }
    let exporter = match destination {
        Some(destination) => Some(
            Exporter::start(otlp::Options {
                destination,
                queue_bytes: request.otlp_queue,
                timeout,
                scope: OtlpScope {
                    name: "otel-ctx".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                },
            })
            .map_err(Failure::Unusable)?,
        ),
        None => None,
    };
    let progress = std::io::stderr().is_terminal() && !request.quiet;
    let started = Instant::now();
    let (mut exported, mut exits, mut shown) = (started, started, started);
    let forever = request.duration.is_zero();
    while (forever || started.elapsed() < request.duration) && !INTERRUPTED.load(Ordering::Relaxed)
    {
        // A failed wait shows as no samples; the next tick waits again.
        let _ = fleet.sampler.wait(TICK);
        fleet.take_samples();
        fleet.take_reports();
        fleet.take_events();
        fleet.refresh_maps();
        if exits.elapsed() >= EXIT_CHECK {
            exits = Instant::now();
            fleet.check_exits();
            if request.pid.is_some() && fleet.processes.is_empty() {
                break;
            }
        }
        if let Some(exporter) = &exporter {
            if exported.elapsed() >= request.export_interval {
                exported = Instant::now();
                exporter.submit(fleet.take_profiles());
            }
        }
        if SUMMARY_ASKED.swap(false, Ordering::Relaxed) {
            eprint!(
                "{}",
                summary(
                    &fleet,
                    exporter
                        .as_ref()
                        .map(|e| (e.destination().describe(), e.stats())),
                    started
                )
            );
        }
        if progress && shown.elapsed() >= Duration::from_millis(500) {
            shown = Instant::now();
            eprint!("\r\x1b[K{}", progress_line(&fleet, &exporter, started));
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    fleet.take_samples();
    fleet.check_exits();
    let stats = match exporter {
        Some(exporter) => {
            exporter.submit(fleet.take_profiles());
            let to = exporter.destination().describe();
            Some((to, exporter.finish()))
        }
        None => None,
    };
    if let Some(outputs) = files {
        write_files(&mut fleet, &outputs, &request.by)?;
    }
    eprint!("{}", summary(&fleet, stats, started));
    Ok(())
}

/// Without an OTLP destination: each process's whole profile, where `outputs` says.
fn write_files(
    fleet: &mut Fleet,
    outputs: &crate::output::Outputs,
    by: &str,
) -> Result<(), Failure> {
    let mut profiles = std::mem::take(&mut fleet.finished);
    profiles.extend(fleet.processes.values().map(|f| f.profiler.profile()));
    let folded = FoldedOptions::default().with_by(Some(by.to_owned()));
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
        super::profile::write(profile, outputs.format(), &folded, &path)?;
        eprintln!(
            "process {} ({service}): {} samples written to {}",
            profile.pid,
            profile.stats.samples,
            path.display()
        );
    }
    Ok(())
}

fn progress_line(fleet: &Fleet, exporter: &Option<Exporter>, started: Instant) -> String {
    let mut line = format!(
        "profiling {} (eBPF): {}, {} samples",
        processes(fleet.processes.len() as u64),
        text::duration(started.elapsed().as_nanos() as u64),
        fleet.counts.samples,
    );
    if let Some(stats) = exporter.as_ref().map(Exporter::stats) {
        line.push_str(&format!(
            ", {} requests sent, {} queued",
            stats.sent, stats.queued
        ));
    }
    line
}

/// `1 process`, `2 processes`.
fn processes(n: u64) -> String {
    match n {
        1 => "1 process".to_owned(),
        n => format!("{n} processes"),
    }
}

/// `1 scan`, `2 scans`: a count and its noun.
fn count(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// What was profiled and sent; on stderr at the end and on `SIGUSR1`.
fn summary(fleet: &Fleet, export: Option<(String, otlp::Stats)>, started: Instant) -> String {
    let c = &fleet.counts;
    let lost = fleet.sampler.counters().map_or(0, |c| c.lost);
    let stacks_only = fleet.processes.values().filter(|f| f.stacks_only).count();
    let mut out = format!(
        "otel-ctx profile: {}; {} followed ({} now, {} of them without thread contexts; {} \
         exited, {} stopped publishing); {} samples, {} with a thread context, {} \
         unreadable, {} lost\n",
        text::duration(started.elapsed().as_nanos() as u64),
        processes(c.followed),
        fleet.processes.len(),
        stacks_only,
        c.exited,
        c.unpublished,
        c.samples,
        c.with_context,
        c.unreadable + fleet.processes.values().map(|f| f.unreadable).sum::<u64>(),
        lost,
    );
    let scans = fleet.scout.as_ref().map_or(0, Scout::scans);
    if fleet.hook.is_some() || scans > 0 {
        out.push_str(&format!(
            "discovery: {} of /proc, {}{}\n",
            count(scans, "scan"),
            count(c.events, "publication event"),
            if fleet.hook.is_some() {
                ""
            } else {
                " (no hook)"
            }
        ));
    }
    if c.refused > 0 {
        out.push_str(&format!(
            "{} publishers could not be followed; the last: {}\n",
            c.refused,
            c.last_refusal.as_deref().unwrap_or("")
        ));
    }
    let mut now: Vec<(&u32, &Followed)> = fleet.processes.iter().collect();
    now.sort_by_key(|(pid, _)| **pid);
    for (pid, f) in now.iter().take(20) {
        out.push_str(&format!(
            "  {pid} {} {}{}\n",
            f.comm,
            f.service.as_deref().unwrap_or("(no service.name)"),
            if f.stacks_only {
                " (stacks only: no thread contexts)"
            } else {
                ""
            }
        ));
    }
    if now.len() > 20 {
        out.push_str(&format!("  ... and {} more\n", now.len() - 20));
    }
    if let Some((to, s)) = export {
        let per_sample = match s.sent_samples {
            0 => String::new(),
            n => format!(", {:.1} bytes a sample", s.sent_bytes as f64 / n as f64),
        };
        out.push_str(&format!(
            "otlp to {to}: {} requests built, {} sent ({}, {} samples{per_sample}), {} retries, {} \
             dropped ({} samples; {} batches before encoding), {} rejected, {} profiles \
             rejected by the collector; queue {} now, peak {}\n",
            s.requests,
            s.sent,
            otlp::size(s.sent_bytes),
            s.sent_samples,
            s.retries,
            s.dropped,
            s.dropped_samples,
            s.dropped_batches,
            s.rejected,
            s.rejected_profiles,
            otlp::size(s.queued_bytes as u64),
            otlp::size(s.queue_peak as u64),
        ));
        if let Some(error) = &s.last_error {
            out.push_str(&format!("otlp: last error: {error}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_whatever_the_command_name() {
        let fields = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 19";
        let line = format!("77 (a) R 1 2 (b)) {fields}\n");
        assert_eq!(stat_start_time(line.as_bytes()), Some(424242));
        assert_eq!(stat_start_time(b"77 (short) S 1 2"), None);
        assert_eq!(stat_start_time(b"no parenthesis"), None);
        assert_eq!(stat_start_time(&[0xff, b')', b' ', 0xfe]), None);
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(processes(1), "1 process");
        assert_eq!(processes(3), "3 processes");
        assert_eq!(count(1, "scan"), "1 scan");
        assert_eq!(count(0, "publication event"), "0 publication events");
    }
}
