//! Profiling sessions: the reader's [`Sampler`](otel_ctx_reader::Sampler) feeding
//! profilers, for one process ([`ProcessProfiler`]) or for every process on the host that
//! publishes a process context ([`FleetProfiler`]: following, adopting and dropping them
//! as they come and go, a profile per process per interval).

mod fleet;
mod process;
mod scout;

pub use fleet::{FleetCounts, FleetOptions, FleetProfiler, Member};
pub use process::{ProcessProfiler, SessionOptions};

use crate::Sample;

/// Hands a sampler's sample to `add` as the profile layer's [`Sample`]; whether the
/// sample suggests the process's mappings changed. A sample without registers (the
/// thread could not be stopped, or no stack was copied) has nothing to unwind.
fn to_profile_sample(
    sample: &otel_ctx_reader::Sample<'_>,
    add: impl FnOnce(&Sample<'_>) -> bool,
) -> bool {
    let Some(registers) = sample.registers else {
        return false;
    };
    let context = sample.context().map(Into::into);
    add(&Sample::new(sample.tid, sample.thread_name, registers, sample.stack).with_context(context))
}
