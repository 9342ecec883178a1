//! One sampler of threads, whichever way it samples: ptrace rounds at a rate, or the
//! eBPF program at CPU-clock ticks (feature `ebpf`). It follows one process or many, owns
//! their thread readers, keeps them current (one refresh policy), and hands every sample
//! over in one shape: the process, the thread and its name, the user registers and a
//! copy of the top of its stack, and its thread context named with its process's key
//! map.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use otel_ctx_reader::{Sampler, SamplerOptions};
//!
//! let mut sampler = Sampler::new(SamplerOptions::default())?; // eBPF if it can, else ptrace
//! sampler.add_process(1234)?;
//! let end = Instant::now() + Duration::from_secs(5);
//! while Instant::now() < end {
//!     sampler.step(Duration::from_millis(100), |sample| {
//!         let route = sample.context().and_then(|c| c.attribute("http.route"));
//!         println!("{} {}: {:?}", sample.tid, sample.thread_name, route);
//!         false // the sample gave no sign that the process's mappings changed
//!     })?;
//! }
//! # Ok::<(), otel_ctx_sampler::SamplerError>(())
//! ```
//!
//! The refresh policy, the same for both ways: the key map is looked at again every
//! second (two small copies when it is unchanged); the maps are read again at most once
//! a second on evidence that they changed (a slot that could not be computed, a sample
//! the caller found outside every known module, an update of the process context), and
//! every [`MODULES_FALLBACK`] otherwise; when they are, the modules are analysed again
//! and a new slot location goes to the BPF program, and [`Step::maps`] hands the fresh
//! maps to the caller (a profiler's modules come from them too). A process followed for
//! its stacks only (it exports no `otel_thread_ctx_v1`) is looked at again at the same
//! times, and read for its contexts once it exports the symbol. Every second the
//! followed processes are checked for having exited (or been replaced by another with
//! their id): [`Step::exited`] names them.
//!
//! Beside the sampler, in named modules: [`stack`] (the stack copy of a ptrace sample,
//! with the thread context or without: [`stack::StackReader`],
//! [`stack::sample_with_python_into`]), [`python`] (CPython 3.11, 3.13 and 3.14's own
//! frames: the interpreter found by `_PyRuntime`, each thread's frame chain, the code
//! objects' names in a bounded cache), and with `ebpf` the BPF program's own sampler and
//! the publication hook (`ebpf`). Everything it reads of a target goes through
//! `otel-ctx-reader` (maps, memory, files, the ptrace stop, TLS resolution), below it.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "ebpf")]
pub mod ebpf;
mod list;
mod process;
mod ptrace;
pub mod python;
pub mod stack;
mod tally;
mod watch;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::python::{PythonError, PythonFrame, PythonNames, PythonProcess, PythonStack};
use crate::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
use otel_ctx_reader::maps::ProcessMaps;
use otel_ctx_reader::thread::tls::SampleError;
use otel_ctx_reader::thread::{
    ThreadContextRef, ThreadError, ThreadReader, ThreadReaderOptions, ThreadReport,
};
use otel_ctx_reader::Error;
use otel_ctx_reader::UserRegisters;

pub use list::{ThreadList, EBPF_WINDOW};
pub use process::{Following, PreparedProcess};
pub use stack::StackBuffer;
pub use tally::{AttributeTally, NO_CONTEXT, UNREADABLE};
pub use watch::Watch;

use process::Process;

/// How often, at most, one process's maps are read again on evidence, and its key map
/// looked at again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// How often a process's maps are read again without evidence that they changed:
/// reading them takes the target's mmap lock.
pub const MODULES_FALLBACK: Duration = Duration::from_secs(30);
/// How often the followed processes are checked for having exited.
const EXIT_CHECK: Duration = Duration::from_secs(1);
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
    /// time it stands for ([`Sample::weight_ns`]): a CPU profile.
    #[default]
    Running,
    /// Every thread: what each thread is doing, idle ones too.
    All,
}

/// How a [`Sampler`] samples. Start from `SamplerOptions::default()` and set fields with
/// the builder methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplerOptions {
    /// The way to sample; `None` (the default): eBPF when it can be used (the feature is
    /// built in and the kernel lets it load), ptrace otherwise
    /// ([`Sampler::fallback`] says why).
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
    /// sample ([`Sample::python`]; only when stacks are copied). Default `true`.
    pub python: bool,
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

    /// Sets [`python`](Self::python).
    #[must_use]
    pub const fn with_python(mut self, python: bool) -> Self {
        self.python = python;
        self
    }
}

/// Why a sampler cannot start or cannot follow a process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// The process cannot be read (gone, permission denied, ...).
    #[error(transparent)]
    Process(#[from] Error),
    /// Its thread contexts cannot be read, and it cannot be followed for its stacks
    /// either.
    #[error(transparent)]
    Thread(#[from] ThreadError),
    /// The eBPF sampler cannot run, or refused the process.
    #[cfg(feature = "ebpf")]
    #[error(transparent)]
    Ebpf(#[from] crate::ebpf::EbpfError),
    /// eBPF was asked for, and this reader was built without it.
    #[error(
        "this reader was built without the eBPF sampler: rebuild with `--features ebpf`, or \
         sample with ptrace"
    )]
    NoEbpf,
    /// The rate is 0 or above [`MAX_FREQUENCY_HZ`].
    #[error("a sampling rate of {0} Hz: use a rate between 1 and {MAX_FREQUENCY_HZ}")]
    Frequency(u32),
    /// The sampler follows as many processes as it has room for.
    #[error(
        "the sampler follows {max} processes already, as many as it has room for \
         (SamplerOptions::max_processes)"
    )]
    TooManyProcesses {
        /// How many it has room for.
        max: usize,
    },
}

/// One sample, as [`Sampler::step`] hands it over (borrowed until the callback returns),
/// and as a profiler takes it: the one shape of a sample from the sampler up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Sample<'a> {
    /// The thread's process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// Its name (`/proc/<pid>/task/<tid>/comm`, read once per thread), empty when it
    /// could not be read.
    pub thread_name: &'a str,
    /// Its user registers, when the sampler copies stacks and could take them.
    pub registers: Option<UserRegisters>,
    /// The top of its user stack, from the stack pointer up (empty without registers).
    pub stack: &'a [u8],
    /// Its kernel stack's return addresses (eBPF only, when asked for; native-endian
    /// `u64`s, innermost first).
    pub kernel_frames: &'a [u8],
    /// Its thread context (`Ok(None)`: none attached, or the process is followed for its
    /// stacks only), or why it could not be read.
    pub context: Result<Option<ThreadContextRef<'a>>, &'a SampleError>,
    /// Its Python frames, when its process runs CPython ([`SamplerOptions::python`]).
    pub python: Option<PythonSample<'a>>,
    /// The time it stands for, in nanoseconds; 0: one sampling period.
    pub weight_ns: u64,
}

/// A sample's Python frames, with the names of their code objects, read by the sampler
/// before it hands the sample over.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PythonSample<'a> {
    /// The frames, newest first, as the walk found them (shims among them), or why it
    /// could not walk them (the sample keeps its native stack).
    pub frames: Result<&'a [PythonFrame], &'a PythonError>,
    /// Their names ([`PythonNames::frame_info`]) and where the evaluation loop is.
    pub names: PythonNames<'a>,
}

impl<'a> Sample<'a> {
    /// A sample of thread `tid` (named `thread_name`) of process `pid`: its registers and
    /// stack copy, without a context or Python frames, of one sampling period's weight.
    pub fn new(
        pid: u32,
        tid: u32,
        thread_name: &'a str,
        registers: Option<UserRegisters>,
        stack: &'a [u8],
    ) -> Self {
        Self {
            pid,
            tid,
            thread_name,
            registers,
            stack,
            kernel_frames: &[],
            context: Ok(None),
            python: None,
            weight_ns: 0,
        }
    }

    /// Sets [`context`](Self::context): a record read some other way.
    #[must_use]
    pub fn with_context(mut self, context: Option<ThreadContextRef<'a>>) -> Self {
        self.context = Ok(context);
        self
    }

    /// Sets [`weight_ns`](Self::weight_ns).
    #[must_use]
    pub const fn with_weight_ns(mut self, weight: u64) -> Self {
        self.weight_ns = weight;
        self
    }

    /// The thread context, if the sample has one.
    pub fn context(&self) -> Option<&ThreadContextRef<'a>> {
        self.context.as_ref().ok().and_then(Option::as_ref)
    }
}

/// What a [`Sampler::step`] found besides samples.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Step {
    /// The maps of the processes read again in this step (on evidence, or every
    /// [`MODULES_FALLBACK`]): a profiler takes its modules from them.
    pub maps: Vec<ProcessMaps>,
    /// The processes found exited (or replaced by another with their id) in this step:
    /// no longer followed.
    pub exited: Vec<u32>,
    /// Processes followed for their stacks only that now export `otel_thread_ctx_v1`:
    /// their samples carry contexts from now on.
    pub gained_contexts: Vec<u32>,
}

/// An error seen in samples, with how often.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreadable {
    /// The kind of error ([`SampleError::kind`]).
    pub kind: &'static str,
    /// Samples with an error of this kind.
    pub samples: u64,
    /// The message of the first of them.
    pub message: String,
}

/// What a sampler did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplerStats {
    /// Samples handed over.
    pub samples: u64,
    /// Those with a thread context.
    pub with_context: u64,
    /// Those whose context could not be read, by the kind of error, most first.
    pub unreadable: Vec<Unreadable>,
    /// Samples the BPF program could not hand over (its ring buffer was full: the
    /// consumer fell behind for longer than the ring holds).
    pub lost: u64,
    /// CPU-clock ticks that interrupted a thread of a followed process (eBPF).
    pub ticks: u64,
    /// Rounds taken (ptrace).
    pub rounds: u64,
}

impl SamplerStats {
    /// Samples whose context could not be read, every kind together.
    pub fn unreadable_samples(&self) -> u64 {
        self.unreadable.iter().map(|u| u.samples).sum()
    }
}

/// Where the samples come from.
enum Engine {
    #[cfg(feature = "ebpf")]
    Ebpf(Box<crate::ebpf::EbpfSampler>),
    Ptrace(ptrace::Rounds),
}

/// One sampler of the threads of one process or many: see the [module](self).
pub struct Sampler {
    engine: Engine,
    options: SamplerOptions,
    /// Why eBPF was not used, when the method was left to the sampler.
    fallback: Option<String>,
    /// The thread readers of the processes with contexts, by process id.
    readers: HashMap<u32, ThreadReader>,
    processes: HashMap<u32, Process>,
    /// The order processes were added in.
    order: Vec<u32>,
    stats: SamplerStats,
    exits_checked: Instant,
    /// The Python frames of the sample being handed over.
    python_frames: PythonStack,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("method", &self.method())
            .field("processes", &self.order)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// A sampler with no process yet ([`add_process`](Self::add_process) adds them).
    /// With eBPF, the program is loaded and attached now, to a CPU-clock event on every
    /// CPU.
    pub fn new(options: SamplerOptions) -> Result<Self, SamplerError> {
        if options.frequency_hz == 0 || options.frequency_hz > MAX_FREQUENCY_HZ {
            return Err(SamplerError::Frequency(options.frequency_hz));
        }
        let (engine, fallback) = Self::engine(&options)?;
        Ok(Self {
            engine,
            options,
            fallback,
            readers: HashMap::new(),
            processes: HashMap::new(),
            order: Vec::new(),
            stats: SamplerStats::default(),
            exits_checked: Instant::now(),
            python_frames: PythonStack::new(),
        })
    }

    fn engine(options: &SamplerOptions) -> Result<(Engine, Option<String>), SamplerError> {
        let ptrace = || Engine::Ptrace(ptrace::Rounds::new(options));
        match options.method {
            Some(Method::Ptrace) => Ok((ptrace(), None)),
            #[cfg(feature = "ebpf")]
            Some(Method::Ebpf) => Ok((Engine::Ebpf(Box::new(ebpf_sampler(options)?)), None)),
            #[cfg(not(feature = "ebpf"))]
            Some(Method::Ebpf) => Err(SamplerError::NoEbpf),
            #[cfg(feature = "ebpf")]
            None => match ebpf_sampler(options) {
                Ok(sampler) => Ok((Engine::Ebpf(Box::new(sampler)), None)),
                Err(e) => Ok((ptrace(), Some(e.to_string()))),
            },
            #[cfg(not(feature = "ebpf"))]
            None => Ok((ptrace(), Some(SamplerError::NoEbpf.to_string()))),
        }
    }

    /// Stops sampling: the eBPF program is detached from the CPUs' ticks (ptrace rounds
    /// only ever run inside [`step`](Self::step)). Its counts stay; a step after it takes
    /// no new sample. For a session whose sampling is over and whose profile is being
    /// made, so that waiting then (on a debuginfod server, say) costs no sample.
    pub fn stop(&mut self) {
        #[cfg(feature = "ebpf")]
        if let Engine::Ebpf(sampler) = &mut self.engine {
            sampler.stop();
        }
    }

    /// How this sampler samples.
    pub const fn method(&self) -> Method {
        match self.engine {
            #[cfg(feature = "ebpf")]
            Engine::Ebpf(_) => Method::Ebpf,
            Engine::Ptrace(_) => Method::Ptrace,
        }
    }

    /// When the method was left to the sampler and it samples with ptrace: why eBPF was
    /// not used.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The options it was made with.
    pub const fn options(&self) -> &SamplerOptions {
        &self.options
    }

    /// Follows process `pid`: reads its maps and opens its thread reader (which locates
    /// `otel_thread_ctx_v1` and reads the key map), or, when it exports no such symbol,
    /// follows it for its stacks only ([`Following::StacksOnly`], which says why).
    /// Following a process again replaces what the sampler knew of it.
    pub fn add_process(&mut self, pid: u32) -> Result<Following, SamplerError> {
        let prepared = PreparedProcess::open(pid, &self.options)?;
        self.adopt(prepared).map(|(following, _)| following)
    }

    /// Follows a process read with [`PreparedProcess::open`] (on any thread: the costly
    /// part of following a process, done where it holds up no sampling); returns how,
    /// and the maps it was read with.
    pub fn adopt(
        &mut self,
        prepared: PreparedProcess,
    ) -> Result<(Following, ProcessMaps), SamplerError> {
        let pid = prepared.pid;
        if !self.processes.contains_key(&pid) && self.processes.len() >= self.options.max_processes
        {
            return Err(SamplerError::TooManyProcesses {
                max: self.options.max_processes,
            });
        }
        let (process, reader, maps) = Process::from_prepared(prepared);
        match &mut self.engine {
            #[cfg(feature = "ebpf")]
            Engine::Ebpf(sampler) => {
                match &reader {
                    Ok(reader) => sampler.add_process(reader)?,
                    Err(_) => sampler.add_process_stacks(pid)?,
                }
                if let Some(python) = &process.python {
                    sampler.set_process_python(pid, python)?;
                }
            }
            Engine::Ptrace(_) => {}
        }
        let following = match reader {
            Ok(reader) => {
                self.readers.insert(pid, reader);
                Following::Contexts
            }
            Err(why) => {
                self.readers.remove(&pid);
                Following::StacksOnly(why)
            }
        };
        if self.processes.insert(pid, process).is_none() {
            self.order.push(pid);
        }
        Ok((following, maps))
    }

    /// Stops following process `pid`; whether it was followed. Its samples not handed
    /// over yet are dropped.
    pub fn remove_process(&mut self, pid: u32) -> bool {
        if self.processes.remove(&pid).is_none() {
            return false;
        }
        self.readers.remove(&pid);
        self.order.retain(|&p| p != pid);
        #[cfg(feature = "ebpf")]
        if let Engine::Ebpf(sampler) = &mut self.engine {
            sampler.remove_process(pid);
        }
        true
    }

    /// The followed processes, in the order they were added.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.order.iter().copied()
    }

    /// Whether the sampler follows process `pid`.
    pub fn follows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// The thread reader of process `pid` (its resolution, key map, skipped modules):
    /// `None` for a process not followed, or followed for its stacks only.
    pub fn reader(&self, pid: u32) -> Option<&ThreadReader> {
        self.readers.get(&pid)
    }

    /// The CPython interpreter of process `pid`, whose frames its samples carry: its
    /// version, module and name cache.
    pub fn python(&self, pid: u32) -> Option<&PythonProcess> {
        self.processes.get(&pid)?.python.as_ref()
    }

    /// Why process `pid`, which claims to run CPython, gets no Python frames (a version
    /// this reader refuses, or no interpreter after all).
    pub fn python_refusal(&self, pid: u32) -> Option<&str> {
        self.processes.get(&pid)?.python_refusal.as_deref()
    }

    /// Stops following process `pid` and hands its thread reader over (`None` for a
    /// process not followed, or followed for its stacks only): for a caller that read
    /// what it needed ([`snapshot`](Self::snapshot)) and keeps describing the process.
    pub fn take_reader(&mut self, pid: u32) -> Option<ThreadReader> {
        let reader = self.readers.remove(&pid);
        self.remove_process(pid);
        reader
    }

    /// Says that process `pid`'s mappings or process context may have changed (a
    /// publication event, a sample outside every module): the next step reads its maps
    /// and context again (at most once per [`REFRESH_INTERVAL`]).
    pub fn suspect_changes(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.suspect = true;
        }
    }

    /// What the sampler did so far.
    pub fn stats(&self) -> SamplerStats {
        let mut stats = self.stats.clone();
        stats
            .unreadable
            .sort_by(|a, b| b.samples.cmp(&a.samples).then(a.kind.cmp(b.kind)));
        #[cfg(feature = "ebpf")]
        if let Engine::Ebpf(sampler) = &self.engine {
            let counters = sampler.counters().unwrap_or_default();
            stats.lost = counters.lost;
            stats.ticks = counters.ticks;
        }
        stats
    }

    /// One step of sampling, at most `wait` long: with eBPF, waits for samples (up to
    /// `wait`) and hands over every one that is ready; with ptrace, waits until the next
    /// round is due (up to `wait`) and takes it. `on_sample` gets each sample and says
    /// whether it saw a sign that the process's mappings changed (such as a stack
    /// address outside every module it knows). Then the refresh policy runs and the
    /// exited processes are dropped (both said in the returned [`Step`]).
    pub fn step<F>(&mut self, wait: Duration, mut on_sample: F) -> Result<Step, SamplerError>
    where
        F: FnMut(&Sample<'_>) -> bool,
    {
        let Self {
            engine,
            readers,
            processes,
            stats,
            order,
            python_frames,
            ..
        } = self;
        match engine {
            #[cfg(feature = "ebpf")]
            Engine::Ebpf(sampler) => {
                // A failed wait (not an interruption) shows as no samples.
                let _ = sampler.wait(wait);
                while let Some(s) = sampler.next_sample(readers) {
                    let Some(process) = processes.get_mut(&s.pid) else {
                        continue;
                    };
                    let taken = !s.stack.is_empty() || s.registers != UserRegisters::default();
                    let walked;
                    let python = match process.python.as_mut() {
                        Some(interpreter) if s.python.is_walked() => {
                            walked = s.python.frames_into(python_frames);
                            let frames = walked.as_ref().map(|()| python_frames.frames());
                            let names = interpreter.name_frames(frames.unwrap_or_default());
                            Some(PythonSample { frames, names })
                        }
                        _ => None,
                    };
                    let suspect = {
                        let sample = Sample {
                            pid: s.pid,
                            tid: s.tid,
                            thread_name: process.names.get(s.pid, s.tid),
                            registers: taken.then_some(s.registers),
                            stack: s.stack,
                            kernel_frames: s.kernel_frames,
                            context: match &s.context {
                                Ok(context) => Ok(context.clone()),
                                Err(e) => Err(e),
                            },
                            python,
                            weight_ns: 0,
                        };
                        deliver(stats, &sample, &mut on_sample)
                    };
                    process.suspect |= suspect;
                }
            }
            Engine::Ptrace(rounds) => {
                if rounds.wait(wait) {
                    rounds.round(
                        order,
                        processes,
                        readers,
                        stats,
                        python_frames,
                        &mut on_sample,
                    )?;
                }
            }
        }
        Ok(self.maintain())
    }

    /// Samples for `window` and reports every thread of every followed process with a
    /// thread reader, in process then thread order, with the context of its last sample:
    /// with ptrace, one read of every thread (`window` is not waited for); with eBPF,
    /// the threads that ran during the window.
    pub fn snapshot(&mut self, window: Duration) -> Result<Vec<(u32, ThreadReport)>, SamplerError> {
        let mut reports = Vec::new();
        if self.method() == Method::Ebpf {
            let mut last = std::collections::BTreeMap::new();
            let end = Instant::now() + window;
            loop {
                let left = end.saturating_duration_since(Instant::now());
                self.step(left.min(Duration::from_millis(50)), |s| {
                    if let Ok(context) = &s.context {
                        let context = context.as_ref().map(ThreadContextRef::to_owned_context);
                        last.insert((s.pid, s.tid), (s.thread_name.to_owned(), context));
                    }
                    false
                })?;
                if left.is_zero() {
                    break;
                }
            }
            for ((pid, tid), (name, context)) in last {
                // Gone since its sample: left out, as a ptrace read leaves it out.
                if otel_ctx_reader::procfs::task_stat(pid, tid).is_some()
                    && self.readers.contains_key(&pid)
                {
                    let context = Ok(context);
                    reports.push((pid, ThreadReport::new(tid, name, context)));
                }
            }
        } else {
            let mut pids: Vec<u32> = self.readers.keys().copied().collect();
            pids.sort_unstable();
            for pid in pids {
                if let Some(reader) = self.readers.get_mut(&pid) {
                    reports.extend(reader.read_all()?.into_iter().map(|r| (pid, r)));
                }
            }
        }
        Ok(reports)
    }

    /// The refresh policy, and the exit check.
    fn maintain(&mut self) -> Step {
        let mut step = Step::default();
        for (&pid, process) in &mut self.processes {
            let Some(maps) = process.refresh(pid, &mut self.readers, &self.options) else {
                continue;
            };
            #[cfg(feature = "ebpf")]
            if let Engine::Ebpf(sampler) = &mut self.engine {
                // A failure leaves the old location: its samples show as unreadable.
                if let Some(reader) = self.readers.get(&pid) {
                    let _ = sampler.set_process_resolution(pid, reader.resolution());
                }
            }
            if process.gained_contexts {
                process.gained_contexts = false;
                step.gained_contexts.push(pid);
            }
            step.maps.push(maps);
        }
        if self.exits_checked.elapsed() >= EXIT_CHECK {
            self.exits_checked = Instant::now();
            let exited: Vec<u32> = self
                .processes
                .iter()
                .filter(|(&pid, p)| p.has_exited(pid))
                .map(|(&pid, _)| pid)
                .collect();
            for pid in exited {
                self.remove_process(pid);
                step.exited.push(pid);
            }
        }
        step
    }
}

/// Counts a sample and hands it to the caller; whether the process may have changed
/// (the caller said so, or the slot could not be computed).
fn deliver<F>(stats: &mut SamplerStats, sample: &Sample<'_>, on_sample: &mut F) -> bool
where
    F: FnMut(&Sample<'_>) -> bool,
{
    stats.samples += 1;
    let mut suspect = false;
    match &sample.context {
        Ok(Some(_)) => stats.with_context += 1,
        Ok(None) => {}
        Err(e) => {
            suspect = matches!(e, SampleError::Tls(_));
            match stats.unreadable.iter_mut().find(|u| u.kind == e.kind()) {
                Some(u) => u.samples += 1,
                None => stats.unreadable.push(Unreadable {
                    kind: e.kind(),
                    samples: 1,
                    message: e.to_string(),
                }),
            }
        }
    }
    on_sample(sample) | suspect
}

/// The eBPF sampler the options ask for.
#[cfg(feature = "ebpf")]
fn ebpf_sampler(options: &SamplerOptions) -> Result<crate::ebpf::EbpfSampler, SamplerError> {
    let ebpf = crate::ebpf::EbpfOptions::default()
        .with_frequency_hz(u64::from(options.frequency_hz))
        .with_stack_size(options.stack_size)
        .with_max_record_size(options.thread_reader.max_record_size)
        .with_max_processes(options.max_processes);
    Ok(crate::ebpf::EbpfSampler::new(ebpf)?)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use otel_ctx_reader::thread::tls::PtraceError;

    #[test]
    fn every_error_says_its_source() {
        let io = || std::io::Error::from_raw_os_error(libc::EIO);
        let e = SamplerError::Thread(ThreadError::Process(Error::Io {
            pid: 7,
            operation: "read".into(),
            source: io(),
        }));
        // Transparent: the thread error's own message, and its chain down to the kernel's.
        assert!(e.to_string().contains("read of process 7 failed"), "{e}");
        let process = e.source().expect("the reader's error");
        assert!(process.to_string().contains("process 7"), "{process}");
        let kernel = process.source().expect("the kernel's error");
        assert_eq!(kernel.to_string(), io().to_string());
        let sample = SampleError::Ptrace(PtraceError::Os {
            request: "PTRACE_INTERRUPT",
            source: io(),
        });
        let ptrace = sample.source().expect("the ptrace error");
        assert!(ptrace.source().is_some(), "{ptrace}");
        assert!(SamplerError::NoEbpf.source().is_none());
    }
}
