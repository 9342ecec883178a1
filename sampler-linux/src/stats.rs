//! What a sampler counts of the samples it hands over.

use otel_ctx_reader::thread::tls::SampleError;

use crate::sample::Sample;

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
    /// Samples taken without a stop (ptrace, x86_64): threads blocked in a system call
    /// where an earlier stop had found them, read while they did not run.
    pub unstopped: u64,
    /// With off-CPU time, by eBPF: the system calls of followed threads that left their
    /// CPU, followed.
    pub waits: u64,
    /// Of those, the ones sampled: away at least the threshold, and chosen by time
    /// ([`OffCpu::max_rate`](crate::OffCpu::max_rate)); their samples handed over, or
    /// lost.
    pub off_cpu_samples: u64,
}

impl SamplerStats {
    /// Samples whose context could not be read, every kind together.
    pub fn unreadable_samples(&self) -> u64 {
        self.unreadable.iter().map(|u| u.samples).sum()
    }
}

/// Counts a sample and hands it to the caller; whether the process may have changed
/// (the caller said so, or the slot could not be computed).
pub(crate) fn deliver<F>(stats: &mut SamplerStats, sample: &Sample<'_>, on_sample: &mut F) -> bool
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
