//! Profiles from OpenTelemetry thread-context samples: each sample's stack unwound and
//! symbolized in user space, labeled with its thread context, aggregated, and written as
//! pprof, folded text, an SVG flame graph or OTLP profiles.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use otel_ctx_reader::ProcessMaps;
//! # use otel_ctx_sampler::{Sampler, SamplerOptions};
//! # use otel_ctx_profile::{FoldedOptions, ProfileOptions, Profiler};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> { let pid = 1234;
//! let mut sampler = Sampler::new(SamplerOptions::default())?;
//! sampler.add_process(pid)?;
//! let mut profiler = Profiler::new(pid, ProfileOptions::default());
//! profiler.update_maps(&ProcessMaps::read(pid)?);
//! // The sampler's samples, as they are: the one shape of a sample.
//! sampler.step(Duration::from_secs(1), |sample| profiler.add(sample).outside_modules)?;
//! let profile = profiler.profile();
//! profile.write_pprof(std::fs::File::create("cpu.pb.gz")?)?;
//! profile.write_svg(&FoldedOptions::default(), std::fs::File::create("cpu.svg")?)?;
//! # Ok(()) }
//! ```
//!
//! The layers, each with its own cache, in the order a sample goes through them:
//!
//! - **Modules** ([`ModuleCache`]): every executable file of [`ProcessMaps`] is opened
//!   with the reader's [`open_mapped`](otel_ctx_reader::files::open_mapped) and read with
//!   `pread` under a [`FileBudget`](otel_ctx_reader::files::FileBudget) ([`BudgetedFile`](otel_ctx_reader::files::BudgetedFile)),
//!   never mapped: its build id, `.eh_frame`, `.eh_frame_hdr`, `.debug_frame`, symbol
//!   tables and DWARF, once per build id (else device and inode). A module that costs
//!   more than the budget is left out with the reason ([`Stats::skipped_modules`]).
//! - **Unwinding** (framehop, the unwinder of samply): DWARF CFI, frame pointers where
//!   no CFI covers an address, x86_64 and aarch64 ([`Arch`]). The stack is the sample's
//!   copy; the walk ends at a read outside it, at a frame that does not move the stack
//!   pointer up, and at [`ProfileOptions::max_depth`] ([`UnwindEnd`] says which).
//! - **Python frames** ([`Profiler::add`] of a sample with
//!   [`python`](otel_ctx_sampler::Sample::python)): a CPython process's interpreter
//!   frames, walked and named by the sampler, replace the native calls of its evaluation
//!   loop that run them ([`ProfileOptions::native`] `false`: they alone remain); each
//!   code object's names are taken from the sample's names table when first seen
//!   ([`FrameKind::Python`], [`Stats::python`]).
//! - **Aggregation**: one entry per distinct (stack, label set), counts and
//!   nanoseconds, within [`Limits`].
//! - **Symbols** ([`Profiler::profile`]): ELF symbol tables and DWARF (inlined frames,
//!   file:line with [`ProfileOptions::lines`]), Rust and C++ names demangled, cached per
//!   module. A stripped module's names come from its [`SymbolSource`]s, tried when it is
//!   read: a separate debug file by build id (`/usr/lib/debug/.build-id/`, in the
//!   target's root, then the host's), its `.gnu_debuglink` (the CRC checked), its
//!   MiniDebugInfo (`.gnu_debugdata`); with the feature `debuginfod`, a
//!   `Debuginfod` server's, fetched by `Profiler::fetch_debug_files` once sampling
//!   is over. The vDSO is read from the target's memory (symbols and CFI), and code in
//!   no module is named by the target's perf map (`/tmp/perf-<pid>.map`), read when the
//!   profile is made. An address nothing names is `[unknown] <module>+0x<file offset>`,
//!   one in no module `[unknown] 0x<address>`, counted by [`UnknownCause`]
//!   ([`Stats::unknown_frames`]).
//! - **Writers** ([`Profile`]): [`write_pprof`](Profile::write_pprof) (gzipped
//!   `profile.proto`), [`write_folded`](Profile::write_folded) (flamegraph.pl's text),
//!   [`write_svg`](Profile::write_svg) (inferno's flame graph), and
//!   [`otlp::export_request`] (OTLP profiles, many processes in one request), all from
//!   the same aggregate.
//! - **Delivery** (`export`, feature `http`, on by default): an exporter thread that
//!   sends each interval's request over OTLP/HTTP (or to a file), with the
//!   `OTEL_EXPORTER_OTLP_*` environment, a queue bounded in bytes and retries. Without
//!   the feature the crate has no HTTP client and no TLS.
//!
//! Why addr2line and object rather than blazesym: blazesym opens and maps the paths it
//! is given, and follows debug links into this process's file system. Here every byte
//! of a target's file, and of every file it names (debug files, perf maps), is read
//! through the reader's safe open and budgeted `pread`, resolved inside the target's
//! root; addr2line and object parse those bytes as they are, with no file access of
//! their own. The sources are shaped as blazesym's: one [`SymbolSource`] per origin of
//! bytes.
//!
//! A [`Profiler`] and its [`ModuleCache`] live on one thread (the caches are not
//! shared between threads).
//!
//! [`ProcessMaps`]: otel_ctx_reader::ProcessMaps
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod aggregate;
mod arch;
mod assemble;
mod bytes;
mod dwarf;
mod elf;
#[cfg(feature = "http")]
pub mod export;
mod folded;
mod format;
mod module;
pub mod otlp;
pub mod output;
mod plt;
mod pprof;
mod profile;
mod profiler;
mod python;
mod sample;
mod session;
mod source;
mod symbolize;
mod unwind;

pub use aggregate::Limits;
pub use arch::Arch;
pub use folded::{FoldedOptions, Show};
pub use format::Format;
pub use module::{CacheLimits, CacheStats, ModuleCache, ModuleKey};
pub use output::{OutputError, Outputs};
pub use profile::{
    DebugInfoStats, Entry, FrameKind, LabelSet, Location, Mapping, Profile, SkippedModule, Stats,
};
pub use profiler::{Profiler, OFF_CPU_SYSCALL};
pub use python::{PythonStats, MAX_PYTHON_LOCATIONS};
pub use sample::{Filter, ProfileOptions, SampleOutcome, DEFAULT_MAX_DEPTH, DEFAULT_PERIOD_NS};
#[cfg(feature = "http")]
pub use session::ExportingFleet;
pub use session::{
    FleetCounts, FleetOptions, FleetProfiler, FleetSummary, Member, ProcessProfiler,
    ProcessSummary, SessionOptions, DEFAULT_DEBUGINFOD_TIME,
};
#[cfg(feature = "debuginfod")]
pub use source::debuginfod::{Debuginfod, DebuginfodFetch, DebuginfodOptions, Fetched};
pub use source::jvm::{HotSpot, JavaPerfMap, JavaPerfMapStats, JvmError, JAVA_PERF_MAP_REFRESH};
pub use source::perf_map::PerfMapStats;
pub use source::{SymbolProblem, SymbolSource, UnknownCause};
pub use symbolize::Symbol;
pub use unwind::{Frame, UnwindEnd};

/// Lowercase hex of `bytes`: the codec's, the project's one definition.
pub(crate) use otel_ctx_codec::hex::encode as hex;
