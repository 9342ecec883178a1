//! One process's thread samples counted per value of one attribute, as they come: the
//! loop under `otel-ctx watch` and `demo`, for any tool that wants the same view.

use std::time::Duration;

use otel_ctx_reader::thread::{ThreadReader, ThreadReaderOptions};

use crate::tally::AttributeTally;
use crate::{
    Following, Method, OffCpu, Sampler, SamplerError, SamplerOptions, SamplerStats, Threads,
};

/// A [`Sampler`] of every thread of one process, its samples counted per value of one
/// attribute ([`AttributeTally`]).
///
/// ```no_run
/// use std::time::Duration;
/// use otel_ctx_sampler::watch::Watch;
///
/// let mut watch = Watch::open(1234, 99, "http.route", false, None)?;
/// while watch.step(Duration::from_millis(100))? {
///     # break;
/// }
/// for (route, samples) in watch.tally().rows() {
///     println!("{route}: {samples}");
/// }
/// # Ok::<(), otel_ctx_sampler::SamplerError>(())
/// ```
#[derive(Debug)]
pub struct Watch {
    sampler: Sampler,
    pid: u32,
    hz: u32,
    tally: AttributeTally,
}

impl Watch {
    /// Samples every thread of `pid` at `hz` (by eBPF, the running ones; `method`
    /// `None` takes eBPF where it can be used), counted by attribute `by` (`raw_keys`:
    /// attributes named by key index, `#0`, whatever the process context announces). A
    /// process that publishes no thread contexts has nothing to count: its reason is the
    /// error ([`SamplerError::Thread`]).
    pub fn open(
        pid: u32,
        hz: u32,
        by: &str,
        raw_keys: bool,
        method: Option<Method>,
    ) -> Result<Self, SamplerError> {
        Self::start(pid, hz, by, raw_keys, method, None)
    }

    /// As [`open`](Self::open), measuring off-CPU time too
    /// ([`SamplerOptions::off_cpu`]): each value's [`Bucket`](crate::Bucket) has the
    /// time its threads spent on a CPU and off it.
    pub fn open_off_cpu(
        pid: u32,
        hz: u32,
        by: &str,
        raw_keys: bool,
        method: Option<Method>,
        off_cpu: OffCpu,
    ) -> Result<Self, SamplerError> {
        Self::start(pid, hz, by, raw_keys, method, Some(off_cpu))
    }

    fn start(
        pid: u32,
        hz: u32,
        by: &str,
        raw_keys: bool,
        method: Option<Method>,
        off_cpu: Option<OffCpu>,
    ) -> Result<Self, SamplerError> {
        let options = SamplerOptions::default()
            .with_off_cpu(off_cpu)
            .with_method(method)
            .with_frequency_hz(hz)
            .with_stack_size(0)
            .with_threads(Threads::All)
            .with_require_known_schema(!raw_keys)
            .with_thread_reader(ThreadReaderOptions::default());
        let mut sampler = Sampler::new(options)?;
        if let Following::StacksOnly(why) = sampler.add_process(pid)? {
            return Err(SamplerError::Thread(why));
        }
        Ok(Self {
            sampler,
            pid,
            hz,
            tally: AttributeTally::new(by, raw_keys)
                .with_period_ns(1_000_000_000 / u64::from(hz.max(1))),
        })
    }

    /// Samples for up to `wait` (one ptrace round, or the eBPF samples ready), counting
    /// them; whether the process still runs.
    pub fn step(&mut self, wait: Duration) -> Result<bool, SamplerError> {
        let tally = &mut self.tally;
        let step = self.sampler.step(wait, |sample| {
            tally.add(sample);
            false
        })?;
        Ok(!step.exited.contains(&self.pid))
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// The rate asked for.
    pub const fn hz(&self) -> u32 {
        self.hz
    }

    /// The counts so far.
    pub const fn tally(&self) -> &AttributeTally {
        &self.tally
    }

    /// Whether off-CPU time is measured ([`open_off_cpu`](Self::open_off_cpu)).
    pub const fn off_cpu(&self) -> bool {
        self.sampler.options().off_cpu.is_some()
    }

    /// How the samples are taken.
    pub const fn method(&self) -> Method {
        self.sampler.method()
    }

    /// The sampler's counts.
    pub fn stats(&self) -> SamplerStats {
        self.sampler.stats()
    }

    /// The process's thread reader, while it exports `otel_thread_ctx_v1`.
    pub fn reader(&self) -> Option<&ThreadReader> {
        self.sampler.reader(self.pid)
    }

    /// When the attribute counted by names no key of the key map: a note that says so
    /// and lists the keys.
    pub fn key_note(&self) -> Option<String> {
        let key_map = self.reader().and_then(|r| r.key_map()).unwrap_or(&[]);
        self.tally.key_note(key_map)
    }
}
