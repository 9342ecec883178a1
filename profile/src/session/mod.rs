//! Profiling sessions: the reader's [`Sampler`](otel_ctx_sampler::Sampler) feeding
//! profilers, for one process ([`ProcessProfiler`]) or for every process on the host that
//! publishes a process context ([`FleetProfiler`]: following, adopting and dropping them
//! as they come and go, a profile per process per interval).

mod fleet;
mod process;
mod scout;
mod summary;

pub use fleet::{FleetCounts, FleetOptions, FleetProfiler, Member};
pub use process::{ProcessProfiler, SessionOptions};
pub use summary::{FleetSummary, ProcessSummary};

use crate::{Profiler, Sample};

/// Hands a sampler's sample to `profiler` (with its Python frames, when it has them);
/// whether the sample suggests the process's mappings changed. A sample without
/// registers (the thread could not be stopped, or no stack was copied) has nothing to
/// unwind.
fn to_profile_sample(sample: &mut otel_ctx_sampler::Sample<'_>, profiler: &mut Profiler) -> bool {
    let otel_ctx_sampler::Sample {
        tid,
        thread_name,
        registers,
        stack,
        context,
        python,
        ..
    } = sample;
    let Some(registers) = *registers else {
        return false;
    };
    let context = context
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .map(Into::into);
    let profiled = Sample::new(*tid, thread_name, registers, stack).with_context(context);
    let outcome = match python {
        Some(python) => profiler.add_with_python(&profiled, python.interpreter, python.frames),
        None => profiler.add(&profiled),
    };
    outcome.outside_modules
}
