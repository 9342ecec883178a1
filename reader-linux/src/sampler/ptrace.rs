//! The ptrace way of sampling: paced rounds, each stopping the chosen threads of every
//! followed process one at a time, copying what the sampler asks for, and letting each go.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::procfs;
use crate::thread::reader::{RecordBuffer, ThreadReader};
use crate::thread::stack::{StackBuffer, UserRegisters};
use crate::thread::tls::{PtraceError, SampleError};

use super::process::Process;
use super::{deliver, Sample, SamplerError, SamplerOptions, SamplerStats, Threads};

/// The rounds' pace and buffers.
pub(super) struct Rounds {
    period: Duration,
    next: Instant,
    threads: Threads,
    records: RecordBuffer,
    /// `None` when the sampler copies no stacks.
    stack: Option<StackBuffer>,
}

impl Rounds {
    pub fn new(options: &SamplerOptions) -> Self {
        Self {
            period: Duration::from_secs(1) / options.frequency_hz.max(1),
            next: Instant::now(),
            threads: options.threads,
            records: RecordBuffer::with_capacity(1024),
            stack: (options.stack_size > 0).then(|| StackBuffer::new(options.stack_size)),
        }
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
        self.next += self.period;
        if self.next < now {
            self.next = now;
        }
        true
    }

    /// One round over every followed process, in the order they were added.
    pub fn round<F>(
        &mut self,
        order: &[u32],
        processes: &mut HashMap<u32, Process>,
        readers: &mut HashMap<u32, ThreadReader>,
        stats: &mut SamplerStats,
        on_sample: &mut F,
    ) -> Result<(), SamplerError>
    where
        F: FnMut(&Sample<'_>) -> bool,
    {
        stats.rounds += 1;
        for &pid in order {
            let Some(process) = processes.get_mut(&pid) else {
                continue;
            };
            // A process gone since the last exit check lists no threads.
            let Ok(tids) = procfs::thread_ids(pid) else {
                continue;
            };
            let mut reader = readers.get_mut(&pid);
            for tid in tids {
                if self.threads == Threads::Running
                    && !procfs::task_stat(pid, tid).is_some_and(|s| s.is_running())
                {
                    continue;
                }
                let taken = match reader.as_deref_mut() {
                    Some(reader) => match &mut self.stack {
                        Some(stack) => reader
                            .sample_with_stack_into(tid, &mut self.records, stack)
                            .map(|(registers, context)| (Some(registers), context)),
                        None => reader
                            .sample_into(tid, &mut self.records)
                            .map(|context| (None, context)),
                    },
                    None => stacks_only(tid, process, self.stack.as_mut())
                        .map(|registers| (registers, None)),
                };
                let (registers, context) = match taken {
                    // Exited before it could be stopped: left out, as it would be from
                    // the next list of threads.
                    Err(SampleError::Ptrace(PtraceError::Gone)) => continue,
                    Ok((registers, context)) => (registers, Ok(context)),
                    Err(e) => (None, Err(e)),
                };
                let stack = match (&registers, &self.stack) {
                    (Some(_), Some(stack)) => stack.bytes(),
                    _ => &[],
                };
                let sample = Sample {
                    pid,
                    tid,
                    thread_name: process.thread_name(pid, tid),
                    registers,
                    stack,
                    kernel_frames: &[],
                    context: match &context {
                        Ok(context) => Ok(context.clone()),
                        Err(e) => Err(e),
                    },
                };
                let suspect = deliver(stats, &sample, on_sample);
                drop(sample);
                process.suspect |= suspect;
            }
        }
        Ok(())
    }
}

/// Stops thread `tid` of a process followed for its stacks only and copies its
/// registers and stack (nothing, with no stack to copy: the thread is not stopped).
fn stacks_only(
    tid: u32,
    process: &Process,
    stack: Option<&mut StackBuffer>,
) -> Result<Option<UserRegisters>, SampleError> {
    match stack {
        Some(stack) => process.stacks.sample_stack_into(tid, stack).map(Some),
        None => Ok(None),
    }
}
