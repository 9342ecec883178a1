//! How a sampler samples: the way ([`Method`]), the threads a ptrace round stops
//! ([`Threads`]), the rate, the stack copy and the limits ([`SamplerOptions`]).

use std::time::Duration;

use otel_ctx_reader::thread::ThreadReaderOptions;

use crate::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE};

/// The highest rate a sampler takes.
pub const MAX_FREQUENCY_HZ: u32 = 10_000;
/// The most processes a sampler follows at once by default, and the most the eBPF
/// program has room for (its `targets` map, `MAX_PROCESSES` in `bpf/sampler.bpf.c`).
pub const MAX_PROCESSES: usize = 1024;

/// How a sampler takes its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// The BPF program, at CPU-clock ticks on every CPU: a thread is sampled while it
    /// runs, and nothing is stopped (feature `ebpf`; root, or `CAP_BPF` and
    /// `CAP_PERFMON`, and a kernel with BTF).
    Ebpf,
    /// Rounds at the rate, each stopping the chosen threads one at a time with ptrace
    /// (root or `CAP_SYS_PTRACE`).
    Ptrace,
}

impl Method {
    /// `eBPF` or `ptrace`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ebpf => "eBPF",
            Self::Ptrace => "ptrace",
        }
    }
}

/// Which threads a ptrace round stops (the eBPF program samples the threads that run
/// when its ticks come, whatever this says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Threads {
    /// The threads that ran on a CPU since the last round (their scheduler statistics;
    /// `R` in their `stat` where the kernel keeps none), each sample weighted by the CPU
    /// time it stands for ([`Sample::weight_ns`](crate::Sample::weight_ns)): a CPU
    /// profile.
    #[default]
    Running,
    /// Every thread: what each thread is doing, idle ones too.
    All,
}

/// How a [`Sampler`](crate::Sampler) samples. Start from `SamplerOptions::default()` and
/// set fields with the builder methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplerOptions {
    /// The way to sample; `None` (the default): eBPF when it can be used (the feature is
    /// built in and the kernel lets it load), ptrace otherwise
    /// ([`Sampler::fallback`](crate::Sampler::fallback) says why).
    pub method: Option<Method>,
    /// Samples per second: on every CPU with eBPF, of every chosen thread with ptrace.
    /// Default 99.
    pub frequency_hz: u32,
    /// Bytes of each sample's stack to copy, for a profiler to unwind (at most
    /// [`MAX_STACK_SIZE`]); 0 copies none and takes no registers. Default
    /// [`DEFAULT_STACK_SIZE`].
    pub stack_size: usize,
    /// Which threads a ptrace round stops. Default [`Threads::Running`].
    pub threads: Threads,
    /// The most processes followed at once. Default 1024.
    pub max_processes: usize,
    /// How each process's thread reader is opened. A process whose context announces no
    /// schema the reader knows is still read, its attributes named by index until its
    /// key map comes, unless [`require_known_schema`](Self::require_known_schema).
    pub thread_reader: ThreadReaderOptions,
    /// Refuse a process whose context announces no known thread-context schema,
    /// instead of reading it anyway. Default `false`.
    pub require_known_schema: bool,
    /// Walk the frames of the processes that run CPython (3.11, 3.13, 3.14) with each
    /// sample ([`Sample::python`](crate::Sample::python); only when stacks are copied).
    /// Default `true`.
    pub python: bool,
    /// With eBPF: how long the sampler's reader may be held up between two reads before
    /// samples are lost (its ring buffer holds that many seconds of samples, within a
    /// memory bound). Default 1; at least 1.
    pub ring_seconds: u32,
    /// Measure off-CPU time too ([`Sample::off_cpu_ns`](crate::Sample::off_cpu_ns)).
    /// With eBPF, a system call of a followed process's thread that kept it away from a
    /// CPU at least [`OffCpu::threshold`] is sampled as it returns, its stack where it
    /// blocked, with the time it was away. With ptrace, each round samples every thread, whatever
    /// its state (wall-clock sampling, whatever [`threads`](Self::threads) says), and
    /// each sample is split by the thread's CPU clock since its last sample into the
    /// time it ran ([`Sample::weight_ns`](crate::Sample::weight_ns)) and the time it
    /// spent off a CPU. Default `None`: CPU time only.
    pub off_cpu: Option<OffCpu>,
}

/// [`OffCpu::threshold`] by default: waits shorter than this are not sampled.
pub const DEFAULT_OFF_CPU_THRESHOLD: Duration = Duration::from_micros(200);

/// How the eBPF sampler takes off-CPU samples ([`SamplerOptions::off_cpu`]; ptrace's
/// wall-clock rounds take neither into account). Start from `OffCpu::default()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct OffCpu {
    /// The shortest wait sampled: the time of shorter ones is not counted, and they cost
    /// no sample. Default [`DEFAULT_OFF_CPU_THRESHOLD`].
    pub threshold: Duration,
    /// One system call's waits in this many are followed, and each sample stands for
    /// that many, so that the totals stay right: following a call costs its thread
    /// about 0.3 us. Default 1 (every one); at least 1.
    pub one_in: u32,
    /// The most off-CPU samples a second, in all. Waits are sampled by time, as a CPU
    /// profile samples: a wait shorter than a period is sampled with a chance of its
    /// time in the period, and then stands for the period, so that long waits are always
    /// sampled and the totals stay right. The period starts at `1 / max_rate` seconds
    /// and follows the pace of the samples (looked at four times a second); 0: no bound,
    /// every wait over the threshold sampled. Default [`DEFAULT_OFF_CPU_MAX_RATE`].
    pub max_rate: u32,
}

/// [`OffCpu::max_rate`] by default: about as many as a 99 Hz CPU profile takes of one
/// busy thread. Each sample copies the thread's stack in the kernel, and its cost reaches
/// the target beyond the time counted (`cli/benches/off_cpu_overhead.rs`).
pub const DEFAULT_OFF_CPU_MAX_RATE: u32 = 100;

impl Default for OffCpu {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_OFF_CPU_THRESHOLD,
            one_in: 1,
            max_rate: DEFAULT_OFF_CPU_MAX_RATE,
        }
    }
}

impl OffCpu {
    /// Sets [`threshold`](Self::threshold) (at least 1 ns).
    #[must_use]
    pub fn with_threshold(mut self, threshold: Duration) -> Self {
        self.threshold = threshold.max(Duration::from_nanos(1));
        self
    }

    /// Sets [`max_rate`](Self::max_rate) (0: no bound).
    #[must_use]
    pub const fn with_max_rate(mut self, per_second: u32) -> Self {
        self.max_rate = per_second;
        self
    }

    /// Sets [`one_in`](Self::one_in) (at least 1).
    #[must_use]
    pub const fn with_one_in(mut self, one_in: u32) -> Self {
        self.one_in = if one_in == 0 { 1 } else { one_in };
        self
    }
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            method: None,
            frequency_hz: 99,
            stack_size: DEFAULT_STACK_SIZE,
            threads: Threads::Running,
            max_processes: MAX_PROCESSES,
            thread_reader: ThreadReaderOptions::default(),
            require_known_schema: false,
            python: true,
            ring_seconds: 1,
            off_cpu: None,
        }
    }
}

impl SamplerOptions {
    /// Sets [`method`](Self::method).
    #[must_use]
    pub const fn with_method(mut self, method: Option<Method>) -> Self {
        self.method = method;
        self
    }

    /// Sets [`frequency_hz`](Self::frequency_hz).
    #[must_use]
    pub const fn with_frequency_hz(mut self, hz: u32) -> Self {
        self.frequency_hz = hz;
        self
    }

    /// Sets [`stack_size`](Self::stack_size) (cut to [`MAX_STACK_SIZE`]).
    #[must_use]
    pub const fn with_stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = if bytes > MAX_STACK_SIZE {
            MAX_STACK_SIZE
        } else {
            bytes
        };
        self
    }

    /// Sets [`ring_seconds`](Self::ring_seconds) (at least 1).
    #[must_use]
    pub const fn with_ring_seconds(mut self, seconds: u32) -> Self {
        self.ring_seconds = if seconds == 0 { 1 } else { seconds };
        self
    }

    /// Sets [`threads`](Self::threads).
    #[must_use]
    pub const fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }

    /// Sets [`max_processes`](Self::max_processes) (at least 1).
    #[must_use]
    pub const fn with_max_processes(mut self, max: usize) -> Self {
        self.max_processes = if max == 0 { 1 } else { max };
        self
    }

    /// Sets [`thread_reader`](Self::thread_reader).
    #[must_use]
    pub const fn with_thread_reader(mut self, options: ThreadReaderOptions) -> Self {
        self.thread_reader = options;
        self
    }

    /// Sets [`require_known_schema`](Self::require_known_schema).
    #[must_use]
    pub const fn with_require_known_schema(mut self, require: bool) -> Self {
        self.require_known_schema = require;
        self
    }

    /// Sets [`off_cpu`](Self::off_cpu).
    #[must_use]
    pub const fn with_off_cpu(mut self, off_cpu: Option<OffCpu>) -> Self {
        self.off_cpu = off_cpu;
        self
    }

    /// Sets [`python`](Self::python).
    #[must_use]
    pub const fn with_python(mut self, python: bool) -> Self {
        self.python = python;
        self
    }
}
