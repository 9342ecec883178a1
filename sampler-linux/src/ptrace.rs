//! The ptrace way of sampling: paced rounds, each stopping the chosen threads of every
//! followed process one at a time, copying what the sampler asks for, and letting each go.
//!
//! The rounds come at the asked rate on average, each interval drawn at random between
//! half and one and a half periods. A fixed period aliases with work that repeats at
//! nearly the same period: a thread that alternates two 5 ms requests repeats every 10.05
//! to 10.11 ms, 99 Hz samples every 10.101 ms, so each sample finds the thread a few
//! microseconds further along its cycle than the one before, and a 10 s profile can see
//! one request far more than the other (the README's "When two routes of equal work do
//! not come out even" has the figures). Intervals of that spread move the point a sample
//! falls on by 0.29 periods (their standard deviation) at every sample, so that after
//! about a dozen samples it is spread evenly over any cycle, whatever its length. The
//! eBPF sampler's period is the kernel's CPU clock, fixed, as `perf record -F` has it.

use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

use crate::stack::{
    sample_blocked_with_python_into, sample_blocked_with_stack_into, sample_with_python_into,
    sample_with_stack_into, Held, StackBuffer,
};
use otel_ctx_reader::procfs::{self, BlockedInSyscall};
use otel_ctx_reader::thread::tls::{PtraceError, SampleError};
use otel_ctx_reader::thread::{RecordBuffer, ThreadReader};
use otel_ctx_reader::UserRegisters;

use super::process::Process;
use super::{deliver, PythonSample, Sample, SamplerError, SamplerOptions, SamplerStats, Threads};
use crate::python::PythonStack;
use crate::tasks::TaskFiles;

/// The rounds' pace and buffers.
pub(super) struct Rounds {
    period: Duration,
    next: Instant,
    rng: fastrand::Rng,
    threads: Threads,
    /// [`SamplerOptions::off_cpu`]: every thread, each sample split into its time on and
    /// off a CPU.
    off_cpu: bool,
    /// The clock of the off-CPU split (the wall time of [`CpuSeen::wall`]).
    epoch: Instant,
    records: RecordBuffer,
    /// `None` when the sampler copies no stacks.
    stack: Option<StackBuffer>,
    /// Each thread's time on a CPU at the last round, by process and thread (a CPU
    /// profile, [`Threads::Running`]), and at this one.
    cpu_before: HashMap<(u32, u32), CpuSeen>,
    cpu_now: HashMap<(u32, u32), CpuSeen>,
    /// Each followed process's thread list and its threads' `schedstat`, kept open from
    /// round to round.
    files: HashMap<u32, TaskFiles>,
    /// Where each thread was held at its stops in system calls, by process and thread:
    /// a thread found blocked in a system call at the same stack and instruction
    /// pointers is sampled without a stop ([`Rounds::blocked_at`]).
    held: HashMap<(u32, u32), BlockedStops>,
}

/// How many points where a thread blocks in a system call are remembered: a thread that
/// waits for a lock blocks in a few places (a condition variable's wait, the mutex
/// under it).
const BLOCKED_POINTS: usize = 4;

/// A thread's last stops at the points where it blocked in a system call, the latest
/// replacing the oldest.
#[derive(Clone, Copy, Debug, Default)]
struct BlockedStops {
    stops: [Option<LastStop>; BLOCKED_POINTS],
    next: usize,
}

impl BlockedStops {
    /// The stop at the point a `syscall` file shows.
    fn at(&self, point: BlockedInSyscall) -> Option<LastStop> {
        self.stops
            .iter()
            .flatten()
            .find(|s| s.is_at(point))
            .copied()
    }

    /// Remembers `stop`, in place of an earlier one at the same point, else of the
    /// oldest.
    fn remember(&mut self, stop: LastStop) {
        let same = self
            .stops
            .iter_mut()
            .find(|s| s.is_some_and(|s| s.point() == stop.point()));
        match same {
            Some(slot) => *slot = Some(stop),
            None => {
                self.stops[self.next] = Some(stop);
                self.next = (self.next + 1) % BLOCKED_POINTS;
            }
        }
    }
}

/// A thread's stop: where it was held, and the first link of its frame-pointer chain
/// then.
#[derive(Clone, Copy, Debug)]
struct LastStop {
    held: Held,
    link: Option<[u64; 2]>,
}

impl LastStop {
    fn new(held: Held, stack: &[u8]) -> Self {
        Self {
            held,
            link: frame_link(held.registers, stack),
        }
    }

    /// Whether a copy of the thread's stack, taken while it was blocked at the same
    /// stack and instruction pointers, holds the same first link: the frame pointer,
    /// which a blocked thread's `syscall` file does not give, is then taken to be the
    /// one of this stop. A frame pointer outside the copy is not one the unwinder
    /// follows into it.
    fn links_to(&self, stack: &[u8]) -> bool {
        frame_link(self.held.registers, stack) == self.link
    }

    /// Where the thread was held: its stack and instruction pointers.
    fn point(&self) -> (u64, u64) {
        (self.held.registers.sp, self.held.registers.ip)
    }

    /// Whether the thread was held at the point a `syscall` file shows.
    fn is_at(&self, point: BlockedInSyscall) -> bool {
        self.point() == (point.sp, point.pc)
    }
}

/// The two words at the frame pointer (where it is one: the caller's frame pointer and
/// the return address) in `stack`, a copy from the stack pointer up; `None` outside it.
fn frame_link(registers: UserRegisters, stack: &[u8]) -> Option<[u64; 2]> {
    let at = usize::try_from(registers.fp.checked_sub(registers.sp)?).ok()?;
    let words = stack.get(at..at.checked_add(16)?)?;
    let word = |i: usize| u64::from_ne_bytes(words[i..i + 8].try_into().unwrap_or_default());
    Some([word(0), word(8)])
}

/// The most of a thread's CPU time put down to its last sample (see [`CpuSeen::owed`]).
const MAX_OWED_NS: u64 = 1_000_000;

/// What a round saw of one thread's time on a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CpuSeen {
    /// Nanoseconds on a CPU when the thread was last counted.
    at: u64,
    /// How much of the time since `at` the sample itself may have made the thread run:
    /// stopping a sleeping thread wakes it, and so does resuming it. A thread that ran
    /// no more than this since is not counted as running (its time is kept for the
    /// next round that counts it): without this, one sample of an idle thread would
    /// make it run, which makes the next round sample it again, and so on for as long
    /// as the profile lasts.
    owed: u64,
    /// With off-CPU time: nanoseconds since [`Rounds::epoch`] when it was counted.
    wall: u64,
    /// How many times it had been given a CPU when counted (`schedstat`'s third field;
    /// 0 or `u64::MAX` when the kernel does not count).
    runs: u64,
}

impl CpuSeen {
    /// Notes in `seen` what sampling thread `tid` (just counted by
    /// [`Rounds::cpu_weight`]) cost it, read once the thread is resumed.
    fn sampled(seen: &mut HashMap<(u32, u32), CpuSeen>, files: &mut TaskFiles, pid: u32, tid: u32) {
        let Some(seen) = seen.get_mut(&(pid, tid)) else {
            return;
        };
        if let Some(after) = files.cpu_time(tid) {
            seen.owed = Self::owed_by_sample(seen.at, after);
        }
    }

    /// The CPU time the sample of a thread cost the thread, from its time before the
    /// sample and after it: three times the part measured (the stop, and more than
    /// what resuming it took after the reading), at most [`MAX_OWED_NS`].
    fn owed_by_sample(before: u64, after: u64) -> u64 {
        after
            .saturating_sub(before)
            .saturating_mul(3)
            .min(MAX_OWED_NS)
    }
}

impl Rounds {
    pub fn new(options: &SamplerOptions) -> Self {
        Self {
            period: Duration::from_secs(1) / options.frequency_hz.max(1),
            next: Instant::now(),
            rng: fastrand::Rng::new(),
            threads: options.threads,
            off_cpu: options.off_cpu.is_some(),
            epoch: Instant::now(),
            records: RecordBuffer::with_capacity(1024),
            stack: (options.stack_size > 0).then(|| StackBuffer::new(options.stack_size)),
            cpu_before: HashMap::new(),
            cpu_now: HashMap::new(),
            files: HashMap::new(),
            held: HashMap::new(),
        }
    }

    /// What a sample of thread `tid` stands for in a CPU profile: the time it spent on a
    /// CPU since it was last counted (its scheduler's own accounting), `None` when it did
    /// not run, or no more than its last sample made it run (or it is seen for the first
    /// time: that round sets its baseline). A thread that is runnable but waits for a CPU
    /// is not counted, nor is a thread's whole period when it had half a CPU. Without
    /// scheduler statistics, a thread in state `R` stands for one period (weight 0).
    fn cpu_weight(&mut self, files: &mut TaskFiles, tid: u32) -> Option<u64> {
        let pid = files.pid();
        let Some((now, runs)) = files.cpu_runs(tid) else {
            return procfs::task_stat(pid, tid)
                .is_some_and(|s| s.is_running())
                .then_some(0);
        };
        let counted = CpuSeen {
            at: now,
            runs,
            ..CpuSeen::default()
        };
        let (seen, weight) = match self.cpu_before.get(&(pid, tid)) {
            Some(&before) => match now.checked_sub(before.at) {
                Some(ran) if ran > before.owed => (counted, Some(ran)),
                // Idle, or running only for the last sample: counted later, from the
                // same time.
                Some(_) => (before, None),
                // A counter that went back starts again from its new value.
                None => (counted, None),
            },
            // Seen for the first time: its baseline.
            None => (counted, None),
        };
        self.cpu_now.insert((pid, tid), seen);
        weight
    }

    /// What a sample of thread `tid` stands for when off-CPU time is measured: the time
    /// since its last sample, split into the time it ran (its scheduler's own count)
    /// and the rest, off a CPU; `None` when it is seen for the first time (its
    /// baseline). Without scheduler statistics, the whole time is put down to its state
    /// now: on a CPU in state `R`, off it otherwise.
    fn wall_weights(&mut self, files: &mut TaskFiles, tid: u32) -> Option<(u64, u64)> {
        let pid = files.pid();
        let (cpu, runs) = files.cpu_runs(tid).unzip();
        let wall = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let seen = CpuSeen {
            at: cpu.unwrap_or(0),
            owed: 0,
            wall,
            runs: runs.unwrap_or(0),
        };
        self.cpu_now.insert((pid, tid), seen);
        let before = self.cpu_before.get(&(pid, tid))?;
        let elapsed = wall.saturating_sub(before.wall);
        let ran = match cpu {
            // A counter that went back counts no time on a CPU.
            Some(cpu) => cpu.saturating_sub(before.at).min(elapsed),
            None if procfs::task_stat(pid, tid).is_some_and(|s| s.is_running()) => elapsed,
            None => 0,
        };
        (elapsed > 0).then_some((ran, elapsed - ran))
    }

    /// Where thread `tid` is blocked in a system call, and its runs counted this round:
    /// on x86_64, where a stack copy holds every return address, such a thread may be
    /// sampled without a stop ([`Rounds::blocked_at`]). The sample is kept if the thread
    /// was not given a CPU from the count of its runs (made before the `syscall` file is
    /// read) to the end of the reading.
    fn blocked_in_syscall(
        &self,
        files: &mut TaskFiles,
        tid: u32,
    ) -> Option<(BlockedInSyscall, u64)> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let runs = self.cpu_now.get(&(files.pid(), tid))?.runs;
        if runs == 0 || runs == u64::MAX {
            return None;
        }
        Some((files.blocked_in_syscall(tid)?, runs))
    }

    /// The stop of thread `tid` at the point where it is blocked now, if one was made
    /// there. A blocked thread's registers do not change: its frame pointer and thread
    /// pointer are taken from that stop ([`LastStop::links_to`] checks the one, the
    /// other is fixed for the thread's life).
    fn blocked_at(&self, pid: u32, tid: u32, point: BlockedInSyscall) -> Option<LastStop> {
        self.held.get(&(pid, tid))?.at(point)
    }

    /// The interval after a round: uniform between half and one and a half periods.
    fn interval(&mut self) -> Duration {
        self.period / 2 + self.period.mul_f64(self.rng.f64())
    }

    /// Waits until the next round is due, at most `wait`; whether it is due. A round
    /// that comes late is taken at once, and the pace starts again from it: a slow round
    /// (many threads, a slow target) is not caught up with a burst.
    pub fn wait(&mut self, wait: Duration) -> bool {
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep((self.next - now).min(wait));
        }
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        let interval = self.interval();
        self.next += interval;
        if self.next < now {
            self.next = now;
        }
        true
    }

    /// One round over every followed process, in the order they were added.
    #[allow(clippy::too_many_arguments)]
    pub fn round<F>(
        &mut self,
        order: &[u32],
        processes: &mut HashMap<u32, Process>,
        readers: &mut HashMap<u32, ThreadReader>,
        stats: &mut SamplerStats,
        python_frames: &mut PythonStack,
        on_sample: &mut F,
    ) -> Result<(), SamplerError>
    where
        F: FnMut(&Sample<'_>) -> bool,
    {
        stats.rounds += 1;
        let mut all_files = std::mem::take(&mut self.files);
        all_files.retain(|pid, _| processes.contains_key(pid));
        for &pid in order {
            let Some(process) = processes.get_mut(&pid) else {
                continue;
            };
            let files = all_files.entry(pid).or_insert_with(|| TaskFiles::new(pid));
            // A process gone since the last exit check lists no threads.
            let Ok(tids) = files.thread_ids() else {
                continue;
            };
            let mut reader = readers.get_mut(&pid);
            for tid in tids {
                let (weight_ns, off_cpu_ns) = match self.threads {
                    _ if self.off_cpu => match self.wall_weights(files, tid) {
                        Some(split) => split,
                        None => continue,
                    },
                    Threads::Running => match self.cpu_weight(files, tid) {
                        Some(ran) => (ran, 0),
                        None => continue,
                    },
                    Threads::All => (0, 0),
                };
                let Process {
                    stacks,
                    names,
                    python,
                    python_names,
                    suspect,
                    ..
                } = &mut *process;
                // The Python walk's own outcome (`None`: no walk).
                let mut walked = None;
                // Where a thread stopped for this sample was held (`None`: not stopped,
                // or no stack copied).
                let mut stopped = None;
                // Its `syscall` file is read only where a read without a stop can be
                // made: with a thread reader and a stack to copy.
                let seen_blocked = (reader.is_some() && self.stack.is_some())
                    .then(|| self.blocked_in_syscall(files, tid))
                    .flatten();
                let blocked = seen_blocked
                    .and_then(|(point, runs)| Some((self.blocked_at(pid, tid, point)?, runs)));
                let unmoved = |files: &mut TaskFiles, runs: u64| {
                    files.cpu_runs(tid).is_some_and(|(_, now)| now == runs)
                };
                let taken = match (reader.as_deref_mut(), &mut self.stack, python.as_ref()) {
                    (Some(reader), Some(stack), Some(interpreter)) => {
                        let mut taken = None;
                        if let Some((last, runs)) = blocked {
                            if let Ok(Some(sampled)) = sample_blocked_with_python_into(
                                reader,
                                tid,
                                &mut self.records,
                                stack,
                                interpreter,
                                python_frames,
                                last.held,
                                || unmoved(files, runs),
                            ) {
                                taken = last.links_to(stack.bytes()).then_some(sampled);
                            }
                        }
                        let taken = match taken {
                            Some(taken) => Ok(taken),
                            not_taken => {
                                // Gone before the reader is borrowed again.
                                drop(not_taken);
                                sample_with_python_into(
                                    reader,
                                    tid,
                                    &mut self.records,
                                    stack,
                                    interpreter,
                                    python_frames,
                                )
                                .inspect(|(held, ..)| {
                                    stopped = Some(LastStop::new(*held, stack.bytes()));
                                })
                            }
                        };
                        taken.map(|(held, context, python)| {
                            walked = Some(python);
                            (Some(held.registers), context)
                        })
                    }
                    (Some(reader), Some(stack), None) => {
                        let mut taken = None;
                        if let Some((last, runs)) = blocked {
                            if let Ok(Some(context)) = sample_blocked_with_stack_into(
                                reader,
                                tid,
                                &mut self.records,
                                stack,
                                last.held,
                                || unmoved(files, runs),
                            ) {
                                taken =
                                    last.links_to(stack.bytes()).then_some((last.held, context));
                            }
                        }
                        let taken = match taken {
                            Some(taken) => Ok(taken),
                            not_taken => {
                                drop(not_taken);
                                sample_with_stack_into(reader, tid, &mut self.records, stack)
                                    .inspect(|(held, _)| {
                                        stopped = Some(LastStop::new(*held, stack.bytes()));
                                    })
                            }
                        };
                        taken.map(|(held, context)| (Some(held.registers), context))
                    }
                    (Some(reader), None, _) => reader
                        .sample_into(tid, &mut self.records)
                        .map(|context| (None, context)),
                    (None, Some(stack), Some(interpreter)) => stacks
                        .sample_with_python_into(tid, stack, interpreter, python_frames)
                        .map(|(registers, python)| {
                            walked = Some(python);
                            (Some(registers), None)
                        }),
                    (None, Some(stack), None) => stacks
                        .sample_stack_into(tid, stack)
                        .map(|registers| (Some(registers), None)),
                    // No stack to copy: the thread is not stopped.
                    (None, None, _) => Ok((None, None)),
                };
                let (registers, context) = match taken {
                    // Exited before it could be stopped: left out, as it would be from
                    // the next list of threads.
                    Err(SampleError::Ptrace(PtraceError::Gone)) => continue,
                    Ok((registers, context)) => {
                        if registers.is_some() {
                            // Stopped: alive, as far as the next list of threads goes.
                            files.seen_alive(tid);
                        }
                        (registers, Ok(context))
                    }
                    Err(e) => (None, Err(e)),
                };
                let unstopped = blocked.is_some() && stopped.is_none() && registers.is_some();
                stats.unstopped += u64::from(unstopped);
                // A thread sampled without a stop was not made to run by it.
                if weight_ns > 0 && !self.off_cpu && !unstopped {
                    CpuSeen::sampled(&mut self.cpu_now, files, pid, tid);
                }
                // A stop of a thread still where its `syscall` file showed it blocked.
                if let (Some(stop), Some((point, _))) = (stopped, seen_blocked) {
                    if stop.is_at(point) {
                        self.held.entry((pid, tid)).or_default().remember(stop);
                    }
                }
                let stack = match (&registers, &self.stack) {
                    (Some(_), Some(stack)) => stack.bytes(),
                    _ => &[],
                };
                let python_thread_name = python
                    .as_ref()
                    .and_then(|interpreter| interpreter.thread_name(python_names, tid));
                let python = match (walked.as_ref(), python.as_mut()) {
                    (Some(walked), Some(interpreter)) => {
                        let frames = walked.as_ref().map(|()| python_frames.frames());
                        let names = interpreter.name_frames(frames.unwrap_or_default());
                        Some(PythonSample { frames, names })
                    }
                    _ => None,
                };
                let sample = Sample {
                    pid,
                    tid,
                    thread_name: names.get(pid, tid),
                    python_thread_name,
                    registers,
                    stack,
                    context: match &context {
                        Ok(context) => Ok(context.clone()),
                        Err(e) => Err(e),
                    },
                    python,
                    weight_ns,
                    off_cpu_ns,
                    syscall: None,
                };
                let changed = deliver(stats, &sample, on_sample);
                drop(sample);
                *suspect |= changed;
            }
        }
        // This round's CPU times are the next one's baseline; threads gone since drop out,
        // and their files are closed.
        for (&pid, files) in &mut all_files {
            files.retain_threads(|tid| self.cpu_now.contains_key(&(pid, tid)));
        }
        self.held.retain(|key, _| self.cpu_now.contains_key(key));
        self.files = all_files;
        std::mem::swap(&mut self.cpu_before, &mut self.cpu_now);
        self.cpu_now.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(hz: u32) -> Rounds {
        Rounds::new(&SamplerOptions::default().with_frequency_hz(hz))
    }

    #[test]
    fn intervals_spread_around_the_period() {
        let mut rounds = rounds(100);
        let period = Duration::from_millis(10);
        let intervals: Vec<Duration> = (0..10_000).map(|_| rounds.interval()).collect();
        assert!(intervals
            .iter()
            .all(|i| *i >= period / 2 && *i < period * 3 / 2));
        let mean = intervals.iter().sum::<Duration>() / 10_000;
        // The mean of 10,000 uniform draws is within 1% of the period (its standard
        // error is 0.03%).
        assert!(mean.abs_diff(period) < period / 100, "{mean:?}");
        // Spread over the whole range, not a few values.
        let short = intervals.iter().filter(|i| **i < period * 3 / 4).count();
        let long = intervals.iter().filter(|i| **i >= period * 5 / 4).count();
        assert!((2_000..3_000).contains(&short) && (2_000..3_000).contains(&long));
    }

    /// The phase of the rounds in a cycle as long as the period spreads evenly: the
    /// rounds that fall in the cycle's first half are about half.
    #[test]
    fn no_phase_is_favoured() {
        let mut rounds = rounds(99);
        let cycle = rounds.period.as_nanos();
        let mut at = 0u128;
        let mut first_half = 0;
        for _ in 0..1_000 {
            at += rounds.interval().as_nanos();
            if at % cycle < cycle / 2 {
                first_half += 1;
            }
        }
        // A fixed period puts all 1,000 in one half; the binomial's deviation is 16.
        assert!((400..600).contains(&first_half), "{first_half} of 1000");
    }
}
