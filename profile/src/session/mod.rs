//! Profiling sessions: the sampler's [`Sampler`](otel_ctx_sampler::Sampler) feeding
//! profilers, for one process ([`ProcessProfiler`]) or for every process on the host that
//! publishes a process context ([`FleetProfiler`]: following, adopting and dropping them
//! as they come and go, a profile per process per interval).

#[cfg(feature = "http")]
mod exporting;
mod fleet;
mod process;
mod scout;
mod summary;

#[cfg(feature = "http")]
pub use exporting::ExportingFleet;
pub use fleet::{FleetCounts, FleetOptions, FleetProfiler, Member};
pub use process::{ProcessProfiler, SessionOptions, DEFAULT_DEBUGINFOD_TIME};
pub use summary::{FleetSummary, ProcessSummary};
