//! `otel-ctx demo`: a demo service that publishes contexts, and a live view of what a
//! reader sees of it.
//!
//! The service is this binary again, started with the hidden `demo-service` subcommand in
//! its own process group (so Ctrl-C reaches only the viewer, which then stops it cleanly).
//! It is `otel_ctx_tracing::demo`, a service traced the way a Rust service is: `tracing`
//! spans through `tracing-opentelemetry` and the OpenTelemetry SDK (an in-process exporter,
//! no network), with `otel-ctx-tracing`'s layer keeping each worker thread's context on
//! the request span it runs, on a 4-worker tokio runtime. Its process context is the SDK's
//! `Resource`, published through `otel-ctx-opentelemetry` when the tracer provider is
//! built; every second it updates `demo.requests_served` (the spans exported so far). The
//! request spans carry `http.route`, `http.request.method` and `user.tier` (recorded
//! halfway through a request), the three keys of its key map. It stops when its stdin
//! closes.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use otel_ctx_codec::HeaderError;
use otel_ctx_reader::process::{boottime_ns, Malformed, OwnedKeyValue, OwnedValue};
use otel_ctx_reader::procfs::comm;
use otel_ctx_reader::{Error, ProcessContextReader, Snapshot};
use otel_ctx_sampler::Method;

use super::tally::Tally;
use super::text::Screen;
use super::{catch_sigint, out, text, Failure, INTERRUPTED};

/// How often the viewer polls the timestamp.
const POLL: Duration = Duration::from_millis(100);
/// How often the viewer samples the service's threads (99 Hz, as profilers do).
const SAMPLE: Duration = Duration::from_micros(10_101);
/// How long the service has to publish before the viewer gives up.
const STARTUP: Duration = Duration::from_secs(5);
/// Changes kept in the live view.
const HISTORY: usize = 8;

/// Runs the viewer: starts the service, shows what a reader sees, stops the service.
/// The threads are sampled the way `method` says (`None`: eBPF where it can be used,
/// else ptrace stops).
pub fn run(
    duration: Duration,
    method: Option<Method>,
    profile: Option<&Path>,
) -> Result<(), Failure> {
    #[cfg(not(feature = "ebpf"))]
    if method == Some(Method::Ebpf) {
        return Err(super::sampler_failure(
            otel_ctx_sampler::SamplerError::NoEbpf,
        ));
    }
    catch_sigint().map_err(Failure::Unusable)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Unusable(format!("cannot find this program: {e}")))?;
    let child = Command::new(exe)
        .arg("demo-service")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| Failure::Unusable(format!("cannot start the demo service: {e}")))?;
    let mut service = Service { child };
    let result = watch(service.child.id(), duration, method, profile);
    let status = service.stop();
    result?;
    let status = status.map_err(Failure::Unusable)?;
    eprintln!("demo service stopped ({status})");
    Ok(())
}

/// The running service; dropping it stops it.
struct Service {
    child: Child,
}

impl Service {
    /// Closes the service's stdin (it unpublishes and exits), waiting at most 2 s before
    /// killing it.
    fn stop(&mut self) -> Result<std::process::ExitStatus, String> {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = self.child.kill();
                    return self
                        .child
                        .wait()
                        .map_err(|e| format!("waiting for the demo service: {e}"));
                }
                Err(e) => return Err(format!("waiting for the demo service: {e}")),
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.stop();
        }
    }
}

/// The viewer's state between refreshes.
struct View {
    pid: u32,
    comm: String,
    tty: bool,
    started: Instant,
    duration: Duration,
    current: Option<Snapshot>,
    publications: u64,
    history: VecDeque<String>,
    screen: Screen,
    /// Samples of the service's threads, per `http.route`.
    sampler: Option<Tally>,
}

/// Samples per second the live view takes, by ptrace rounds or eBPF ticks.
const HZ: u32 = 99;

/// Opens the thread sampler of the service, the way `method` says.
fn open_sampler(pid: u32, method: Option<Method>) -> Result<Tally, Failure> {
    Tally::open(pid, HZ, "http.route", false, method, false)
}

/// Starts `otel-ctx profile` on the service for what is left of the demo's run, writing
/// to `path`; it shares the terminal's process group, so Ctrl-C ends it too (and it
/// still writes).
fn start_profile(pid: u32, left: Duration, path: &Path) -> Result<Child, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Unusable(format!("cannot find this program: {e}")))?;
    Command::new(exe)
        .args(["profile", &pid.to_string(), "--quiet", "--duration"])
        .arg(format!("{}ms", left.as_millis()))
        .arg("-o")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| Failure::Unusable(format!("cannot start the profiler: {e}")))
}

fn watch(
    pid: u32,
    duration: Duration,
    method: Option<Method>,
    profile: Option<&Path>,
) -> Result<(), Failure> {
    let mut profiler: Option<Child> = None;
    let mut reader = ProcessContextReader::open(pid)?;
    let mut view = View {
        pid,
        comm: String::new(),
        tty: std::io::stdout().is_terminal(),
        started: Instant::now(),
        duration,
        current: None,
        publications: 0,
        history: VecDeque::new(),
        screen: Screen::default(),
        sampler: None,
    };
    if !view.tty {
        eprintln!("demo service started: pid {pid}; reading its process context every {POLL:?}");
    }
    let mut last_poll: Option<Instant> = None;
    while !INTERRUPTED.load(Ordering::Relaxed) && view.started.elapsed() < duration {
        if last_poll.is_none_or(|t| t.elapsed() >= POLL) {
            last_poll = Some(Instant::now());
            let last = view
                .current
                .as_ref()
                .map_or(0, |s| s.monotonic_published_at_ns);
            match reader.read_if_changed(last) {
                Ok(Some(snapshot)) => view.publish(snapshot)?,
                Ok(None) => {}
                // Not published yet, or caught mid-update: the next poll tells.
                Err(Error::NoContext { .. } | Error::StillUpdating { .. })
                    if view.current.is_some() || view.started.elapsed() < STARTUP => {}
                // The service's mapping is named when it is made, before its header is
                // written: a header of zeros at its start is a publication not made yet.
                Err(Error::Malformed {
                    problem: Malformed::Header(HeaderError::BadSignature(signature)),
                    ..
                }) if signature == [0; 8]
                    && view.current.is_none()
                    && view.started.elapsed() < STARTUP => {}
                Err(e) => return Err(e.into()),
            }
            if view.sampler.is_none() && view.current.is_some() {
                view.sampler = Some(open_sampler(pid, method)?);
                if let Some(path) = profile {
                    let left = duration.saturating_sub(view.started.elapsed());
                    profiler = Some(start_profile(pid, left, path)?);
                }
            }
            if view.tty {
                view.redraw();
            }
        }
        match view.sampler.as_mut() {
            // The sampler waits for its samples (or its next round), up to `SAMPLE`.
            Some(sampler) => {
                sampler.step(SAMPLE)?;
            }
            None => thread::sleep(SAMPLE),
        }
    }
    if view.tty {
        view.redraw();
    }
    // The service runs until the profile is written: its summary goes to stderr.
    if let Some(mut profiler) = profiler {
        let status = profiler
            .wait()
            .map_err(|e| Failure::Unusable(format!("waiting for the profiler: {e}")))?;
        if !status.success() {
            return Err(Failure::Unusable(format!("the profiler failed ({status})")));
        }
    }
    let why = if INTERRUPTED.load(Ordering::Relaxed) {
        "interrupted"
    } else {
        "time is up"
    };
    if let (false, Some(sampler)) = (view.tty, &view.sampler) {
        eprintln!(
            "thread samples per http.route, as a profiler reading otel_thread_ctx_v1 sees them \
             ({}):",
            sampler.how()
        );
        out(&format!(
            "{}{}",
            sampler.table(),
            sampler.unreadable_lines()
        ))?;
    }
    eprintln!(
        "{why} after {}: saw {} publications of the process context, took {} thread samples",
        text::duration(view.started.elapsed().as_nanos() as u64),
        view.publications,
        view.sampler.as_ref().map_or(0, Tally::samples)
    );
    Ok(())
}

/// Keys whose values differ between two attribute lists, with the new values (the last
/// occurrence of each key, as readers take it).
fn changes(before: &[OwnedKeyValue], after: &[OwnedKeyValue]) -> Vec<String> {
    let find = |list: &[OwnedKeyValue], key: &str| -> Option<OwnedValue> {
        list.iter()
            .rev()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.clone())
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for kv in after {
        if !seen.insert(kv.key.as_str()) {
            continue;
        }
        let new = find(after, &kv.key);
        if find(before, &kv.key) != new {
            let shown = new.as_ref().map_or_else(String::new, text::value);
            out.push(format!("{} = {}", kv.key, text::shorten(&shown)));
        }
    }
    for kv in before {
        if find(after, &kv.key).is_none() && seen.insert(kv.key.as_str()) {
            out.push(format!("{} removed", kv.key));
        }
    }
    out
}

impl View {
    fn elapsed(&self) -> String {
        format!("+{:.1}s", self.started.elapsed().as_secs_f64())
    }

    fn publish(&mut self, snapshot: Snapshot) -> Result<(), Failure> {
        self.publications += 1;
        if self.comm.is_empty() {
            self.comm = comm(self.pid).unwrap_or_default();
        }
        let line = match &self.current {
            None => format!(
                "{} published: {} resource attributes, {} extra attributes",
                self.elapsed(),
                snapshot.context.resource.len(),
                snapshot.context.attributes.len()
            ),
            Some(before) => {
                let mut changed = changes(&before.context.resource, &snapshot.context.resource);
                changed.extend(changes(
                    &before.context.attributes,
                    &snapshot.context.attributes,
                ));
                format!(
                    "{} updated (monotonic_published_at_ns +{}): {}",
                    self.elapsed(),
                    text::duration(
                        snapshot.monotonic_published_at_ns - before.monotonic_published_at_ns
                    ),
                    if changed.is_empty() {
                        "no attribute changed".to_owned()
                    } else {
                        changed.join(", ")
                    }
                )
            }
        };
        if !self.tty {
            let mut text = String::new();
            if self.current.is_none() {
                text.push_str(&text::snapshot(&snapshot, &self.comm, boottime_ns()));
            }
            text.push_str(&line);
            text.push('\n');
            out(&text)?;
        }
        self.history.push_back(line);
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        self.current = Some(snapshot);
        Ok(())
    }

    /// Redraws the view in place: moves the cursor up over the last drawing and clears
    /// what is below it.
    fn redraw(&mut self) {
        let mut out = String::new();
        let left = self.duration.saturating_sub(self.started.elapsed());
        let _ = writeln!(
            out,
            "otel-ctx demo: service pid {} ({} publications seen, {} left, Ctrl-C stops)\n",
            self.pid,
            self.publications,
            text::duration(left.as_nanos() as u64)
        );
        match &self.current {
            Some(s) => out.push_str(&text::snapshot(s, &self.comm, boottime_ns())),
            None => out.push_str("waiting for the service to publish...\n"),
        }
        out.push_str("\nchanges seen by the reader\n");
        for line in &self.history {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(sampler) = &self.sampler {
            let _ = writeln!(
                out,
                "\n{} ({} so far) through {}",
                sampler.how(),
                sampler.samples(),
                sampler.heading()
            );
            out.push_str(&sampler.table());
            out.push_str(&sampler.unreadable_lines());
        }
        self.screen.draw(&out);
    }
}

/// The demo service: publishes, serves fake requests on 4 worker threads, stops when stdin
/// closes.
pub fn service() -> Result<(), String> {
    // If the viewer dies without closing stdin, stop too.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
    otel_ctx_tracing::demo::run(otel_ctx_tracing::demo::Options::default())
        .map_err(|e| format!("demo service: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: i64) -> OwnedKeyValue {
        OwnedKeyValue {
            key: key.to_owned(),
            value: OwnedValue::Int(value),
        }
    }

    #[test]
    fn changes_lists_new_changed_and_removed_keys_once() {
        let before = [kv("a", 1), kv("b", 2), kv("gone", 3)];
        let after = [kv("a", 1), kv("b", 5), kv("b", 6), kv("new", 7)];
        assert_eq!(
            changes(&before, &after),
            ["b = 6", "new = 7", "gone removed"]
        );
        assert!(changes(&after, &after).is_empty());
    }
}
