//! The profile every writer reads: the aggregate with its stacks symbolized, its
//! labels spelled out, and the process's resource.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use otel_ctx_reader::process::OwnedKeyValue;

use crate::source::perf_map::PerfMapStats;
use crate::source::{SymbolProblem, SymbolSource, UnknownCause};
use crate::symbolize::Symbol;
use crate::unwind::UnwindEnd;

/// A profile of one process, ready to write.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Profile {
    /// The process.
    pub pid: u32,
    /// The resource's `service.name`, when the process context has one.
    pub service_name: Option<String>,
    /// The process context's resource attributes, values rendered as text.
    pub resource: Vec<(String, String)>,
    /// The same attributes with their types, as the process context carries them.
    pub resource_attributes: Vec<OwnedKeyValue>,
    /// The sampling period in nanoseconds.
    pub period_ns: u64,
    /// Whether its samples measured off-CPU time too
    /// ([`ProfileOptions::off_cpu`](crate::ProfileOptions::off_cpu)).
    pub off_cpu: bool,
    /// When the profile started.
    pub start: SystemTime,
    /// How long it covers.
    pub duration: Duration,
    /// The file mappings frames were found in.
    pub mappings: Vec<Mapping>,
    /// Every distinct frame.
    pub locations: Vec<Location>,
    /// Every distinct stack: indexes into `locations`, the leaf first.
    pub stacks: Vec<Vec<usize>>,
    /// Every distinct label set.
    pub label_sets: Vec<LabelSet>,
    /// One per distinct (stack, label set).
    pub entries: Vec<Entry>,
    /// What was sampled, and how it went.
    pub stats: Stats,
}

/// A mapping of a module file (one executable range of it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mapping {
    /// The file's path in the target.
    pub path: String,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset of `start` in the file.
    pub offset: u64,
    /// The GNU build id, lowercase hex.
    pub build_id: Option<String>,
    /// Whether the file was read (its frames have names where its symbols have them).
    pub symbolized: bool,
    /// Whether its DWARF was read (inlined frames, and lines with the `lines` option).
    pub debug_info: bool,
    /// Why it was not read, or why its DWARF was left out.
    pub note: Option<String>,
    /// Where its names came from: its own file, and the debug file or other source
    /// that completed them.
    pub sources: Vec<SymbolSource>,
}

impl Mapping {
    /// The file name without its directories.
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// One distinct frame.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Location {
    /// Index into [`Profile::mappings`], `None` for an address in no known module.
    pub mapping: Option<usize>,
    /// The address in the process (a return address as it was on the stack).
    pub address: u64,
    /// The functions it is in, innermost (inlined) first; empty when nothing names it.
    pub symbols: Vec<Symbol>,
    /// How it is shown when `symbols` is empty: `[unknown] libfoo.so+0x1234` (the
    /// module's basename and the file offset), or `[unknown] 0x7f...` outside every
    /// module.
    pub unknown: String,
    /// A machine-code frame, or an interpreter's.
    pub kind: FrameKind,
}

/// What kind of frame a [`Location`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameKind {
    /// Machine code: `address` is in `mapping`, `symbols` come from its ELF symbols and
    /// DWARF.
    Native,
    /// A CPython frame: `address` is its code object's, its one symbol is the code
    /// object's qualified name and file (and line with the `lines` option).
    Python {
        /// The function's first line (`co_firstlineno`).
        start_line: u32,
    },
}

impl FrameKind {
    /// The function's first line, for a Python frame.
    pub const fn start_line(self) -> Option<u32> {
        match self {
            Self::Native => None,
            Self::Python { start_line } => Some(start_line),
        }
    }

    /// OpenTelemetry's `profile.frame.type` of it: `native` or `cpython`.
    pub const fn otel_type(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Python { .. } => "cpython",
        }
    }
}

impl Location {
    /// The names of its frames, innermost first, with ` (file:line)` when the symbol
    /// has a line.
    pub fn frame_names(&self) -> Vec<Cow<'_, str>> {
        if self.symbols.is_empty() {
            return vec![Cow::Borrowed(self.unknown.as_str())];
        }
        self.symbols
            .iter()
            .map(|s| match (&s.file, s.line) {
                (Some(file), Some(line)) => {
                    let base = file.rsplit('/').next().unwrap_or(file);
                    Cow::Owned(format!("{} ({base}:{line})", s.name))
                }
                _ => Cow::Borrowed(s.name.as_str()),
            })
            .collect()
    }

    /// The name of its innermost frame (an inlined function, where there is one).
    pub fn leaf_name(&self) -> &str {
        self.symbols.first().map_or(&self.unknown, |s| &s.name)
    }

    /// The name of the function the address is in (the outermost of its frames: the
    /// one the others were inlined into).
    pub fn function_name(&self) -> &str {
        self.symbols.last().map_or(&self.unknown, |s| &s.name)
    }
}

/// The labels of a sample: `trace_id`, `span_id`, the thread context's attributes by
/// name, `thread.id` and `thread.name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LabelSet {
    /// Whether the samples had a thread context.
    pub has_context: bool,
    /// The labels, in that order.
    pub labels: Vec<(String, String)>,
}

impl LabelSet {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The flame-graph root of these samples when grouped by `by`: the label's value,
    /// `(no context)` for samples without a thread context, `(no <by>)` for a context
    /// without that attribute.
    pub fn group(&self, by: &str) -> Cow<'_, str> {
        match self.get(by) {
            Some(value) => Cow::Borrowed(value),
            None if !self.has_context => Cow::Borrowed("(no context)"),
            None => Cow::Owned(format!("(no {by})")),
        }
    }
}

/// Samples of one stack with one label set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// Index into [`Profile::stacks`]; `None` for the overflow entry (samples past the
    /// aggregate's limits).
    pub stack: Option<usize>,
    /// Index into [`Profile::label_sets`].
    pub labels: usize,
    /// Samples.
    pub samples: u64,
    /// Their time on a CPU in nanoseconds.
    pub nanos: u64,
    /// Their time off a CPU in nanoseconds (with
    /// [`Profile::off_cpu`]; 0 otherwise).
    pub off_cpu_nanos: u64,
}

/// A module left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedModule {
    /// Its path in the target.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What was sampled, and how it went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Samples given to the profiler, kept or filtered.
    pub samples: u64,
    /// Samples dropped by the filter (not unwound, not counted below).
    pub filtered: u64,
    /// Kept samples with a thread context.
    pub with_context: u64,
    /// Kept samples without one.
    pub without_context: u64,
    /// Distinct stacks.
    pub distinct_stacks: usize,
    /// Distinct (stack, label set) entries.
    pub entries: usize,
    /// How the walks ended, by reason (every reason but [`UnwindEnd::Root`] is a
    /// failure to reach the outermost frame).
    pub unwind_ends: BTreeMap<UnwindEnd, u64>,
    /// Samples whose instruction pointer was in no known module (the evidence that
    /// the caller should read the maps again).
    pub outside_modules: u64,
    /// Samples counted in the overflow entry (past the aggregate's limits).
    pub overflow_samples: u64,
    /// Labels whose key or value did not fit and read `(overflow)`.
    pub overflow_labels: u64,
    /// Modules read (or found in the cache).
    pub modules: usize,
    /// Modules left out, and why.
    pub skipped_modules: Vec<SkippedModule>,
    /// Distinct frames of the profile that nothing names, by cause (filled in by
    /// [`Profiler::profile`](crate::Profiler::profile), which symbolizes them).
    pub unknown_frames: BTreeMap<UnknownCause, u64>,
    /// Symbol sources that failed the profile's modules, or were read in part: a
    /// stripped module without its debug file, a debug file of another build, a
    /// debuginfod server that did not answer, a perf map refused or cut.
    pub symbol_problems: Vec<SymbolProblem>,
    /// What was read of the process's perf map, when a frame in no module made the
    /// profile look for one and there is one.
    pub perf_map: Option<PerfMapStats>,
    /// The Python frames: samples that had them, frames spliced in, failures by reason.
    pub python: crate::PythonStats,
    /// The DWARF of the profile's modules (filled in by
    /// [`Profiler::profile`](crate::Profiler::profile)).
    pub debug_info: DebugInfoStats,
}

/// The DWARF the profile's modules keep: what their sections cost, and how many of their
/// compilation units the profile's frames made the profiler parse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DebugInfoStats {
    /// Modules with DWARF.
    pub modules: usize,
    /// The bytes of their DWARF sections, kept for looking addresses up.
    pub bytes: u64,
    /// Their compilation units.
    pub units: usize,
    /// Those parsed (and kept) so far.
    pub units_parsed: usize,
}

impl Stats {
    /// Distinct frames left `[unknown]`, whatever the cause.
    pub fn unknown_frame_count(&self) -> u64 {
        self.unknown_frames.values().sum()
    }

    /// Walks that stopped short of the outermost frame.
    pub fn unwind_failures(&self) -> u64 {
        self.unwind_ends
            .iter()
            .filter(|(end, _)| end.is_failure())
            .map(|(_, n)| n)
            .sum()
    }
}

/// The frame the writers show for the entry past the aggregate's limits.
pub(crate) const OVERFLOW_FUNCTION: &str = "[overflow: past the profile's limits]";

/// A small profile with every kind of frame and entry, for the writers' tests.
#[cfg(test)]
pub(crate) fn example() -> Profile {
    let symbol = |name: &str, line: Option<u32>| Symbol {
        name: name.to_owned(),
        file: line.map(|_| "/src/a.c".to_owned()),
        line,
    };
    let labels = |has_context: bool, pairs: &[(&str, &str)]| LabelSet {
        has_context,
        labels: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let ids = [
        ("trace_id", "0102030405060708090a0b0c0d0e0f10"),
        ("span_id", "a1a2a3a4a5a6a7a8"),
    ];
    Profile {
        pid: 42,
        service_name: Some("checkout <&> \"svc\"".to_owned()),
        resource: vec![
            ("service.name".to_owned(), "checkout <&> \"svc\"".to_owned()),
            ("service.version".to_owned(), "1.2".to_owned()),
        ],
        resource_attributes: vec![
            OwnedKeyValue {
                key: "service.name".to_owned(),
                value: otel_ctx_reader::process::OwnedValue::String(
                    "checkout <&> \"svc\"".to_owned(),
                ),
            },
            OwnedKeyValue {
                key: "service.version".to_owned(),
                value: otel_ctx_reader::process::OwnedValue::String("1.2".to_owned()),
            },
        ],
        period_ns: 10_000_000,
        off_cpu: false,
        start: std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        duration: Duration::from_millis(2500),
        mappings: vec![Mapping {
            path: "/usr/lib/libx.so".to_owned(),
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            build_id: Some("abcd".to_owned()),
            symbolized: true,
            debug_info: true,
            note: None,
            sources: vec![SymbolSource::Module],
        }],
        locations: vec![
            Location {
                mapping: Some(0),
                address: 0x1100,
                symbols: vec![symbol("inlined_fn", Some(3)), symbol("outer_fn", Some(10))],
                unknown: "[unknown] libx.so+0x100".to_owned(),
                kind: FrameKind::Native,
            },
            Location {
                mapping: Some(0),
                address: 0x1200,
                symbols: vec![symbol("main;<b>", None)],
                unknown: "[unknown] libx.so+0x200".to_owned(),
                kind: FrameKind::Native,
            },
            Location {
                mapping: Some(0),
                address: 0x1300,
                symbols: Vec::new(),
                unknown: "[unknown] libx.so+0x300".to_owned(),
                kind: FrameKind::Native,
            },
            Location {
                mapping: None,
                address: 0x7fff_0000,
                symbols: Vec::new(),
                unknown: "[unknown] 0x7fff0000".to_owned(),
                kind: FrameKind::Native,
            },
        ],
        stacks: vec![vec![0, 1], vec![2, 3]],
        label_sets: vec![
            labels(
                true,
                &[
                    ids[0],
                    ids[1],
                    ("http.route", "/cart"),
                    ("thread.id", "7"),
                    ("thread.name", "w"),
                ],
            ),
            labels(false, &[("thread.id", "8"), ("thread.name", "main")]),
            labels(
                true,
                &[ids[0], ids[1], ("thread.id", "7"), ("thread.name", "w")],
            ),
        ],
        entries: vec![
            Entry {
                stack: Some(0),
                labels: 0,
                samples: 3,
                nanos: 30_000_000,
                off_cpu_nanos: 0,
            },
            Entry {
                stack: Some(1),
                labels: 1,
                samples: 2,
                nanos: 20_000_000,
                off_cpu_nanos: 0,
            },
            Entry {
                stack: Some(0),
                labels: 2,
                samples: 1,
                nanos: 10_000_000,
                off_cpu_nanos: 0,
            },
            Entry {
                stack: None,
                labels: 1,
                samples: 4,
                nanos: 40_000_000,
                off_cpu_nanos: 0,
            },
        ],
        stats: Stats::default(),
    }
}
