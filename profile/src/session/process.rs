//! The profile of one process: a [`Sampler`] of its threads feeding a [`Profiler`].

use std::time::{Duration, Instant, SystemTime};

use otel_ctx_reader::process::ReaderOptions;
use otel_ctx_reader::ProcessContextReader;
use otel_ctx_sampler::PreparedProcess;
use otel_ctx_sampler::{Following, Sampler, SamplerError, SamplerOptions};

use crate::source::jvm::{HotSpot, JavaPerfMap, JavaPerfMapStats, JvmError};
use crate::{Profile, ProfileOptions, Profiler, JAVA_PERF_MAP_REFRESH};

/// The default of [`SessionOptions::debuginfod_time`].
pub const DEFAULT_DEBUGINFOD_TIME: Duration = Duration::from_secs(1);

/// How a session samples and profiles. Start from `SessionOptions::default()`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// How the threads are sampled (eBPF or ptrace, the rate, the stack copied).
    pub sampler: SamplerOptions,
    /// How each process's samples are unwound, symbolized and aggregated. Its
    /// [`period_ns`](ProfileOptions::period_ns) is taken from the sampler's rate.
    pub profile: ProfileOptions,
    /// With the feature `debuginfod` and `DEBUGINFOD_URLS` set: how long, in all, the
    /// debug files still missing when sampling is over may be waited for (each download
    /// within its own bounds too); 0 asks no server. Default
    /// [`DEFAULT_DEBUGINFOD_TIME`].
    pub debuginfod_time: Duration,
    /// Ask the process, if it is a HotSpot JVM, to write its perf map while it is
    /// sampled ([`JavaPerfMap`]: at the start, every [`JAVA_PERF_MAP_REFRESH`], and at
    /// the end), so that its JIT-compiled Java methods are named. Default `false`: a
    /// JVM is never touched.
    pub java_perf_map: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            sampler: SamplerOptions::default(),
            profile: ProfileOptions::default(),
            debuginfod_time: DEFAULT_DEBUGINFOD_TIME,
            java_perf_map: false,
        }
    }
}

impl SessionOptions {
    /// Sets [`java_perf_map`](Self::java_perf_map).
    #[must_use]
    pub fn with_java_perf_map(mut self, ask: bool) -> Self {
        self.java_perf_map = ask;
        self
    }

    /// Sets [`debuginfod_time`](Self::debuginfod_time).
    #[must_use]
    pub fn with_debuginfod_time(mut self, time: Duration) -> Self {
        self.debuginfod_time = time;
        self
    }

    /// Sets [`sampler`](Self::sampler).
    #[must_use]
    pub fn with_sampler(mut self, sampler: SamplerOptions) -> Self {
        self.sampler = sampler;
        self
    }

    /// Sets [`profile`](Self::profile).
    #[must_use]
    pub fn with_profile(mut self, profile: ProfileOptions) -> Self {
        self.profile = profile;
        self
    }

    /// The profile options, with the sampler's period.
    pub(crate) fn profile_options(&self) -> ProfileOptions {
        let hz = u64::from(self.sampler.frequency_hz.max(1));
        self.profile
            .clone()
            .with_period_ns(1_000_000_000 / hz)
            .with_off_cpu(self.sampler.off_cpu.is_some())
    }
}

/// A CPU profile of one process being taken: its threads sampled (eBPF or ptrace), each
/// sample unwound, labeled with its thread context and counted. A process that publishes
/// no thread contexts is profiled by its stacks ([`following`](Self::following) says
/// so).
///
/// ```no_run
/// use std::time::Duration;
/// use otel_ctx_profile::{ProcessProfiler, SessionOptions};
///
/// let mut session = ProcessProfiler::start(1234, SessionOptions::default())?;
/// session.run(Duration::from_secs(10), |_| false)?;
/// session.profile().write_pprof(std::fs::File::create("cpu.pb.gz")?)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ProcessProfiler {
    pid: u32,
    sampler: Sampler,
    profiler: Profiler,
    following: Following,
    exited: bool,
    started: Instant,
    /// When it started, on the wall clock (the profile's start).
    started_wall: SystemTime,
    /// The end of the last step: the sampling window is `started..sampled_until`.
    sampled_until: Instant,
    /// How long [`finish`](Self::finish) may wait for debuginfod.
    #[cfg(feature = "debuginfod")]
    debuginfod_time: Duration,
    /// What [`finish`](Self::finish) asked debuginfod for, and got.
    #[cfg(feature = "debuginfod")]
    fetches: Vec<crate::DebuginfodFetch>,
    /// With [`SessionOptions::java_perf_map`]: the JVM's perf map kept fresh, or why the
    /// process was left alone.
    java: Option<Result<JavaPerfMap, JvmError>>,
    /// What came of it, once [`finish`](Self::finish) asked the last time.
    java_stats: Option<JavaPerfMapStats>,
}

impl ProcessProfiler {
    /// Starts profiling process `pid`: the sampler (eBPF unless the options say ptrace,
    /// or BPF cannot be used), its thread reader, its modules and its resource.
    pub fn start(pid: u32, options: SessionOptions) -> Result<Self, SamplerError> {
        let mut sampler = Sampler::new(options.sampler)?;
        let prepared = PreparedProcess::open(pid, sampler.options())?;
        let (following, maps) = sampler.adopt(prepared)?;
        let mut profiler = Profiler::new(pid, options.profile_options());
        profiler.update_maps(&maps);
        let snapshot = ProcessContextReader::from_maps(&maps, ReaderOptions::default())
            .and_then(|mut reader| reader.read())
            .ok();
        profiler.set_process_context(snapshot.as_ref());
        let started = Instant::now();
        Ok(Self {
            pid,
            sampler,
            profiler,
            following,
            exited: false,
            started,
            started_wall: SystemTime::now(),
            sampled_until: started,
            #[cfg(feature = "debuginfod")]
            debuginfod_time: options.debuginfod_time,
            #[cfg(feature = "debuginfod")]
            fetches: Vec::new(),
            java: options.java_perf_map.then(|| {
                HotSpot::find(pid).map(|jvm| JavaPerfMap::start(jvm, JAVA_PERF_MAP_REFRESH))
            }),
            java_stats: None,
        })
    }

    /// With [`SessionOptions::java_perf_map`]: what came of asking the JVM for its perf
    /// map (after [`finish`](Self::finish), the last request included), or why the
    /// process was not asked. `None` when the option is off.
    pub fn java_perf_map(&self) -> Option<Result<JavaPerfMapStats, &JvmError>> {
        match (&self.java, &self.java_stats) {
            (None, _) => None,
            (Some(Err(e)), _) => Some(Err(e)),
            (Some(Ok(_)), Some(stats)) => Some(Ok(stats.clone())),
            (Some(Ok(map)), None) => Some(Ok(map.stats())),
        }
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// How the process is followed: with its thread contexts, or for its stacks only
    /// (and why).
    pub const fn following(&self) -> &Following {
        &self.following
    }

    /// The sampler: how it samples ([`Sampler::method`], [`Sampler::fallback`]), its
    /// counts ([`Sampler::stats`]), the process's thread reader.
    pub const fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The profiler: its counts so far ([`Profiler::stats`]).
    pub const fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// Whether the process has exited (no more samples come).
    pub const fn has_exited(&self) -> bool {
        self.exited
    }

    /// How long the session has sampled: from its start to the end of its last step
    /// (what comes after, such as symbolizing, is not counted). The profile's
    /// [`duration`](Profile::duration) is this window too.
    pub fn elapsed(&self) -> Duration {
        self.sampled_until.duration_since(self.started)
    }

    /// One step, at most `wait` long: the samples taken meanwhile are profiled, and the
    /// process's modules are read again when its samples or its context say they
    /// changed. Returns `false` once the process has exited.
    pub fn step(&mut self, wait: Duration) -> Result<bool, SamplerError> {
        if self.exited {
            return Ok(false);
        }
        let profiler = &mut self.profiler;
        let step = self
            .sampler
            .step(wait, |sample| profiler.add(sample).outside_modules)?;
        self.sampled_until = Instant::now();
        for maps in &step.maps {
            self.profiler.update_maps(maps);
        }
        if step.gained_contexts.contains(&self.pid) {
            self.following = Following::Contexts;
        }
        if step.exited.contains(&self.pid) {
            self.exited = true;
        }
        Ok(!self.exited)
    }

    /// Samples for `duration` (0: until `stop` says so), or until the process exits or
    /// `stop` returns `true` (it is asked after every step, at least ten times a second,
    /// and may look at the session: its counts for a progress line).
    pub fn run(
        &mut self,
        duration: Duration,
        mut stop: impl FnMut(&Self) -> bool,
    ) -> Result<(), SamplerError> {
        let started = Instant::now();
        let forever = duration.is_zero();
        while forever || started.elapsed() < duration {
            let left = match forever {
                true => STEP,
                false => duration.saturating_sub(started.elapsed()).min(STEP),
            };
            if !self.step(left)? || stop(self) {
                break;
            }
        }
        // What the BPF program took since the last wait, without waiting.
        if !self.exited {
            self.step(Duration::ZERO)?;
        }
        Ok(())
    }

    /// Ends the sampling (the eBPF program is detached: nothing runs in the target from
    /// now on, and nothing is lost while the profile is made; its last samples are read
    /// and its ring buffer given back), asks a JVM followed with
    /// [`SessionOptions::java_perf_map`] for its perf map once more, then, with the feature
    /// `debuginfod` and `DEBUGINFOD_URLS` set, asks its servers for the debug files of
    /// the stripped modules that have frames in the profile, for at most
    /// [`SessionOptions::debuginfod_time`] in all ([`debuginfod`](Self::debuginfod)
    /// says what came of it). The next [`profile`](Self::profile) names their frames.
    pub fn finish(&mut self) {
        self.sampler.stop();
        // What the program wrote before it was detached is read (a failure to read it
        // loses only those last samples, and is not the profile's), then the ring is
        // given back: the profile is made without it.
        if !self.exited {
            let _ = self.step(Duration::ZERO);
        }
        self.sampler.close();
        if let Some(Ok(map)) = &mut self.java {
            self.java_stats = Some(map.finish());
        }
        #[cfg(feature = "debuginfod")]
        if !self.debuginfod_time.is_zero() {
            if let Some(client) = crate::Debuginfod::from_env() {
                let until = Instant::now() + self.debuginfod_time;
                self.fetches = self.profiler.fetch_debug_files(&client, until);
            }
        }
    }

    /// What [`finish`](Self::finish) asked debuginfod for, module by module, and got.
    #[cfg(feature = "debuginfod")]
    pub fn debuginfod(&self) -> &[crate::DebuginfodFetch] {
        &self.fetches
    }

    /// The profile so far: every distinct frame symbolized, every label spelled out; it
    /// starts when the session did and lasts the window sampled
    /// ([`elapsed`](Self::elapsed)), whatever the profile took to make.
    pub fn profile(&self) -> Profile {
        let mut profile = self.profiler.profile();
        profile.start = self.started_wall;
        profile.duration = self.elapsed();
        profile
    }
}

/// The longest step of [`ProcessProfiler::run`]: how soon `stop` is asked.
const STEP: Duration = Duration::from_millis(100);
