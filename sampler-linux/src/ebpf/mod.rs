//! The eBPF thread-context sampler (feature `ebpf`): reads every thread's context at
//! sample time without stopping it.
//!
//! A CPU-clock perf event ticks at N Hz on every CPU; on each tick a BPF program
//! (`bpf/sampler.bpf.c`; its objects for x86_64 and aarch64 are checked in beside it, built
//! by `scripts/build-bpf.sh`, so no C compiler is needed) checks whether the interrupted
//! task belongs to one of the followed processes (a hash map by process id, at most
//! [`EBPF_MAX_PROCESSES`]: one program and one perf event per CPU serve them all),
//! reads its thread pointer from the kernel's task structure (BTF / CO-RE:
//! `thread.fsbase` on x86_64, `thread.uw.tp_value` on aarch64), finds the
//! `otel_thread_ctx_v1` slot with the parameters computed here from that process's
//! [`ThreadReader`]'s [`Resolution`] (an offset from the thread pointer, or the glibc or
//! musl DTV walk with the same bounds checks as [`Resolution::slot_address`]), and copies
//! the record (28-byte header and attrs-data, at most [`EBPF_MAX_RECORD_SIZE`] bytes) into
//! a ring buffer with the process and thread ids. User space decodes the samples into
//! the reader's own types and names the attributes with the key map of the sample's
//! process ([`ThreadReader::name_record`], the reader found by [`EbpfReaders`]), as the
//! ptrace path does.
//!
//! A thread is sampled only while it runs on a CPU: a thread blocked for the whole
//! interval yields no sample, which is what a CPU profiler wants. The program is loaded
//! and attached with aya; the loader needs root (or `CAP_BPF` with `CAP_PERFMON`) and a
//! kernel that exposes BTF in `/sys/kernel/btf/vmlinux` and has `bpf_loop` (Linux 5.17),
//! whose steps walk a Python process's frames
//! ([`EbpfSampler::set_process_python`]).

mod error;
mod maps;
mod off_cpu;
mod publications;
mod python;
mod targets;
mod wire;

use std::fmt;
use std::io;
use std::path::Path;
use std::time::Duration;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::PerfEvent;
use aya::{Ebpf, EbpfLoader};

use otel_ctx_reader::thread::tls::{Resolution, SampleError, SlotContents};
use otel_ctx_reader::thread::{ThreadContextRef, ThreadReader};
use otel_ctx_reader::UserRegisters;

use crate::python::PythonProcess;
use crate::OffCpu;

use error::{explain, is_permission, load_error, BTF_PATH};
use maps::{counter, poll_readable};
use targets::Targets;

pub use error::EbpfError;
pub use publications::{PublicationCounters, PublicationHook};
pub use python::EbpfPython;
pub use python::EBPF_MAX_PYTHON_THREADS;
pub use targets::EbpfReaders;
pub use wire::{
    EBPF_MAX_ATTRS, EBPF_MAX_KERNEL_FRAMES, EBPF_MAX_PROCESSES, EBPF_MAX_PYTHON_FRAMES,
    EBPF_MAX_RECORD_SIZE, EBPF_MAX_STACK,
};

/// The BPF object built from `bpf/sampler.bpf.c` for this architecture: the one checked in
/// beside it, which `build.rs` copies (or compiles again with `$OTEL_CTX_BPF_CLANG`).
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sampler.bpf.o"));
const PROGRAM_NAME: &str = "sample_thread_context";

/// How an [`EbpfSampler`] samples. Start from `EbpfOptions::default()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EbpfOptions {
    /// Ticks per second on each CPU. Default 99.
    pub frequency_hz: u64,
    /// Largest record copied, at most [`EBPF_MAX_RECORD_SIZE`] (the default); larger
    /// records are reported as [`SampleError::RecordTooLarge`].
    pub max_record_size: usize,
    /// Bytes of each sampled thread's user stack to copy from its stack pointer up, with
    /// its user registers ([`EbpfSample::registers`], [`EbpfSample::stack`]): what a
    /// profiler unwinds. At most [`EBPF_MAX_STACK`]; default 0 (contexts only).
    pub stack_size: usize,
    /// Whether to take the kernel stack too ([`EbpfSample::kernel_frames`], at most
    /// [`EBPF_MAX_KERNEL_FRAMES`]). Default `false`.
    pub kernel_stack: bool,
    /// The most processes the sampler follows at once ([`EbpfSampler::add_process`]),
    /// from 1 to [`EBPF_MAX_PROCESSES`] (the default).
    pub max_processes: usize,
    /// The most memory the ring buffer between the program and user space may take
    /// (default [`DEFAULT_MAX_RING_BYTES`]): it holds
    /// [`ring_seconds`](Self::ring_seconds) of samples at the rate on every CPU, unless
    /// that is more than this.
    pub max_ring_bytes: usize,
    /// How long the consumer may be held up before samples are lost: the ring holds at
    /// least this many seconds of samples, within
    /// [`max_ring_bytes`](Self::max_ring_bytes). Default [`RING_SECONDS`]; at least 1.
    pub ring_seconds: u32,
    /// Off-CPU samples too ([`EbpfSample::off_cpu_ns`]): the program's halves at the
    /// scheduler's switch and at the return of system calls note when a thread of a
    /// followed process leaves its CPU inside a system call, add up the time it is
    /// away, and sample it as the call returns when that is at least
    /// [`OffCpu::threshold`], following one call in [`OffCpu::one_in`]. Default
    /// `None`: ticks only.
    pub off_cpu: Option<OffCpu>,
}

/// [`EbpfOptions::ring_seconds`] by default: how many seconds of samples the ring
/// buffer holds at least (its size is a power of
/// two), within [`EbpfOptions::max_ring_bytes`]: how long the consumer may be held up
/// before samples are lost. Between two reads the consumer decodes and unwinds, reads
/// a new module's headers, or makes a profile that parses only the DWARF units its new
/// frames fall in: a second is ample. The kernel maps the ring twice into the reader,
/// and each second at 99 Hz on 2 CPUs is 7.4 MiB of its memory.
pub const RING_SECONDS: u32 = 1;

/// [`EbpfOptions::max_ring_bytes`] by default: 1 s of 16 KiB stacks at 99 Hz on up to 38
/// CPUs (half a second on 76).
pub const DEFAULT_MAX_RING_BYTES: usize = 64 << 20;

/// The smallest ring buffer.
const MIN_RING_BYTES: usize = 1 << 20;

/// The largest power of two at most `n` (`n` at least 1).
const fn prev_power_of_two(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            frequency_hz: 99,
            max_record_size: EBPF_MAX_RECORD_SIZE,
            stack_size: 0,
            kernel_stack: false,
            max_processes: EBPF_MAX_PROCESSES,
            max_ring_bytes: DEFAULT_MAX_RING_BYTES,
            ring_seconds: RING_SECONDS,
            off_cpu: None,
        }
    }
}

impl EbpfOptions {
    /// Sets [`frequency_hz`](Self::frequency_hz).
    #[must_use]
    pub const fn with_frequency_hz(mut self, hz: u64) -> Self {
        self.frequency_hz = hz;
        self
    }

    /// Sets [`max_record_size`](Self::max_record_size).
    #[must_use]
    pub const fn with_max_record_size(mut self, max: usize) -> Self {
        self.max_record_size = max;
        self
    }

    /// Sets [`stack_size`](Self::stack_size) (cut to [`EBPF_MAX_STACK`]).
    #[must_use]
    pub const fn with_stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = if bytes > EBPF_MAX_STACK {
            EBPF_MAX_STACK
        } else {
            bytes
        };
        self
    }

    /// Sets [`kernel_stack`](Self::kernel_stack).
    #[must_use]
    pub const fn with_kernel_stack(mut self, kernel_stack: bool) -> Self {
        self.kernel_stack = kernel_stack;
        self
    }

    /// Sets [`max_processes`](Self::max_processes) (kept from 1 to
    /// [`EBPF_MAX_PROCESSES`]).
    #[must_use]
    pub const fn with_max_processes(mut self, max: usize) -> Self {
        self.max_processes = if max == 0 {
            1
        } else if max > EBPF_MAX_PROCESSES {
            EBPF_MAX_PROCESSES
        } else {
            max
        };
        self
    }

    /// Sets [`ring_seconds`](Self::ring_seconds) (at least 1).
    #[must_use]
    pub const fn with_ring_seconds(mut self, seconds: u32) -> Self {
        self.ring_seconds = if seconds == 0 { 1 } else { seconds };
        self
    }

    /// Sets [`off_cpu`](Self::off_cpu).
    #[must_use]
    pub const fn with_off_cpu(mut self, off_cpu: Option<OffCpu>) -> Self {
        self.off_cpu = off_cpu;
        self
    }

    /// Sets [`max_ring_bytes`](Self::max_ring_bytes) (at least 1 MiB).
    #[must_use]
    pub const fn with_max_ring_bytes(mut self, bytes: usize) -> Self {
        self.max_ring_bytes = if bytes < MIN_RING_BYTES {
            MIN_RING_BYTES
        } else {
            bytes
        };
        self
    }

    /// The ring buffer's size: room for [`ring_seconds`](Self::ring_seconds) of samples from `cpus` CPUs at
    /// [`frequency_hz`](Self::frequency_hz) (and off-CPU samples at their
    /// [`OffCpu::max_rate`]), at least 64 samples, with the stack this
    /// sampler copies, so that a consumer held up for a few seconds loses nothing; a
    /// power of two (the kernel requires one) from 1 MiB to
    /// [`max_ring_bytes`](Self::max_ring_bytes) (rounded down to a power of two). The
    /// kernel allocates and pins all of it, and it counts in the reader's memory, so it
    /// follows the rate rather than the worst case; what the bound leaves out is counted
    /// in [`EbpfCounters::lost`].
    fn ring_size(&self, cpus: usize) -> u32 {
        let sample = wire::SAMPLE_SIZE + self.stack_size;
        // Off-CPU samples come on top of the ticks', at most at their bound (an
        // unbounded rate is given room for 10,000 a second).
        let off_cpu = self.off_cpu.map_or(0, |o| match o.max_rate {
            0 => 10_000,
            rate => rate as usize,
        });
        let per_window = usize::try_from(self.frequency_hz)
            .unwrap_or(usize::MAX)
            .saturating_mul(cpus.max(1))
            .saturating_add(off_cpu)
            .saturating_mul(self.ring_seconds.max(1) as usize);
        // The largest power of two within the bound (and within u32).
        let ceiling = prev_power_of_two(self.max_ring_bytes.clamp(MIN_RING_BYTES, 1 << 31));
        let wanted = sample
            .saturating_mul(per_window.max(64))
            .clamp(MIN_RING_BYTES, ceiling);
        wanted.next_power_of_two().min(ceiling) as u32
    }
}

/// Counts kept by the program, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EbpfCounters {
    /// Ticks that interrupted a thread of a followed process.
    pub ticks: u64,
    /// Samples lost because the ring buffer was full (user space read too slowly).
    pub lost: u64,
    /// System calls of a followed process's threads that left their CPU, followed
    /// ([`EbpfOptions::off_cpu`]).
    pub switches: u64,
    /// Off-CPU samples taken: the followed calls whose thread was away at least the
    /// threshold.
    pub off_cpu_samples: u64,
}

/// One sample of a thread as the BPF program took it at a tick, named with the reader of
/// its process ([`EbpfSampler::next_sample`]): borrowed until the next call.
#[derive(Debug)]
#[non_exhaustive]
pub struct EbpfSample<'a> {
    /// The interrupted thread's process (its thread group id).
    pub pid: u32,
    /// The interrupted thread.
    pub tid: u32,
    /// Its thread pointer.
    pub thread_pointer: u64,
    /// The slot's address (`None` when the thread has no TLS block for the module, the
    /// walk to the slot failed, or the process is followed for its stacks only).
    pub slot: Option<u64>,
    /// Its context, named as [`ThreadReader::sample_into`] names one (`Ok(None)`: no
    /// context), or why the program could not read it.
    pub context: Result<Option<ThreadContextRef<'a>>, SampleError>,
    /// The user registers when the tick came (all 0 unless the sampler copies stacks,
    /// [`EbpfOptions::stack_size`]).
    pub registers: UserRegisters,
    /// The top of the user stack, from `registers.sp` up (empty unless the sampler
    /// copies stacks; shorter than asked where the stack's mapping ends).
    pub stack: &'a [u8],
    /// The kernel stack's return addresses, innermost first, as native-endian `u64`s
    /// (empty unless [`EbpfOptions::kernel_stack`]); [`EbpfSample::kernel_frame`] reads
    /// one.
    pub kernel_frames: &'a [u8],
    /// Its Python frames, when the process's are walked
    /// ([`EbpfSampler::set_process_python`]).
    pub python: EbpfPython<'a>,
    /// An off-CPU sample ([`EbpfOptions::off_cpu`]), taken as the system call that kept
    /// the thread from a CPU returned: how long it was away, in nanoseconds (its
    /// registers and stack are where it blocked), times the calls it stands for (one in
    /// how many was followed). 0 for a tick's sample.
    pub off_cpu_ns: u64,
    /// An off-CPU sample: the number of the system call that kept the thread away
    /// ([`syscall_name`](crate::syscall_name) names it).
    pub syscall: Option<u16>,
}

impl EbpfSample<'_> {
    /// The number of kernel frames.
    pub fn kernel_frame_count(&self) -> usize {
        self.kernel_frames.len() / 8
    }

    /// Kernel frame `n` (0 is innermost).
    pub fn kernel_frame(&self, n: usize) -> Option<u64> {
        (n < self.kernel_frame_count()).then(|| wire::word(self.kernel_frames, n))
    }
}

/// The eBPF sampler of one process or of many: one program and one CPU-clock perf event
/// per CPU, whatever the number of processes. Dropping it detaches the program from
/// every CPU.
pub struct EbpfSampler {
    /// The program and its perf-event links: dropping it detaches them.
    ebpf: Ebpf,
    config: Array<MapData, [u64; wire::CONFIG_WORDS]>,
    targets_map: BpfHashMap<MapData, u32, [u64; wire::TARGET_WORDS]>,
    counters: PerCpuArray<MapData, u64>,
    /// `None` once [`close`](Self::close)d.
    ring: Option<RingBuf<MapData>>,
    targets: Targets,
    max_record_size: usize,
    capture: wire::Capture,
    /// The entry being handed out, copied out of the ring buffer.
    entry: Vec<u8>,
    /// With off-CPU samples: their pace.
    pace: Option<off_cpu::Pace>,
}

impl fmt::Debug for EbpfSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EbpfSampler")
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}

/// The program's per-CPU counters (`COUNT_*`): ticks of a followed thread, samples lost
/// to a full ring, followed system calls that left their CPU, off-CPU samples taken.
const COUNT_TICKS: u32 = 0;
const COUNT_LOST: u32 = 1;
const COUNT_SWITCHES: u32 = 2;
const COUNT_OFF_CPU: u32 = 3;

/// How many times a program load the kernel answers with `EAGAIN` is tried.
const LOAD_ATTEMPTS: usize = 4;

impl EbpfSampler {
    /// Loads the program and attaches it to a CPU-clock perf event on every online CPU,
    /// with no process to sample yet ([`add_process`](Self::add_process) adds them). The
    /// ring buffer is sized for the frequency on every CPU
    /// ([`EbpfOptions::frequency_hz`]), whatever the number of processes.
    pub fn new(options: EbpfOptions) -> Result<Self, EbpfError> {
        if options.frequency_hz == 0 {
            return Err(EbpfError::Frequency);
        }
        if !Path::new(BTF_PATH).exists() {
            return Err(EbpfError::NoBtf);
        }
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| {
            EbpfError::Setup(format!("cannot count the possible CPUs ({what}): {e}"))
        })?;
        let ring_size = options.ring_size(cpus);
        let max_processes = options.max_processes.clamp(1, EBPF_MAX_PROCESSES);
        let mut ebpf = EbpfLoader::new()
            // The off-CPU waits' task storage, which only the program uses (aya has no
            // wrapper for it in user space).
            .allow_unsupported_maps()
            .map_max_entries("scratch", u32::try_from(cpus).unwrap_or(u32::MAX))
            // The off-CPU samples' own buffers: one per CPU when they are taken.
            .map_max_entries(
                "off_cpu_scratch",
                match options.off_cpu {
                    Some(_) => u32::try_from(cpus).unwrap_or(u32::MAX),
                    None => 1,
                },
            )
            .map_max_entries("samples", ring_size)
            .map_max_entries("targets", max_processes as u32)
            .load(PROGRAM)
            .map_err(|e| load_error("load the BPF object", &e))?;
        let map = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| EbpfError::Setup(format!("the program has no map {name:?}")))
        };
        let setup = |e: aya::maps::MapError| EbpfError::Setup(explain(&e).0);
        let config = Array::try_from(map(&mut ebpf, "config")?).map_err(setup)?;
        let targets_map = BpfHashMap::try_from(map(&mut ebpf, "targets")?).map_err(setup)?;
        let counters = PerCpuArray::try_from(map(&mut ebpf, "counters")?).map_err(setup)?;
        let ring = RingBuf::try_from(map(&mut ebpf, "samples")?).map_err(setup)?;
        let pace = options.off_cpu.map(|o| off_cpu::Pace::new(o.max_rate));
        let mut sampler = Self {
            ebpf,
            config,
            targets_map,
            counters,
            ring: Some(ring),
            targets: Targets::new(max_processes),
            max_record_size: options.max_record_size.min(EBPF_MAX_RECORD_SIZE),
            capture: wire::Capture {
                stack_size: options.stack_size.min(EBPF_MAX_STACK),
                kernel_stack: options.kernel_stack,
                // A quarter of the ring.
                wakeup_bytes: u64::from(ring_size / 4),
                off_cpu_threshold_ns: options.off_cpu.map_or(0, |o| {
                    u64::try_from(o.threshold.as_nanos()).map_or(u64::MAX, |ns| ns.max(1))
                }),
                off_cpu_one_in: options.off_cpu.map_or(1, |o| o.one_in),
                off_cpu_period_ns: pace.map_or(0, |p| p.period_ns),
            },
            entry: Vec::with_capacity(wire::SAMPLE_SIZE + options.stack_size),
            pace,
        };
        // Configured before the first tick can run it.
        let words = wire::config_words(sampler.capture);
        sampler
            .config
            .set(0, words, 0)
            .map_err(|e| EbpfError::Setup(explain(&e).0))?;

        let program: &mut PerfEvent = sampler
            .ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| EbpfError::Setup(format!("the object has no program {PROGRAM_NAME}")))?
            .try_into()
            .map_err(|e| EbpfError::Setup(explain(&e).0))?;
        load_program(program)?;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| {
            EbpfError::Setup(format!("cannot list the online CPUs ({what}): {e}"))
        })?;
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(options.frequency_hz),
                    false,
                )
                .map_err(|e| {
                    let (message, os) = explain(&e);
                    match os {
                        Some(os) if is_permission(os) => EbpfError::Permission {
                            what: format!("open a CPU-clock perf event on CPU {cpu}"),
                            source: io::Error::from_raw_os_error(
                                os.raw_os_error().unwrap_or(libc::EPERM),
                            ),
                        },
                        _ => EbpfError::Attach { cpu, message },
                    }
                })?;
        }
        if options.off_cpu.is_some() {
            off_cpu::attach(&mut sampler.ebpf)?;
        }
        Ok(sampler)
    }

    /// Samples `reader`'s process too, finding its threads' slot with `reader`'s
    /// [`Resolution`]. Adding a process the sampler follows already replaces its
    /// resolution (its samples taken before are dropped). Fails with
    /// [`EbpfError::TooManyProcesses`] when the sampler follows as many processes as it
    /// has room for ([`EbpfOptions::max_processes`]).
    pub fn add_process(&mut self, reader: &ThreadReader) -> Result<(), EbpfError> {
        let pid = reader.pid();
        if !self.targets.has_room_for(pid) {
            return Err(EbpfError::TooManyProcesses {
                max: self.targets.max(),
            });
        }
        self.write_target(pid, Some(reader.resolution().clone()))
    }

    /// Samples process `pid`'s stacks only, with no thread context to read: for a
    /// process that publishes a process context but exports no `otel_thread_ctx_v1`
    /// (no [`ThreadReader`] can be opened for it), profiled with its registers and stack
    /// alone. Its samples come out of [`next_sample`](Self::next_sample) with
    /// no context (`Ok(None)`), whether or not the readers have one for it. Replaces the
    /// entry of a process the sampler follows already;
    /// [`set_process_resolution`](Self::set_process_resolution) later gives it a slot.
    /// Fails with [`EbpfError::TooManyProcesses`] as
    /// [`add_process`](Self::add_process) does.
    pub fn add_process_stacks(&mut self, pid: u32) -> Result<(), EbpfError> {
        if !self.targets.has_room_for(pid) {
            return Err(EbpfError::TooManyProcesses {
                max: self.targets.max(),
            });
        }
        self.write_target(pid, None)
    }

    /// Stops sampling process `pid`; its samples still in the ring are dropped. Whether
    /// the sampler followed it.
    pub fn remove_process(&mut self, pid: u32) -> bool {
        if !self.targets.remove(pid) {
            return false;
        }
        // Should the kernel refuse, the program goes on sampling the process, and its
        // samples are dropped here as those of a process not followed.
        let _ = self.targets_map.remove(&pid);
        python::forget(&mut self.ebpf, pid);
        true
    }

    /// Points the program at a new slot location for process `pid` (after
    /// [`ThreadReader::refresh_modules`] found its modules changed). Its samples taken
    /// with the old one are dropped.
    pub fn set_process_resolution(
        &mut self,
        pid: u32,
        resolution: &Resolution,
    ) -> Result<(), EbpfError> {
        match self.targets.get(pid) {
            None => Err(EbpfError::UnknownProcess { pid }),
            Some(target) if target.resolution.as_ref() == Some(resolution) => Ok(()),
            Some(_) => self.write_target(pid, Some(resolution.clone())),
        }
    }

    /// Walks the Python frames of process `pid` (followed already, with a slot or for
    /// its stacks only) at every tick, with `python`'s offsets: its samples then carry
    /// them ([`EbpfSample::python`]).
    pub fn set_process_python(
        &mut self,
        pid: u32,
        python: &PythonProcess,
    ) -> Result<(), EbpfError> {
        if !self.follows(pid) {
            return Err(EbpfError::UnknownProcess { pid });
        }
        python::set_target(&mut self.ebpf, pid, python)
    }

    /// Writes process `pid`'s entry of the program's `targets` map, with a new
    /// generation, and records it (no resolution: its stacks only).
    fn write_target(&mut self, pid: u32, resolution: Option<Resolution>) -> Result<(), EbpfError> {
        let generation = self.targets.next_generation();
        let words = wire::target_words(resolution.as_ref(), generation, self.max_record_size);
        self.targets_map
            .insert(pid, words, 0)
            .map_err(|e| EbpfError::Setup(explain(&e).0))?;
        self.targets.insert(pid, resolution);
        Ok(())
    }

    /// The processes sampled, in the order they were added.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.targets.pids()
    }

    /// The resolution the program uses for process `pid`, if it follows it with one
    /// (`None` too for a process followed for its stacks only,
    /// [`add_process_stacks`](Self::add_process_stacks)).
    pub fn process_resolution(&self, pid: u32) -> Option<&Resolution> {
        self.targets.get(pid).and_then(|t| t.resolution.as_ref())
    }

    /// Whether the sampler follows process `pid` (with a slot, or for its stacks only).
    pub fn follows(&self, pid: u32) -> bool {
        self.targets.get(pid).is_some()
    }

    /// The largest record copied.
    pub const fn max_record_size(&self) -> usize {
        self.max_record_size
    }

    /// Waits up to `timeout` for samples; returns whether the program woke it. To spare
    /// an interrupt per sample, the program wakes the waiter only once a quarter of its
    /// ring is used (1 MiB without stacks: about 375 samples): read the samples with
    /// [`next_sample`](Self::next_sample) after every wait, whatever it returns, and
    /// keep `timeout` short (100 ms) for a live view.
    pub fn wait(&self, timeout: Duration) -> Result<bool, EbpfError> {
        match &self.ring {
            Some(ring) => poll_readable(ring, timeout),
            None => {
                // Closed: nothing will come.
                std::thread::sleep(timeout);
                Ok(false)
            }
        }
    }

    /// Copies the next entry out of the ring
    /// and decodes it; entries of a process no longer followed, or computed with an
    /// earlier entry of its process, are skipped, and so are those the program took
    /// without a slot to look for unless the process is followed for its stacks only.
    fn next_decoded(&mut self) -> Option<wire::Decoded> {
        loop {
            {
                let item = self.ring.as_mut()?.next()?;
                self.entry.clear();
                self.entry.extend_from_slice(&item);
                // `item` is dropped here: its space in the ring is released.
            }
            let Some(decoded) = wire::decode(&self.entry, self.max_record_size) else {
                continue;
            };
            match self.targets.get(decoded.pid) {
                Some(target)
                    if target.generation == decoded.generation
                        && (decoded.configured || target.resolution.is_none()) =>
                {
                    return Some(decoded)
                }
                _ => {}
            }
        }
    }

    /// The next sample, if one is ready, of any process the sampler follows, named with
    /// the reader of its process in `readers` (one [`ThreadReader`] for a sampler of one
    /// process, or any [`EbpfReaders`], such as a map of readers by process id, for
    /// many). Allocation-free; borrowed until the next call.
    ///
    /// Skipped: samples computed with an earlier resolution of their process, or of a
    /// process removed since, and those of a process without a reader in `readers`,
    /// except the samples of a process followed for its stacks only
    /// ([`add_process_stacks`](Self::add_process_stacks)), which have no context.
    pub fn next_sample<'a, R: EbpfReaders + ?Sized>(
        &'a mut self,
        readers: &'a mut R,
    ) -> Option<EbpfSample<'a>> {
        let decoded = loop {
            let decoded = self.next_decoded()?;
            if !decoded.configured || readers.reader_mut(decoded.pid).is_some() {
                break decoded;
            }
        };
        let entry = &self.entry;
        let context = match decoded.contents {
            Ok(SlotContents::Record { address, header }) => {
                let reader = readers.reader_mut(decoded.pid)?;
                Ok(Some(reader.name_record(
                    header,
                    address,
                    &entry[decoded.attrs],
                )))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        Some(EbpfSample {
            pid: decoded.pid,
            tid: decoded.tid,
            thread_pointer: decoded.thread_pointer,
            slot: decoded.slot,
            context,
            registers: decoded.registers,
            stack: &entry[decoded.stack],
            kernel_frames: &entry[decoded.kernel_frames],
            python: EbpfPython::new(
                decoded.python.0,
                decoded.python.1,
                &entry[decoded.python.2.clone()],
            ),
            off_cpu_ns: decoded.off_cpu_ns,
            syscall: decoded.syscall,
        })
    }

    /// How often the kernel ran the program (on every tick of every CPU, a target's or
    /// not) and its total run time. Both stay 0 unless the kernel's statistics are on
    /// (`sysctl kernel.bpf_stats_enabled=1`).
    pub fn run_time(&self) -> Result<(u64, Duration), EbpfError> {
        let program = self
            .ebpf
            .program(PROGRAM_NAME)
            .ok_or_else(|| EbpfError::Setup(format!("the object has no program {PROGRAM_NAME}")))?;
        let info = program
            .info()
            .map_err(|e| EbpfError::Setup(explain(&e).0))?;
        Ok((info.run_count(), info.run_time()))
    }

    /// With off-CPU samples ([`EbpfOptions::off_cpu`]): keeps them within
    /// [`OffCpu::max_rate`], sampling the waits shorter than a longer (or shorter) period
    /// by time from now on, when their pace was last looked at a quarter of a second ago
    /// or more. Each sample stands for the time it was taken for
    /// ([`EbpfSample::off_cpu_ns`] is weighted). Call it after each
    /// [`wait`](Self::wait).
    pub fn pace_off_cpu(&mut self) {
        let Some(pace) = self.pace.as_mut() else {
            return;
        };
        let elapsed = pace.at.elapsed();
        if elapsed < off_cpu::PACE_EVERY {
            return;
        }
        let Ok(taken) = counter(&self.counters, COUNT_OFF_CPU) else {
            return;
        };
        let rate = taken.saturating_sub(pace.taken) as f64 / elapsed.as_secs_f64();
        pace.at = std::time::Instant::now();
        pace.taken = taken;
        let period = pace.next(rate);
        if period != pace.period_ns {
            pace.period_ns = period;
            self.capture.off_cpu_period_ns = period;
            // A failure keeps the pace before: the samples stay weighted right.
            let _ = self.config.set(0, wire::config_words(self.capture), 0);
        }
    }

    /// The program's counts, summed over CPUs.
    pub fn counters(&self) -> Result<EbpfCounters, EbpfError> {
        Ok(EbpfCounters {
            ticks: counter(&self.counters, COUNT_TICKS)?,
            lost: counter(&self.counters, COUNT_LOST)?,
            switches: counter(&self.counters, COUNT_SWITCHES)?,
            off_cpu_samples: counter(&self.counters, COUNT_OFF_CPU)?,
        })
    }
}

/// Loads the program into the kernel, again when the kernel answers `EAGAIN` (the
/// verifier can give up on a busy machine), a few times.
impl EbpfSampler {
    /// Detaches the program from every CPU's perf event (and from the scheduler's
    /// switches): no tick runs it from now on, and what it wrote before stays in the
    /// ring to be read. For a sampler whose
    /// sampling is over while its samples are still being made into a profile (and the
    /// network waited on), so that nothing runs, overflows or is lost meanwhile.
    pub fn stop(&mut self) {
        if let Some(program) = self.ebpf.program_mut(PROGRAM_NAME) {
            if let Ok(program) = <&mut PerfEvent>::try_from(program) {
                // Unloading detaches every link; failing, the links stay until the drop.
                let _ = program.unload();
            }
        }
        off_cpu::detach(&mut self.ebpf);
    }
}

impl EbpfSampler {
    /// Gives the ring buffer back, once [`stop`](Self::stop)ped and its samples read:
    /// what it still holds is dropped, and its memory (mapped twice into this process,
    /// so that a sample never wraps) is unmapped. From then on no sample is read, and a
    /// [`wait`](Self::wait) only waits. For a sampler whose samples are all taken while
    /// the profile is still to be made, so that making it does not cost the ring too.
    pub fn close(&mut self) {
        self.stop();
        self.ring = None;
    }
}

fn load_program(program: &mut PerfEvent) -> Result<(), EbpfError> {
    let mut attempt = 1;
    loop {
        match program.load() {
            Ok(()) => return Ok(()),
            Err(e) => {
                let again = explain(&e).1.and_then(io::Error::raw_os_error) == Some(libc::EAGAIN);
                if !again || attempt == LOAD_ATTEMPTS {
                    return Err(load_error("load the BPF program", &e));
                }
                attempt += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every limit, layout value and code the BPF program and this crate share: the
    /// program's `#define`, the Rust constant it must equal. A change to one side that
    /// the other does not follow fails here.
    #[test]
    fn the_program_and_the_crate_agree() {
        let source = include_str!("../../bpf/sampler.bpf.c");
        let define = |name: &str| -> u64 {
            let line = source
                .lines()
                .find(|l| l.split_whitespace().take(2).eq(["#define", name]))
                .unwrap_or_else(|| panic!("no #define {name} in bpf/sampler.bpf.c"));
            // The value: a number, or a product of numbers in parentheses.
            let value: String = line
                .split_whitespace()
                .skip(2)
                .take_while(|w| !w.starts_with("/*"))
                .collect();
            value
                .trim_matches(|c| c == '(' || c == ')')
                .split('*')
                .map(|n| {
                    n.parse::<u64>()
                        .unwrap_or_else(|_| panic!("{name}: {value}"))
                })
                .product()
        };
        let shared: [(&str, u64); 22] = [
            ("MAX_STACK", crate::stack::MAX_STACK_SIZE as u64),
            ("MAX_PROCESSES", crate::MAX_PROCESSES as u64),
            (
                "HEADER_SIZE",
                otel_ctx_codec::record::RECORD_HEADER_SIZE as u64,
            ),
            ("MAX_ATTRS", EBPF_MAX_ATTRS as u64),
            ("MAX_KSTACK_FRAMES", EBPF_MAX_KERNEL_FRAMES as u64),
            ("MAX_PY_FRAMES", EBPF_MAX_PYTHON_FRAMES as u64),
            ("MAX_PY_THREADS", EBPF_MAX_PYTHON_THREADS as u64),
            ("PY_FRAME_HEADER", python::EBPF_PY_FRAME_HEADER),
            ("PY_CODE_STAMP", python::EBPF_PY_CODE_STAMP),
            ("PY_FLAG_ENTRY", u64::from(crate::python::FLAG_ENTRY)),
            (
                "PY_FLAG_GENERATOR",
                u64::from(crate::python::FLAG_GENERATOR),
            ),
            ("PY_FLAG_SHIM", u64::from(crate::python::FLAG_SHIM)),
            (
                "PY_OWNED_BY_GENERATOR",
                u64::from(crate::python::OWNED_BY_GENERATOR),
            ),
            ("PY_OFF", u64::from(python::PY_OFF)),
            ("PY_OK", u64::from(python::PY_OK)),
            ("PY_NO_THREAD", u64::from(python::PY_NO_THREAD)),
            ("PY_FAULT", u64::from(python::PY_FAULT)),
            ("PY_TRUNCATED", u64::from(python::PY_TRUNCATED)),
            ("COUNT_TICKS", u64::from(COUNT_TICKS)),
            ("COUNT_LOST", u64::from(COUNT_LOST)),
            ("COUNT_SWITCHES", u64::from(COUNT_SWITCHES)),
            ("COUNT_OFF_CPU", u64::from(COUNT_OFF_CPU)),
        ];
        for (name, rust) in shared {
            assert_eq!(
                define(name),
                rust,
                "{name}: bpf/sampler.bpf.c and the crate differ"
            );
        }
        for (name, rust) in wire::MODES {
            assert_eq!(
                define(name),
                rust,
                "{name}: bpf/sampler.bpf.c and the crate differ"
            );
        }
    }

    /// An error with a source, as aya's are.
    #[derive(Debug)]
    struct Outer(io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`bpf_map_create` failed")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Bytes of this process's mappings of BPF maps (only a sampler's ring is mapped,
    /// and no other test of this crate makes a sampler).
    fn mapped_bpf_bytes() -> u64 {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        maps.lines()
            .filter(|l| l.ends_with("anon_inode:bpf-map"))
            .filter_map(|l| otel_ctx_reader::maps::MapsLine::parse(l.as_bytes()))
            .map(|l| l.end - l.start)
            .sum()
    }

    #[test]
    fn closing_gives_the_ring_back() {
        let options = EbpfOptions::default().with_stack_size(16 << 10);
        let mut sampler = EbpfSampler::new(options).expect("an eBPF sampler (root, BTF)");
        let size = u64::from(options.ring_size(aya::util::nr_cpus().expect("CPUs")));
        // The data pages twice, and the pages of the positions.
        assert!(
            mapped_bpf_bytes() >= 2 * size,
            "{} bytes mapped",
            mapped_bpf_bytes()
        );
        sampler.close();
        assert_eq!(mapped_bpf_bytes(), 0, "the ring is unmapped once closed");
        assert!(!sampler.wait(Duration::from_millis(10)).expect("a wait"));
        assert!(sampler.next_decoded().is_none());
    }

    #[test]
    fn the_ring_holds_seconds_within_its_bound() {
        let stacks = EbpfOptions::default().with_stack_size(16 << 10);
        // 99 Hz on 2 CPUs for 1 s: 198 samples of about 19 KiB, 3.7 MiB, rounded up.
        assert_eq!(stacks.ring_size(2), 4 << 20);
        // Held up for 3 s: 594 samples, 11 MiB, rounded up.
        assert_eq!(stacks.with_ring_seconds(3).ring_size(2), 16 << 20);
        assert_eq!(stacks.with_ring_seconds(0).ring_seconds, 1);
        // Many CPUs at a high rate: the bound.
        assert_eq!(stacks.with_frequency_hz(1000).ring_size(64), 64 << 20);
        let bounded = stacks.with_max_ring_bytes(48 << 20);
        assert_eq!(bounded.with_frequency_hz(1000).ring_size(64), 32 << 20);
        // No stacks: 198 samples of about 3 KiB (room for 64 Python frames), the floor.
        assert_eq!(EbpfOptions::default().ring_size(2), 1 << 20);
        // Never below 64 samples, nor zero CPUs.
        let largest = EbpfOptions::default().with_stack_size(EBPF_MAX_STACK);
        assert_eq!(largest.with_frequency_hz(1).ring_size(0), 8 << 20);
        assert_eq!(
            EbpfOptions::default().with_max_ring_bytes(0).max_ring_bytes,
            1 << 20
        );
        assert_eq!(prev_power_of_two(3 << 20), 2 << 20);
    }

    #[test]
    fn refusals_name_the_privilege() {
        let e = load_error(
            "load the BPF object",
            &Outer(io::Error::from_raw_os_error(1)),
        );
        assert!(matches!(e, EbpfError::Permission { .. }), "{e:?}");
        let message = e.to_string();
        assert!(
            message.contains("needs root, or CAP_BPF and CAP_PERFMON")
                && message.contains("with ptrace instead (--sampler ptrace)"),
            "{message}"
        );
        // Anything else is the kernel's answer, passed on with its causes.
        let e = load_error(
            "load the BPF program",
            &Outer(io::Error::from_raw_os_error(22)),
        );
        let message = e.to_string();
        assert!(matches!(e, EbpfError::Load(_)), "{e:?}");
        assert!(
            message.contains("bpf_map_create") && message.contains("Invalid argument"),
            "{message}"
        );
        assert!(EbpfError::NoBtf
            .to_string()
            .contains("/sys/kernel/btf/vmlinux"));
    }
}
