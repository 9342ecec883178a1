//! How a [`Profiler`](crate::Profiler) takes samples (the sampler's
//! [`Sample`](otel_ctx_sampler::Sample)): its options, the filter, and what became of one.

use otel_ctx_reader::files::FileBudget;
use otel_ctx_sampler::Sample;

use crate::aggregate::Limits;
use crate::arch::Arch;
use crate::unwind::UnwindEnd;

/// The default sampling period: 99 Hz.
pub const DEFAULT_PERIOD_NS: u64 = 1_000_000_000 / 99;

/// The default deepest stack unwound.
pub const DEFAULT_MAX_DEPTH: usize = 256;

/// Which samples a profile keeps. The default keeps every sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    /// Keep only samples with a thread context.
    pub require_context: bool,
    /// Keep only samples whose thread context has this attribute with this value.
    pub attribute: Option<(String, String)>,
    /// Keep only samples of these threads.
    pub threads: Option<Vec<u32>>,
    /// Keep only samples of this trace (its W3C trace id).
    pub trace_id: Option<[u8; 16]>,
}

impl Filter {
    /// Sets [`require_context`](Self::require_context).
    #[must_use]
    pub fn with_require_context(mut self, require: bool) -> Self {
        self.require_context = require;
        self
    }

    /// Sets [`attribute`](Self::attribute).
    #[must_use]
    pub fn with_attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attribute = Some((name.into(), value.into()));
        self
    }

    /// Sets [`threads`](Self::threads).
    #[must_use]
    pub fn with_threads(mut self, tids: impl IntoIterator<Item = u32>) -> Self {
        self.threads = Some(tids.into_iter().collect());
        self
    }

    /// Sets [`trace_id`](Self::trace_id).
    #[must_use]
    pub fn with_trace_id(mut self, trace_id: [u8; 16]) -> Self {
        self.trace_id = Some(trace_id);
        self
    }

    pub(crate) fn keeps(&self, sample: &Sample<'_>) -> bool {
        let context = sample.context();
        if let Some(trace_id) = self.trace_id {
            if context.is_none_or(|c| c.trace_id() != trace_id) {
                return false;
            }
        }
        if self
            .threads
            .as_ref()
            .is_some_and(|t| !t.contains(&sample.tid))
        {
            return false;
        }
        match (context, self.require_context, &self.attribute) {
            (None, true, _) | (None, _, Some(_)) => false,
            (Some(context), _, Some((name, value))) => context
                .attributes()
                .any(|(k, v)| k == name && v == value.as_bytes()),
            _ => true,
        }
    }
}

/// How a [`Profiler`](crate::Profiler) unwinds, symbolizes and aggregates. Start from
/// `ProfileOptions::default()` and set fields with the builder methods.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfileOptions {
    /// The instruction set of the samples. Default [`Arch::NATIVE`].
    pub arch: Arch,
    /// Deepest stack unwound, in frames. Default [`DEFAULT_MAX_DEPTH`].
    pub max_depth: usize,
    /// Unwind with DWARF CFI where a module has it. Default `true`; `false` walks
    /// frame pointers alone (cheaper, and wrong for code built without them).
    pub cfi: bool,
    /// Read modules' DWARF: inlined frames, and the lines of [`lines`](Self::lines).
    /// Default `true`.
    pub debug_info: bool,
    /// Give frames their source file and line (from DWARF; for Python frames, from the
    /// code object's location table). Default `false`.
    pub lines: bool,
    /// Keep the native frames of samples with Python frames. Default `true`; `false`
    /// shows their Python frames alone, as py-spy does by default.
    pub native: bool,
    /// With [`native`](Self::native), keep also the interpreter's own native frames
    /// above a sample's outermost Python frame: the C functions of CPython (its
    /// executable or `libpython`) that do a Python frame's work, as `list_sort` under
    /// `sorted()` or `PyObject_Malloc`. Default `false`: their time is their Python
    /// caller's, as py-spy's `--native` shows it; native frames of every other module (C
    /// extensions, libc) and those below the Python frames (the thread's start) stay.
    pub interpreter_frames: bool,
    /// What reading one module may cost (bytes and time). Default: the reader's
    /// [`FileBudget::default`] (64 MiB, 1 s).
    pub module_budget: FileBudget,
    /// The sampling period in nanoseconds, for samples that give no weight and for
    /// pprof's period. Default [`DEFAULT_PERIOD_NS`].
    pub period_ns: u64,
    /// The samples measure off-CPU time too
    /// ([`Sample::off_cpu_ns`](otel_ctx_sampler::Sample::off_cpu_ns)), and the profile
    /// shows it: pprof's third value `off_cpu`/`nanoseconds`, and a flame graph of it
    /// ([`FoldedOptions::show`](crate::FoldedOptions::show)). Default `false`.
    pub off_cpu: bool,
    /// Bounds of the aggregate.
    pub limits: Limits,
    /// Which samples are kept.
    pub filter: Filter,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        Self {
            arch: Arch::NATIVE,
            max_depth: DEFAULT_MAX_DEPTH,
            cfi: true,
            debug_info: true,
            lines: false,
            native: true,
            interpreter_frames: false,
            module_budget: FileBudget::default(),
            period_ns: DEFAULT_PERIOD_NS,
            off_cpu: false,
            limits: Limits::default(),
            filter: Filter::default(),
        }
    }
}

impl ProfileOptions {
    /// Sets [`arch`](Self::arch).
    #[must_use]
    pub fn with_arch(mut self, arch: Arch) -> Self {
        self.arch = arch;
        self
    }

    /// Sets [`max_depth`](Self::max_depth) (at least 1).
    #[must_use]
    pub fn with_max_depth(mut self, frames: usize) -> Self {
        self.max_depth = frames.max(1);
        self
    }

    /// Sets [`cfi`](Self::cfi).
    #[must_use]
    pub fn with_cfi(mut self, cfi: bool) -> Self {
        self.cfi = cfi;
        self
    }

    /// Sets [`debug_info`](Self::debug_info).
    #[must_use]
    pub fn with_debug_info(mut self, read: bool) -> Self {
        self.debug_info = read;
        self
    }

    /// Sets [`off_cpu`](Self::off_cpu).
    #[must_use]
    pub fn with_off_cpu(mut self, off_cpu: bool) -> Self {
        self.off_cpu = off_cpu;
        self
    }

    /// Sets [`lines`](Self::lines).
    #[must_use]
    pub fn with_lines(mut self, lines: bool) -> Self {
        self.lines = lines;
        self
    }

    /// Sets [`native`](Self::native).
    #[must_use]
    pub fn with_native(mut self, native: bool) -> Self {
        self.native = native;
        self
    }

    /// Sets [`interpreter_frames`](Self::interpreter_frames).
    #[must_use]
    pub fn with_interpreter_frames(mut self, keep: bool) -> Self {
        self.interpreter_frames = keep;
        self
    }

    /// Sets [`module_budget`](Self::module_budget).
    #[must_use]
    pub fn with_module_budget(mut self, budget: FileBudget) -> Self {
        self.module_budget = budget;
        self
    }

    /// Sets [`period_ns`](Self::period_ns).
    #[must_use]
    pub fn with_period_ns(mut self, period: u64) -> Self {
        self.period_ns = period;
        self
    }

    /// Sets [`limits`](Self::limits).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets [`filter`](Self::filter).
    #[must_use]
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }
}

/// What [`Profiler::add`](crate::Profiler::add) did with a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleOutcome {
    /// Whether the filter kept it.
    pub kept: bool,
    /// Frames unwound.
    pub frames: usize,
    /// Why the walk ended; `None` when the filter dropped the sample (no walk).
    pub end: Option<UnwindEnd>,
    /// Whether its instruction pointer was in no known module: the caller should read
    /// the maps again ([`Profiler::update_maps`](crate::Profiler::update_maps)), at a rate it chooses.
    pub outside_modules: bool,
}
