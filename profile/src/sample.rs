//! What goes into a [`Profiler`](crate::Profiler)(crate::Profiler): its options, the filter, and one
//! sample with its thread context.

use otel_ctx_reader::files::FileBudget;
use otel_ctx_reader::{ThreadContextRef, UserRegisters};

use crate::aggregate::Limits;
use crate::unwind::{Arch, UnwindEnd};

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
        if let Some(trace_id) = self.trace_id {
            if sample.context.is_none_or(|c| c.trace_id != trace_id) {
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
        match (&sample.context, self.require_context, &self.attribute) {
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
    /// What reading one module may cost (bytes and time). Default: the reader's
    /// [`FileBudget::default`] (64 MiB, 1 s).
    pub module_budget: FileBudget,
    /// The sampling period in nanoseconds, for samples that give no weight and for
    /// pprof's period. Default [`DEFAULT_PERIOD_NS`].
    pub period_ns: u64,
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
            module_budget: FileBudget::default(),
            period_ns: DEFAULT_PERIOD_NS,
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

/// A thread context's attributes, by name.
#[derive(Clone, Copy, Debug)]
pub enum Attributes<'a> {
    /// As the reader named them.
    Reader(&'a ThreadContextRef<'a>),
    /// Given as a list (a context read some other way).
    List(&'a [(&'a str, &'a [u8])]),
}

/// The thread context of a sample.
#[derive(Clone, Copy, Debug)]
pub struct SampleContext<'a> {
    /// The W3C trace id.
    pub trace_id: [u8; 16],
    /// The W3C span id.
    pub span_id: [u8; 8],
    /// The W3C trace flags.
    pub trace_flags: u8,
    /// The attributes, by their key-map names.
    pub attributes: Attributes<'a>,
}

impl<'a> SampleContext<'a> {
    /// The attributes, in the record's order.
    pub fn attributes(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        let (reader, list) = match self.attributes {
            Attributes::Reader(context) => (Some(context.attributes()), None),
            Attributes::List(list) => (None, Some(list.iter().copied())),
        };
        reader
            .into_iter()
            .flatten()
            .chain(list.into_iter().flatten())
    }
}

impl<'a> From<&'a ThreadContextRef<'a>> for SampleContext<'a> {
    fn from(context: &'a ThreadContextRef<'a>) -> Self {
        Self {
            trace_id: context.trace_id(),
            span_id: context.span_id(),
            trace_flags: context.trace_flags(),
            attributes: Attributes::Reader(context),
        }
    }
}

/// One sample of one thread.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub thread_name: &'a str,
    /// The user registers when the thread was interrupted.
    pub registers: UserRegisters,
    /// The stack copied from `registers.sp` up (may be short or empty).
    pub stack: &'a [u8],
    /// The thread's context, if it had one.
    pub context: Option<SampleContext<'a>>,
    /// The sample's weight in nanoseconds; 0 for the profile's period.
    pub weight_ns: u64,
}

impl<'a> Sample<'a> {
    /// A sample without a context, weighing one period.
    pub fn new(tid: u32, thread_name: &'a str, registers: UserRegisters, stack: &'a [u8]) -> Self {
        Self {
            tid,
            thread_name,
            registers,
            stack,
            context: None,
            weight_ns: 0,
        }
    }

    /// Sets [`context`](Self::context).
    #[must_use]
    pub fn with_context(mut self, context: Option<SampleContext<'a>>) -> Self {
        self.context = context;
        self
    }

    /// Sets [`weight_ns`](Self::weight_ns).
    #[must_use]
    pub fn with_weight_ns(mut self, weight: u64) -> Self {
        self.weight_ns = weight;
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
