//! `otel-ctx watch <pid>`: a small profiler view. Samples every thread at a fixed rate
//! and counts samples per value of one thread-context attribute (such as `http.route`).
//!
//! Two samplers: by default each round stops every thread with ptrace and reads its
//! record; with `--ebpf` (built with the `ebpf` feature) a BPF program reads the record
//! of whichever target thread a CPU-clock tick interrupts, at the rate on every CPU,
//! without stopping anything. Both name attributes with the same key map and count into
//! the same table.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use otel_ctx_reader::{Error, SampleError, ThreadReader};
use serde::Serialize;

use super::{catch_sigint, json, out, show, text, threads, Failure, INTERRUPTED};
use crate::schedule::Schedule;

/// Bucket of a thread with no context attached.
pub const NO_CONTEXT: &str = "(no context)";
/// Bucket of a thread whose context could not be read.
pub const UNREADABLE: &str = "(unreadable)";
/// How often the key map is looked at again (two small copies when it is unchanged).
const REFRESH: Duration = Duration::from_secs(1);
/// How often the modules are listed again without evidence that they changed: listing
/// them reads `/proc/<pid>/maps`, which takes the target's mmap lock. Evidence (a slot
/// that cannot be computed, an update of the process context) lists them sooner, at
/// most once per [`REFRESH`].
const MODULES_FALLBACK: Duration = Duration::from_secs(30);

/// Counts of samples per attribute value.
pub struct Sampler {
    reader: ThreadReader,
    by: String,
    raw_keys: bool,
    counts: HashMap<String, u64>,
    /// Unreadable samples by the kind of error, with one message of each kind.
    unreadable: HashMap<&'static str, (u64, String)>,
    rounds: u64,
    samples: u64,
    last_refresh: Instant,
    modules_listed: Instant,
    /// Set when a sample shows the modules may have changed (its slot could not be
    /// computed).
    modules_suspect: bool,
    /// With `--ebpf`: the BPF sampler that takes the samples instead of ptrace rounds.
    #[cfg(feature = "ebpf")]
    ebpf: Option<otel_ctx_reader::EbpfSampler>,
}

/// The message of `--ebpf` in a build without the `ebpf` feature.
#[cfg(not(feature = "ebpf"))]
pub const NO_EBPF: &str = "this otel-ctx was built without the eBPF sampler: rebuild it with \
                           `--features ebpf` (cargo install --locked --path cli --features \
                           ebpf; no C compiler needed), or sample without --ebpf (ptrace)";

/// The bucket of a sample whose context has `value` for the grouping attribute `by`.
fn value_bucket(by: &str, value: Option<&[u8]>) -> String {
    value.map_or_else(
        || format!("(no {by})"),
        |v| String::from_utf8_lossy(v).into_owned(),
    )
}

/// With `--raw-keys`: the value of the entry whose key index `#N` is `by`, the last
/// occurrence winning, as `threads::name_raw_keys` names them.
#[cfg(feature = "ebpf")]
fn raw_value<'a>(attrs_data: &'a [u8], by: &str) -> Option<&'a [u8]> {
    let index: u8 = by.strip_prefix('#')?.parse().ok()?;
    otel_ctx_codec::attrs::ResolvedAttrs::resolve(attrs_data, otel_ctx_codec::attrs::MAX_KEYS)
        .iter()
        .find(|(key, _)| *key == index)
        .map(|(_, value)| value)
}

impl Sampler {
    /// Locates the thread contexts of `pid`; samples are grouped by attribute `by`
    /// (`raw_keys`: attributes named by key index, `#0`, as `show --raw-keys` does).
    pub fn open(pid: u32, by: &str, raw_keys: bool) -> Result<Self, Failure> {
        let maps = show::read_maps(pid)?;
        let reader = threads::open(&maps, raw_keys)?;
        Ok(Self {
            reader,
            by: by.to_owned(),
            raw_keys,
            counts: HashMap::new(),
            unreadable: HashMap::new(),
            rounds: 0,
            samples: 0,
            last_refresh: Instant::now(),
            modules_listed: Instant::now(),
            modules_suspect: false,
            #[cfg(feature = "ebpf")]
            ebpf: None,
        })
    }

    /// Like [`open`](Self::open), with the eBPF sampler ticking at `hz` on every CPU:
    /// [`collect`](Self::collect) then gathers its samples, and no thread is stopped.
    #[cfg(feature = "ebpf")]
    pub fn open_ebpf(pid: u32, by: &str, raw_keys: bool, hz: u32) -> Result<Self, Failure> {
        let mut sampler = Self::open(pid, by, raw_keys)?;
        let options = otel_ctx_reader::EbpfOptions::default().with_frequency_hz(u64::from(hz));
        sampler.ebpf = Some(
            otel_ctx_reader::EbpfSampler::start(&sampler.reader, options)
                .map_err(|e| Failure::Unusable(e.to_string()))?,
        );
        Ok(sampler)
    }

    /// The executable mappings the thread reader left out, one line each.
    pub fn skipped_lines(&self) -> String {
        self.reader
            .skipped_modules()
            .iter()
            .map(|s| format!("skipped {s}\n"))
            .collect()
    }

    /// When `by` names no key of the key map: a note that says so and lists the keys
    /// that are (samples then all count as `(no <by>)`, until a key of that name is
    /// registered).
    pub fn key_note(&self) -> Option<String> {
        if self.raw_keys {
            return None;
        }
        let keys = self.reader.key_map().unwrap_or(&[]);
        if keys.contains(&self.by) {
            return None;
        }
        Some(if keys.is_empty() {
            format!(
                "{} is not in the key map: the process announces no keys (yet)",
                self.by
            )
        } else {
            format!(
                "{} is not in the key map; its keys are: {}",
                self.by,
                keys.join(", ")
            )
        })
    }

    /// Counts one sample into its bucket.
    fn count(&mut self, bucket: String) {
        *self.counts.entry(bucket).or_default() += 1;
        self.samples += 1;
    }

    /// Counts one unreadable sample, by the kind of its error.
    fn count_unreadable(&mut self, e: &SampleError) {
        if matches!(e, SampleError::Tls(_)) {
            self.modules_suspect = true;
        }
        let entry = self
            .unreadable
            .entry(e.kind())
            .or_insert_with(|| (0, e.to_string()));
        entry.0 += 1;
        self.count(UNREADABLE.to_owned());
    }

    /// Looks at the key map again every [`REFRESH`], and lists the modules again when a
    /// sample or an update of the process context suggests they changed (at most once
    /// per [`REFRESH`]), or every [`MODULES_FALLBACK`] otherwise. Returns whether the
    /// modules changed.
    fn refresh(&mut self) -> bool {
        if self.last_refresh.elapsed() < REFRESH {
            return false;
        }
        self.last_refresh = Instant::now();
        let context_changed = self.reader.refresh_key_map();
        let due = self.modules_suspect
            || context_changed
            || self.modules_listed.elapsed() >= MODULES_FALLBACK;
        if !due {
            return false;
        }
        self.modules_suspect = false;
        self.modules_listed = Instant::now();
        // A failure shows as unreadable samples.
        matches!(self.reader.refresh_modules(), Ok(true))
    }

    /// Whether the samples come from the eBPF sampler.
    pub fn is_ebpf(&self) -> bool {
        #[cfg(feature = "ebpf")]
        return self.ebpf.is_some();
        #[cfg(not(feature = "ebpf"))]
        false
    }

    /// With the eBPF sampler: waits up to `wait` for samples and counts every one that
    /// is ready. Modules and the key map are looked at again every second, as in
    /// [`round`](Self::round); a changed slot location is handed to the BPF program.
    #[cfg(feature = "ebpf")]
    pub fn collect(&mut self, wait: Duration) -> Result<(), Error> {
        let Some(ebpf) = self.ebpf.as_mut() else {
            return self.round();
        };
        // A failed wait (not an interruption) shows as no samples; the next call retries.
        let _ = ebpf.wait(wait);
        // Every sample taken so far is counted before the process is found gone.
        let mut taken = Vec::new();
        while let Some((_, context)) = ebpf.next_context(&mut self.reader) {
            taken.push(match &context {
                Ok(None) => Ok(NO_CONTEXT.to_owned()),
                Ok(Some(c)) if self.raw_keys => {
                    Ok(value_bucket(&self.by, raw_value(c.attrs_data, &self.by)))
                }
                Ok(Some(c)) => Ok(value_bucket(&self.by, c.attribute(&self.by))),
                Err(e) => Err((e.kind(), e.to_string(), matches!(e, SampleError::Tls(_)))),
            });
        }
        for sample in taken {
            match sample {
                Ok(bucket) => self.count(bucket),
                Err((kind, message, tls)) => {
                    self.modules_suspect |= tls;
                    self.unreadable.entry(kind).or_insert((0, message)).0 += 1;
                    self.count(UNREADABLE.to_owned());
                }
            }
        }
        if self.last_refresh.elapsed() >= REFRESH
            && otel_ctx_reader::memory::is_gone(self.reader.pid())
        {
            return Err(Error::ProcessGone {
                pid: self.reader.pid(),
            });
        }
        if self.refresh() {
            // A failure leaves the old location: its samples show as unreadable.
            if let Some(ebpf) = self.ebpf.as_mut() {
                let _ = ebpf.set_resolution(self.reader.resolution());
            }
        }
        Ok(())
    }

    /// Samples every thread once.
    pub fn round(&mut self) -> Result<(), Error> {
        // A library loaded or unloaded, a key registered: picked up here.
        self.refresh();
        let mut reports = self.reader.read_all()?;
        self.rounds += 1;
        for report in &mut reports {
            if self.raw_keys {
                if let Ok(Some(context)) = &mut report.context {
                    threads::name_raw_keys(context);
                }
            }
            match &report.context {
                Ok(None) => self.count(NO_CONTEXT.to_owned()),
                Ok(Some(c)) => {
                    let bucket = value_bucket(
                        &self.by,
                        c.attributes
                            .iter()
                            .find(|(k, _)| *k == self.by)
                            .map(|(_, v)| v.as_bytes()),
                    );
                    self.count(bucket);
                }
                Err(e) => self.count_unreadable(e),
            }
        }
        Ok(())
    }

    /// Why samples were unreadable, one line per kind of error, most first.
    pub fn unreadable_lines(&self) -> String {
        let mut kinds: Vec<(&&str, &(u64, String))> = self.unreadable.iter().collect();
        kinds.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        kinds
            .iter()
            .map(|(_, (n, message))| format!("  {UNREADABLE} {n}: {message}\n"))
            .collect()
    }

    /// One step of the sampling loop: a round of ptrace samples (the caller keeps the
    /// time between rounds), or with the eBPF sampler, up to 100 ms (and at most `left`)
    /// of its samples.
    pub fn step(&mut self, left: Duration) -> Result<(), Error> {
        #[cfg(feature = "ebpf")]
        if self.ebpf.is_some() {
            return self.collect(left.min(Duration::from_millis(100)));
        }
        let _ = left;
        self.round()
    }

    /// How samples are taken, for the line above the table.
    pub fn how(&self, pid: u32, hz: u32) -> String {
        if self.is_ebpf() {
            format!("eBPF sampling of {pid}'s running threads at {hz} Hz on every CPU")
        } else {
            format!("sampling every thread of {pid} at {hz} Hz")
        }
    }

    /// The closing line's counts.
    pub fn totals(&self, elapsed: Duration) -> String {
        #[cfg(feature = "ebpf")]
        if let Some(ebpf) = &self.ebpf {
            let lost = ebpf.counters().map_or(0, |c| c.lost);
            return format!(
                "{} samples from eBPF ({:.1} samples/s, {lost} lost)",
                self.samples,
                self.samples as f64 / elapsed.as_secs_f64().max(1e-9)
            );
        }
        format!(
            "{} samples in {} rounds ({:.1} rounds/s)",
            self.samples,
            self.rounds,
            self.rounds as f64 / elapsed.as_secs_f64().max(1e-9)
        )
    }

    /// `(value, samples)`, most samples first.
    pub fn rows(&self) -> Vec<(&str, u64)> {
        let mut rows: Vec<(&str, u64)> =
            self.counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        rows
    }

    /// Thread samples taken.
    #[cfg(feature = "demo")]
    pub const fn samples(&self) -> u64 {
        self.samples
    }

    /// The aligned table: value, samples, share, bar.
    pub fn table(&self) -> String {
        let mut rows = vec![vec![
            format!("  {}", self.by.to_uppercase()),
            "SAMPLES".to_owned(),
            "SHARE".to_owned(),
            String::new(),
        ]];
        for (value, n) in self.rows() {
            let share = if self.samples == 0 {
                0.0
            } else {
                n as f64 / self.samples as f64
            };
            rows.push(vec![
                format!("  {}", text::shorten(value)),
                n.to_string(),
                format!("{:5.1}%", share * 100.0),
                "#".repeat((share * 40.0).round() as usize),
            ]);
        }
        text::table(&rows)
    }

    /// The summary document of `watch --json`.
    pub fn json(&self, pid: u32, hz: u32, elapsed: Duration) -> Summary<'_> {
        Summary {
            pid,
            by: &self.by,
            hz,
            duration_s: seconds(elapsed),
            rounds: self.rounds,
            samples: self.samples,
            ebpf: self.ebpf_summary(),
            unreadable: {
                let mut kinds: Vec<Unreadable<'_>> = self
                    .unreadable
                    .iter()
                    .map(|(kind, (samples, message))| Unreadable {
                        kind,
                        samples: *samples,
                        message,
                    })
                    .collect();
                kinds.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.kind.cmp(b.kind)));
                kinds
            },
            key_note: self.key_note(),
            counts: self
                .rows()
                .into_iter()
                .map(|(value, samples)| Count { value, samples })
                .collect(),
        }
    }

    /// With the eBPF sampler: its counts for the JSON summary.
    fn ebpf_summary(&self) -> Option<EbpfSummary> {
        #[cfg(feature = "ebpf")]
        if let Some(ebpf) = &self.ebpf {
            let counters = ebpf.counters().unwrap_or_default();
            return Some(EbpfSummary {
                ticks: counters.ticks,
                lost: counters.lost,
            });
        }
        None
    }

    /// The resolution line shown above the table.
    pub fn heading(&self) -> String {
        let r = self.reader.resolution();
        format!(
            "otel_thread_ctx_v1 in {} ({}, {})",
            r.defining_module,
            r.model.name(),
            r.libc.name()
        )
    }
}

/// `d` in seconds, rounded to the millisecond: a clock read between rounds is not more
/// precise than that.
fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// The document of `watch --json`.
#[derive(Serialize)]
pub struct Summary<'a> {
    /// The process sampled.
    pub pid: u32,
    /// The attribute whose values group the samples.
    pub by: &'a str,
    /// Rounds per second asked for.
    pub hz: u32,
    /// How long sampling ran, in seconds.
    pub duration_s: f64,
    /// Rounds taken (each samples every thread once).
    pub rounds: u64,
    /// Thread samples taken: the sum of `counts`.
    pub samples: u64,
    /// With `--ebpf` only (where `rounds` is 0): the BPF program's counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebpf: Option<EbpfSummary>,
    /// The `(unreadable)` samples by the kind of error, most first.
    pub unreadable: Vec<Unreadable<'a>>,
    /// When `by` is not in the key map: a note that says so and lists its keys.
    pub key_note: Option<String>,
    /// Samples per value, most first.
    pub counts: Vec<Count<'a>>,
}

/// One element of [`Summary::unreadable`].
#[derive(Serialize)]
pub struct Unreadable<'a> {
    /// The error's kind (`SampleError::kind`), such as `traced`.
    pub kind: &'a str,
    /// Samples with an error of this kind.
    pub samples: u64,
    /// The message of the first of them.
    pub message: &'a str,
}

/// [`Summary::ebpf`]: what the BPF program counted.
#[derive(Serialize)]
pub struct EbpfSummary {
    /// Ticks that interrupted a thread of the process.
    pub ticks: u64,
    /// Samples lost because the ring buffer was full.
    pub lost: u64,
}

/// One bucket of [`Summary::counts`].
#[derive(Serialize)]
pub struct Count<'a> {
    /// The attribute value, or a bucket such as [`NO_CONTEXT`].
    pub value: &'a str,
    /// Thread samples in this bucket.
    pub samples: u64,
}

/// Redraws a block of lines in place on a terminal.
#[derive(Default)]
pub struct Screen {
    lines: usize,
}

/// The terminal's width in columns (80 when it cannot be asked).
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .map(|size| usize::from(size.ws_col))
        .ok()
        .filter(|&cols| cols > 0)
        .unwrap_or(80)
}

impl Screen {
    /// Replaces the previous frame with `frame`. Lines are cut to the terminal's width:
    /// a wrapped line would take rows the next redraw does not move back over.
    pub fn draw(&mut self, frame: &str) {
        let width = terminal_width();
        let mut out = String::new();
        if self.lines > 0 {
            let _ = write!(out, "\x1b[{}A", self.lines);
        }
        out.push_str("\x1b[J");
        self.lines = 0;
        for line in frame.lines() {
            out.extend(line.chars().take(width.saturating_sub(1)));
            out.push('\n');
            self.lines += 1;
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }
}

/// Runs `watch`: `ebpf` samples with the BPF program instead of ptrace rounds.
pub fn run(
    pid: u32,
    hz: u32,
    duration: Duration,
    by: &str,
    raw_keys: bool,
    as_json: bool,
    ebpf: bool,
) -> Result<(), Failure> {
    if hz == 0 || hz > 10_000 {
        return Err(Failure::usage(format!(
            "--hz {hz}: use a rate between 1 and 10000"
        )));
    }
    catch_sigint().map_err(Failure::Unusable)?;
    let mut sampler = if ebpf {
        #[cfg(feature = "ebpf")]
        {
            Sampler::open_ebpf(pid, by, raw_keys, hz)?
        }
        #[cfg(not(feature = "ebpf"))]
        return Err(Failure::usage(NO_EBPF));
    } else {
        Sampler::open(pid, by, raw_keys)?
    };
    // What the reader could not analyse, and a grouping key the process does not have,
    // are said before sampling starts (on stderr, so that --json stays one document).
    eprint!("{}", sampler.skipped_lines());
    if let Some(note) = sampler.key_note() {
        eprintln!("otel-ctx: {note}");
    }
    let tty = !as_json && std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut schedule = Schedule::new(started, hz);
    let mut screen = Screen::default();
    let mut last_draw = started;
    let mut ended_by = "time is up";
    if !as_json && !tty {
        out(&format!(
            "{}; {}\n",
            sampler.heading(),
            sampler.how(pid, hz)
        ))?;
    }
    while started.elapsed() < duration {
        if INTERRUPTED.load(Ordering::Relaxed) {
            ended_by = "interrupted";
            break;
        }
        match sampler.step(duration.saturating_sub(started.elapsed())) {
            Ok(()) => {}
            Err(Error::ProcessGone { .. }) => {
                ended_by = "the process exited";
                break;
            }
            Err(e) => return Err(e.into()),
        }
        if tty && last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            screen.draw(&frame(&sampler, pid, hz, started.elapsed(), duration));
        }
        if sampler.is_ebpf() {
            // `step` waited for the samples itself.
            continue;
        }
        schedule.sleep();
    }
    if sampler.is_ebpf() {
        // The samples the BPF program took since the last wait: counted, without waiting.
        let _ = sampler.step(Duration::ZERO);
    }
    let elapsed = started.elapsed();
    if as_json {
        json::print(&sampler.json(pid, hz, elapsed))?;
    } else {
        let closing = format!(
            "{ended_by} after {}: {}\n",
            text::duration(elapsed.as_nanos() as u64),
            sampler.totals(elapsed)
        );
        if tty {
            screen.draw(&frame(&sampler, pid, hz, elapsed, duration));
            out(&closing)?;
        } else {
            out(&format!(
                "{}{}{closing}",
                sampler.table(),
                sampler.unreadable_lines()
            ))?;
        }
    }
    Ok(())
}

/// One frame of the live view.
pub fn frame(
    sampler: &Sampler,
    pid: u32,
    hz: u32,
    elapsed: Duration,
    duration: Duration,
) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_shape() {
        let summary = Summary {
            pid: 4242,
            by: "http.route",
            hz: 99,
            duration_s: seconds(Duration::from_micros(10_000_501)),
            rounds: 990,
            samples: 3802,
            ebpf: None,
            unreadable: vec![Unreadable {
                kind: "traced",
                samples: 2,
                message: "another tracer holds the thread",
            }],
            key_note: None,
            counts: vec![
                Count {
                    value: NO_CONTEXT,
                    samples: 3100,
                },
                Count {
                    value: "/api/cart",
                    samples: 702,
                },
            ],
        };
        let out = serde_json::to_string(&summary).unwrap();
        assert_eq!(
            json::keys(&out),
            [
                "pid",
                "by",
                "hz",
                "duration_s",
                "rounds",
                "samples",
                "unreadable",
                "kind",
                "samples",
                "message",
                "key_note",
                "counts",
                "value",
                "samples",
                "value",
                "samples",
            ]
        );
        assert_eq!(
            out,
            r#"{"pid":4242,"by":"http.route","hz":99,"duration_s":10.001,"rounds":990,"samples":3802,"unreadable":[{"kind":"traced","samples":2,"message":"another tracer holds the thread"}],"key_note":null,"counts":[{"value":"(no context)","samples":3100},{"value":"/api/cart","samples":702}]}"#
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(back["duration_s"].is_f64(), "{out}");
    }
}
