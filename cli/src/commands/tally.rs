//! The view of `watch` and `demo`: the library's [`Watch`] of one process, its samples
//! counted per value of one thread-context attribute, and the table and lines that show
//! the counts.

use std::time::Duration;

use otel_ctx_sampler::watch::Watch;
use otel_ctx_sampler::{Method, OffCpu, SamplerStats, UNREADABLE};
use serde::Serialize;

use super::{sampler_failure, text, Failure};

/// The library's [`Watch`] of one process, and how it is shown.
pub struct Tally {
    watch: Watch,
}

impl Tally {
    /// Samples every thread of `pid` at `hz` (by eBPF, the running ones: `method`
    /// `None` takes eBPF where it can be used), grouped by attribute `by` (`raw_keys`:
    /// attributes named by key index, `#0`, as `show --raw-keys` does, whatever the
    /// process context announces), with their time off a CPU when `off_cpu`.
    pub fn open(
        pid: u32,
        hz: u32,
        by: &str,
        raw_keys: bool,
        method: Option<Method>,
        off_cpu: bool,
    ) -> Result<Self, Failure> {
        let watch = match off_cpu {
            true => Watch::open_off_cpu(pid, hz, by, raw_keys, method, OffCpu::default()),
            false => Watch::open(pid, hz, by, raw_keys, method),
        };
        Ok(Self {
            watch: watch.map_err(sampler_failure)?,
        })
    }

    /// Samples for up to `wait` (one ptrace round, or the eBPF samples ready); whether
    /// the process still runs.
    pub fn step(&mut self, wait: Duration) -> Result<bool, Failure> {
        self.watch.step(wait).map_err(sampler_failure)
    }

    /// The executable mappings the thread reader left out, one line each.
    pub fn skipped_lines(&self) -> String {
        self.reader_skipped()
            .iter()
            .map(|s| format!("skipped {s}\n"))
            .collect()
    }

    fn reader_skipped(&self) -> &[otel_ctx_reader::thread::tls::SkippedModule] {
        self.watch.reader().map_or(&[], |r| r.skipped_modules())
    }

    /// When `by` names no key of the key map: a note that says so and lists the keys.
    pub fn key_note(&self) -> Option<String> {
        self.watch.key_note()
    }

    /// Whether the samples come from the eBPF sampler.
    pub fn is_ebpf(&self) -> bool {
        self.watch.method() == Method::Ebpf
    }

    /// How samples are taken, for the line above the table.
    pub fn how(&self) -> String {
        let (pid, hz) = (self.watch.pid(), self.watch.hz());
        if self.is_ebpf() {
            format!("eBPF sampling of {pid}'s running threads at {hz} Hz on every CPU")
        } else {
            format!("sampling every thread of {pid} at {hz} Hz")
        }
    }

    /// The sampler's counts.
    pub fn stats(&self) -> SamplerStats {
        self.watch.stats()
    }

    /// The closing line's counts.
    pub fn totals(&self, elapsed: Duration) -> String {
        let stats = self.stats();
        let per_second = |n: u64| n as f64 / elapsed.as_secs_f64().max(1e-9);
        if self.is_ebpf() {
            format!(
                "{} samples from eBPF ({:.1} samples/s, {} lost)",
                stats.samples,
                per_second(stats.samples),
                stats.lost
            )
        } else {
            format!(
                "{} samples in {} {} ({:.1} rounds/s)",
                stats.samples,
                stats.rounds,
                text::plural(stats.rounds, "round", "rounds"),
                per_second(stats.rounds)
            )
        }
    }

    /// Why samples were unreadable, one line per kind of error, most first.
    pub fn unreadable_lines(&self) -> String {
        self.stats()
            .unreadable
            .iter()
            .map(|u| format!("  {UNREADABLE} {}: {}\n", u.samples, u.message))
            .collect()
    }

    /// Thread samples taken.
    pub fn samples(&self) -> u64 {
        self.watch.tally().samples()
    }

    /// The aligned table: value, samples, share, bar (with off-CPU time: value,
    /// samples, seconds on and off a CPU, the share off).
    pub fn table(&self) -> String {
        if self.watch.off_cpu() {
            let secs = |ns: u64| format!("{:.2}s", ns as f64 / 1e9);
            let by = format!("  {}", self.watch.tally().by().to_uppercase());
            let mut rows = vec![[by.as_str(), "SAMPLES", "ON CPU", "OFF CPU", "OFF"]
                .map(String::from)
                .to_vec()];
            for (value, b) in self.watch.tally().buckets() {
                let off = b.off_cpu_ns as f64 / b.cpu_ns.saturating_add(b.off_cpu_ns).max(1) as f64;
                let (on, off_s, value) = (secs(b.cpu_ns), secs(b.off_cpu_ns), text::shorten(value));
                rows.push(vec![
                    format!("  {value}"),
                    b.samples.to_string(),
                    on,
                    off_s,
                    format!("{:5.1}%", off * 100.0),
                ]);
            }
            return text::table(&rows);
        }
        let samples = self.samples();
        let mut rows = vec![vec![
            format!("  {}", self.watch.tally().by().to_uppercase()),
            "SAMPLES".to_owned(),
            "SHARE".to_owned(),
            String::new(),
        ]];
        for (value, n) in self.watch.tally().rows() {
            let share = if samples == 0 {
                0.0
            } else {
                n as f64 / samples as f64
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

    /// The resolution line shown above the table.
    pub fn heading(&self) -> String {
        match self.watch.reader() {
            Some(reader) => {
                let r = reader.resolution();
                format!(
                    "otel_thread_ctx_v1 in {} ({}, {})",
                    r.defining_module,
                    r.model.name(),
                    r.libc.name()
                )
            }
            None => "otel_thread_ctx_v1 is no longer exported".to_owned(),
        }
    }

    /// The summary document of `watch --json`.
    pub fn json(&self, elapsed: Duration) -> Summary<'_> {
        let stats = self.stats();
        Summary {
            pid: self.watch.pid(),
            by: self.watch.tally().by(),
            hz: self.watch.hz(),
            duration_s: seconds(elapsed),
            rounds: stats.rounds,
            samples: self.samples(),
            ebpf: self.is_ebpf().then_some(EbpfSummary {
                ticks: stats.ticks,
                lost: stats.lost,
            }),
            unreadable: stats
                .unreadable
                .into_iter()
                .map(|u| Unreadable {
                    kind: u.kind,
                    samples: u.samples,
                    message: u.message,
                })
                .collect(),
            key_note: self.key_note(),
            counts: self
                .watch
                .tally()
                .buckets()
                .into_iter()
                .map(|(value, b)| Count {
                    value,
                    samples: b.samples,
                    cpu_s: self.watch.off_cpu().then(|| b.cpu_ns as f64 / 1e9),
                    off_cpu_s: self.watch.off_cpu().then(|| b.off_cpu_ns as f64 / 1e9),
                })
                .collect(),
        }
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
    /// By eBPF only (where `rounds` is 0): the BPF program's counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebpf: Option<EbpfSummary>,
    /// The `(unreadable)` samples by the kind of error, most first.
    pub unreadable: Vec<Unreadable>,
    /// When `by` is not in the key map: a note that says so and lists its keys.
    pub key_note: Option<String>,
    /// Samples per value, most first.
    pub counts: Vec<Count<'a>>,
}

/// One element of [`Summary::unreadable`].
#[derive(Serialize)]
pub struct Unreadable {
    /// The error's kind (`SampleError::kind`), such as `traced`.
    pub kind: &'static str,
    /// Samples with an error of this kind.
    pub samples: u64,
    /// The message of the first of them.
    pub message: String,
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
    /// The attribute value, or a bucket such as `(no context)`.
    pub value: &'a str,
    /// Thread samples in this bucket.
    pub samples: u64,
    /// With `--off-cpu`: their time on a CPU, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// With `--off-cpu`: their time off a CPU, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu_s: Option<f64>,
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
                message: "another tracer holds the thread".to_owned(),
            }],
            key_note: None,
            counts: vec![
                Count {
                    value: otel_ctx_sampler::NO_CONTEXT,
                    samples: 3100,
                    cpu_s: None,
                    off_cpu_s: None,
                },
                Count {
                    value: "/api/cart",
                    samples: 702,
                    cpu_s: None,
                    off_cpu_s: None,
                },
            ],
        };
        let out = serde_json::to_string(&summary).unwrap();
        assert_eq!(
            out,
            r#"{"pid":4242,"by":"http.route","hz":99,"duration_s":10.001,"rounds":990,"samples":3802,"unreadable":[{"kind":"traced","samples":2,"message":"another tracer holds the thread"}],"key_note":null,"counts":[{"value":"(no context)","samples":3100},{"value":"/api/cart","samples":702}]}"#
        );
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(back["duration_s"].is_f64(), "{out}");
    }
}
