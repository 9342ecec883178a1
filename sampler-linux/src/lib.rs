//! One sampler of threads, whichever way it samples: ptrace rounds at a rate, or the
//! eBPF program at CPU-clock ticks (feature `ebpf`). It follows one process or many, owns
//! their thread readers, keeps them current (one refresh policy), and hands every sample
//! over in one shape: the process, the thread and its name, the user registers and a
//! copy of the top of its stack, and its thread context named with its process's key
//! map.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use otel_ctx_sampler::{Sampler, SamplerOptions};
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
mod error;
pub mod list;
mod options;
mod process;
mod ptrace;
pub mod python;
mod sample;
pub mod stack;
mod stats;
mod syscalls;
mod tally;
pub mod tasks;
pub mod watch;

use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

use crate::python::{PythonProcess, PythonStack};
use otel_ctx_reader::maps::ProcessMaps;
use otel_ctx_reader::thread::{ThreadContextRef, ThreadReader, ThreadReport};
#[cfg(feature = "ebpf")]
use otel_ctx_reader::UserRegisters;

pub use error::SamplerError;
pub use options::{
    Method, OffCpu, SamplerOptions, Threads, DEFAULT_OFF_CPU_MAX_RATE, DEFAULT_OFF_CPU_THRESHOLD,
    MAX_FREQUENCY_HZ, MAX_PROCESSES,
};
pub use process::{Following, PreparedProcess, MODULES_FALLBACK, REFRESH_INTERVAL};
pub use sample::{PythonSample, Sample};
pub use stack::StackBuffer;
pub use stats::{SamplerStats, Unreadable};
pub use syscalls::syscall_name;
pub use tally::{AttributeTally, Bucket, NO_CONTEXT, UNREADABLE};

use process::Process;
use stats::deliver;

/// How often the followed processes are checked for having exited.
const EXIT_CHECK: Duration = Duration::from_secs(1);

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

/// Where the samples come from.
enum Engine {
    #[cfg(feature = "ebpf")]
    Ebpf(Box<crate::ebpf::EbpfSampler>),
    Ptrace(Box<ptrace::Rounds>),
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
        let ptrace = || Engine::Ptrace(Box::new(ptrace::Rounds::new(options)));
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

    /// Stops sampling for good and gives back what only sampling needs (the eBPF
    /// sampler's ring buffer): call it once every sample wanted has been read
    /// ([`stop`](Self::stop), then a last [`step`](Self::step)).
    pub fn close(&mut self) {
        #[cfg(feature = "ebpf")]
        if let Engine::Ebpf(sampler) = &mut self.engine {
            sampler.close();
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
            stats.waits = counters.switches;
            stats.off_cpu_samples = counters.off_cpu_samples;
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
                sampler.pace_off_cpu();
                while let Some(s) = sampler.next_sample(readers) {
                    let Some(process) = processes.get_mut(&s.pid) else {
                        continue;
                    };
                    let taken = !s.stack.is_empty() || s.registers != UserRegisters::default();
                    let walked;
                    let python_thread_name = process.python.as_ref().and_then(|interpreter| {
                        interpreter.thread_name(&mut process.python_names, s.tid)
                    });
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
                            python_thread_name,
                            registers: taken.then_some(s.registers),
                            stack: s.stack,
                            context: match &s.context {
                                Ok(context) => Ok(context.clone()),
                                Err(e) => Err(e),
                            },
                            python,
                            weight_ns: 0,
                            // Weighted by the program for the calls not followed.
                            off_cpu_ns: s.off_cpu_ns,
                            syscall: s.syscall,
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

/// The eBPF sampler the options ask for.
#[cfg(feature = "ebpf")]
fn ebpf_sampler(options: &SamplerOptions) -> Result<crate::ebpf::EbpfSampler, SamplerError> {
    let ebpf = crate::ebpf::EbpfOptions::default()
        .with_frequency_hz(u64::from(options.frequency_hz))
        .with_stack_size(options.stack_size)
        .with_max_record_size(options.thread_reader.max_record_size)
        .with_max_processes(options.max_processes)
        .with_ring_seconds(options.ring_seconds)
        .with_off_cpu(options.off_cpu);
    Ok(crate::ebpf::EbpfSampler::new(ebpf)?)
}
