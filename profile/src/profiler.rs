//! The profiler of one process: samples in (unwound, symbolized, aggregated), profile
//! out.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Instant, SystemTime};

use otel_ctx_reader::maps::{FileRange, MappedFile};
use otel_ctx_reader::process::OwnedKeyValue;
use otel_ctx_reader::{ProcessMaps, Snapshot, UserRegisters};
use otel_ctx_sampler::{PythonSample, Sample};

use crate::aggregate::{Aggregate, StackFrame, NO_MAPPING};
use crate::module::{LoadOptions, ModuleCache, ModuleData, SkipReason};
use crate::python::PythonTable;
use crate::unwind::{Frame, Walker};
use crate::{ProfileOptions, SampleOutcome, SkippedModule, Stats, Symbol, UnwindEnd};

/// The path the vDSO's mapping is shown with.
const VDSO_PATH: &str = "[vdso]";

/// A file mapping frames can refer to; kept for the whole profile even when the file
/// is unmapped, so that its frames can still be named.
#[derive(Debug)]
pub(crate) struct MappingRecord {
    pub(crate) path: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    pub(crate) bias: u64,
    pub(crate) module: Result<Rc<ModuleData>, SkipReason>,
}

/// Samples in, profile out: the unwinder, the symbolizer and the aggregate of one
/// process.
#[derive(Debug)]
pub struct Profiler {
    pub(crate) pid: u32,
    pub(crate) options: ProfileOptions,
    cache: ModuleCache,
    walker: Walker,
    /// Modules by device and inode, read once per process.
    known: HashMap<(u64, u64), Result<Rc<ModuleData>, SkipReason>>,
    pub(crate) mappings: Vec<MappingRecord>,
    mapping_ids: HashMap<(u64, u64, u64, u64), u32>,
    /// Executable ranges now mapped, by start: (start, end, mapping id).
    ranges: Vec<(u64, u64, u32)>,
    skipped: Vec<SkippedModule>,
    pub(crate) resource: Vec<(String, String)>,
    pub(crate) resource_attributes: Vec<OwnedKeyValue>,
    pub(crate) service_name: Option<String>,
    /// The process's pid in its own pid namespace, which names its perf map.
    pub(crate) nspid: u32,
    pub(crate) aggregate: Aggregate,
    stats: Stats,
    pub(crate) python: PythonTable,
    frames: Vec<Frame>,
    stack: Vec<StackFrame>,
    pub(crate) started: SystemTime,
    pub(crate) started_at: Instant,
}

impl Profiler {
    /// A profiler of process `pid`, with a module cache of its own.
    pub fn new(pid: u32, options: ProfileOptions) -> Self {
        Self::with_cache(pid, options, ModuleCache::default())
    }

    /// A profiler of process `pid` that shares `cache` (with other profilers of this
    /// thread).
    pub fn with_cache(pid: u32, options: ProfileOptions, cache: ModuleCache) -> Self {
        Self {
            pid,
            walker: Walker::new(options.arch),
            aggregate: Aggregate::new(options.limits),
            options,
            cache,
            known: HashMap::new(),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            ranges: Vec::new(),
            skipped: Vec::new(),
            resource: Vec::new(),
            resource_attributes: Vec::new(),
            service_name: None,
            // In its own pid namespace: a process in a container names its perf map with
            // that pid.
            nspid: otel_ctx_reader::procfs::status(&pid.to_string())
                .ok()
                .and_then(|status| status.ns_pid())
                .unwrap_or(pid),
            stats: Stats::default(),
            python: PythonTable::default(),
            frames: Vec::new(),
            stack: Vec::new(),
            started: SystemTime::now(),
            started_at: Instant::now(),
        }
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// The options.
    pub const fn options(&self) -> &ProfileOptions {
        &self.options
    }

    /// The module cache (a handle to give another profiler of this thread).
    pub fn cache(&self) -> &ModuleCache {
        &self.cache
    }

    /// Takes the process's modules from a pass over its maps: new executable files are
    /// read (or found in the cache), files no longer mapped stop being unwound
    /// (their frames already counted keep their names). Call it before the first
    /// sample and again on evidence ([`SampleOutcome::outside_modules`]). A file that
    /// could not be read is not tried again for this process.
    pub fn update_maps(&mut self, maps: &ProcessMaps) {
        let load = LoadOptions {
            budget: self.options.module_budget,
            debug_info: self.options.debug_info,
        };
        self.walker.clear();
        self.ranges.clear();
        self.skipped.clear();
        let vdso = maps.vdso.as_ref().map(|range| MappedFile {
            path: VDSO_PATH.to_owned(),
            deleted: false,
            dev: 0,
            inode: 0,
            ranges: vec![FileRange {
                start: range.start,
                end: range.end,
                offset: 0,
                perms: *b"r-xp",
            }],
        });
        for file in maps
            .files
            .iter()
            .filter(|f| f.is_executable())
            .chain(vdso.as_ref())
        {
            let known = self.known.entry((file.dev, file.inode)).or_insert_with(|| {
                match file.path == VDSO_PATH && file.dev == 0 {
                    true => self.cache.vdso(maps.pid, file),
                    false => self.cache.module(maps.pid, file, &load),
                }
            });
            let (module, bias) = match &*known {
                Ok(module) if module.arch != self.options.arch => (
                    Err(SkipReason::new(format!(
                        "built for {}, the profile unwinds {}",
                        module.arch.name(),
                        self.options.arch.name()
                    ))),
                    0,
                ),
                Ok(module) => match module.bias(&file.ranges) {
                    Some(bias) => (Ok(module.clone()), bias),
                    None => (
                        Err(SkipReason::new(
                            "no executable mapping lines up with its program headers",
                        )),
                        0,
                    ),
                },
                Err(reason) => (Err(reason.clone()), 0),
            };
            if let Err(reason) = &module {
                self.skipped.push(SkippedModule {
                    path: file.path.clone(),
                    reason: reason.text.clone(),
                });
            }
            self.add_ranges(file, &module, bias);
            if let Ok(data) = &module {
                let executable = file.ranges.iter().filter(|r| r.is_executable());
                let start = executable.clone().map(|r| r.start).min().unwrap_or(0);
                let end = executable.map(|r| r.end).max().unwrap_or(0);
                let sections = self.options.cfi.then_some(&data.unwind);
                self.walker
                    .add_module(&file.path, start..end, bias, sections);
            }
        }
        self.ranges.sort_unstable();
    }

    fn add_ranges(
        &mut self,
        file: &MappedFile,
        module: &Result<Rc<ModuleData>, SkipReason>,
        bias: u64,
    ) {
        for range in file.ranges.iter().filter(|r| r.is_executable()) {
            let key = (file.dev, file.inode, range.start, range.offset);
            let id = match self.mapping_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let Ok(id) = u32::try_from(self.mappings.len()) else {
                        continue;
                    };
                    if id == NO_MAPPING {
                        continue;
                    }
                    self.mappings.push(MappingRecord {
                        path: file.path.clone(),
                        start: range.start,
                        end: range.end,
                        offset: range.offset,
                        bias,
                        module: module.clone(),
                    });
                    self.mapping_ids.insert(key, id);
                    id
                }
            };
            self.ranges.push((range.start, range.end, id));
        }
    }

    /// Takes the process context's resource (and `service.name`), for the profile's
    /// comments and labels; `None` when the process publishes none.
    pub fn set_process_context(&mut self, snapshot: Option<&Snapshot>) {
        self.resource.clear();
        self.resource_attributes.clear();
        self.service_name = None;
        if let Some(snapshot) = snapshot {
            self.resource_attributes = snapshot.context.resource.clone();
            self.service_name = snapshot.context.service_name().map(str::to_owned);
            self.resource = snapshot
                .context
                .resource
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.to_string()))
                .collect();
        }
    }

    /// The mapping that holds `address` now.
    fn mapping_at(&self, address: u64) -> u32 {
        let after = self.ranges.partition_point(|r| r.0 <= address);
        match after.checked_sub(1).map(|at| self.ranges[at]) {
            Some((_, end, id)) if address < end => id,
            _ => NO_MAPPING,
        }
    }

    /// Unwinds `registers` over `stack` into `frames` (the leaf first), without
    /// counting anything: the first layer of [`add`](Self::add).
    pub fn unwind(
        &mut self,
        registers: &UserRegisters,
        stack: &[u8],
        frames: &mut Vec<Frame>,
    ) -> UnwindEnd {
        self.walker
            .walk(registers, stack, self.options.max_depth, frames)
    }

    /// The functions `frame` is in, innermost first (empty when nothing names it), as
    /// the modules mapped now say.
    pub fn symbolize(&self, frame: Frame) -> Rc<[Symbol]> {
        let mapping = self.mapping_at(frame.lookup_address());
        self.symbolize_in(mapping, frame)
    }

    pub(crate) fn symbolize_in(&self, mapping: u32, frame: Frame) -> Rc<[Symbol]> {
        match self.mappings.get(mapping as usize) {
            Some(MappingRecord {
                module: Ok(module),
                bias,
                ..
            }) => {
                let svma = frame.lookup_address().wrapping_sub(*bias);
                module.symbolize(svma, self.options.lines)
            }
            _ => Rc::from([]),
        }
    }

    /// Unwinds a sample and counts it under its stack and labels. A sample of a Python
    /// process ([`Sample::python`](otel_ctx_sampler::Sample::python)) has its Python
    /// frames spliced into the native stack where the interpreter's evaluation loop runs
    /// them ([`ProfileOptions::native`] `false`: they alone), each new one named through
    /// the names the sampler read with the sample (nothing is read from the target here);
    /// a walk that failed is counted by its reason ([`Stats::python`]), and the sample
    /// keeps its native frames. A sample without registers (its thread could not be
    /// stopped, or no stack was copied) has nothing to unwind and is not counted.
    pub fn add(&mut self, sample: &Sample<'_>) -> SampleOutcome {
        let Some(registers) = sample.registers else {
            return SampleOutcome {
                kept: false,
                frames: 0,
                end: None,
                outside_modules: false,
            };
        };
        self.stats.samples += 1;
        if !self.options.filter.keeps(sample) {
            self.stats.filtered += 1;
            return SampleOutcome {
                kept: false,
                frames: 0,
                end: None,
                outside_modules: false,
            };
        }
        let end = self.walker.walk(
            &registers,
            sample.stack,
            self.options.max_depth,
            &mut self.frames,
        );
        *self.stats.unwind_ends.entry(end).or_default() += 1;
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend(self.frames.iter().map(|&frame| StackFrame {
            mapping: self.mapping_at(frame.lookup_address()),
            frame,
        }));
        let outside_modules = stack.first().is_some_and(|f| f.mapping == NO_MAPPING);
        if outside_modules {
            self.stats.outside_modules += 1;
        }
        match &sample.python {
            Some(PythonSample {
                frames: Ok(frames),
                names,
                ..
            }) => {
                let sps = self.walker.stack_pointers();
                let mappings = &self.mappings;
                let interpreter = |mapping: u32| {
                    mappings
                        .get(mapping as usize)
                        .is_some_and(|m| m.path == names.module())
                };
                self.python
                    .splice(&mut stack, sps, frames, names, &self.options, &interpreter);
            }
            Some(PythonSample { frames: Err(e), .. }) => self.python.failed(e),
            None => {}
        }
        self.label(sample);
        let weight = sample.cpu_ns(self.options.period_ns);
        self.aggregate.add(&stack, weight, sample.off_cpu_ns);
        let frames = stack.len();
        self.stack = stack;
        SampleOutcome {
            kept: true,
            frames,
            end: Some(end),
            outside_modules,
        }
    }

    /// Builds the sample's label set in the aggregate.
    fn label(&mut self, sample: &Sample<'_>) {
        let a = &mut self.aggregate;
        let context = sample.context();
        a.begin_labels(context.is_some());
        match context {
            Some(context) => {
                self.stats.with_context += 1;
                let mut buf = [0u8; 32];
                a.label("trace_id", hex_into(&context.trace_id(), &mut buf));
                a.label("span_id", hex_into(&context.span_id(), &mut buf));
                for (key, value) in context.attributes() {
                    a.label(key, &String::from_utf8_lossy(value));
                }
            }
            None => self.stats.without_context += 1,
        }
        let mut digits = [0u8; 10];
        a.label("thread.id", decimal_into(sample.tid, &mut digits));
        a.label("thread.name", sample.display_thread_name());
        if let Some(nr) = sample.syscall {
            match otel_ctx_sampler::syscall_name(nr) {
                Some(name) => a.label(OFF_CPU_SYSCALL, name),
                None => a.label(OFF_CPU_SYSCALL, decimal_into(u32::from(nr), &mut digits)),
            }
        }
    }

    /// What was sampled so far, and how it went.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        stats.distinct_stacks = self.aggregate.stack_count();
        stats.entries = self.aggregate.entry_count();
        stats.overflow_samples = self.aggregate.overflow.samples;
        stats.overflow_labels = self.aggregate.overflow_labels;
        stats.modules = self.known.values().filter(|m| m.is_ok()).count();
        stats.skipped_modules = self.skipped.clone();
        stats.python = self.python.stats.clone();
        stats
    }

    /// Forgets the samples (not the modules), and starts the profile's clock again: for
    /// a profile per export interval.
    pub fn reset(&mut self) {
        self.aggregate = Aggregate::new(self.options.limits);
        self.stats = Stats::default();
        self.python = PythonTable::default();
        self.started = SystemTime::now();
        self.started_at = Instant::now();
    }
}

/// The label of an off-CPU sample that names the system call its thread waited in
/// (`futex`, `read`; its number where the call has no name here).
pub const OFF_CPU_SYSCALL: &str = "off_cpu.syscall";

/// Lowercase hex of `bytes` (at most 16 of them), written into `buf` without
/// allocating.
fn hex_into<'b>(bytes: &[u8], buf: &'b mut [u8; 32]) -> &'b str {
    otel_ctx_codec::hex::encode_into(bytes, buf)
}

/// `n` in decimal, written into `buf` without allocating.
fn decimal_into(n: u32, buf: &mut [u8; 10]) -> &str {
    use std::io::Write;
    let mut rest = &mut buf[..];
    // Ten digits hold any u32: the write cannot run out of room.
    let _ = write!(rest, "{n}");
    let len = 10 - rest.len();
    std::str::from_utf8(&buf[..len]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{hex, Filter, DEFAULT_PERIOD_NS};
    use otel_ctx_codec::record::RecordHeader;
    use otel_ctx_reader::process::OwnedValue;
    use otel_ctx_reader::ThreadContextRef;

    #[test]
    fn small_formatters() {
        let mut buf = [0u8; 32];
        assert_eq!(hex_into(&[0x00, 0xab, 0x10], &mut buf), "00ab10");
        assert_eq!(hex(&[0xff, 0x01]), "ff01");
        let mut digits = [0u8; 10];
        assert_eq!(decimal_into(0, &mut digits), "0");
        assert_eq!(decimal_into(u32::MAX, &mut digits), "4294967295");
        assert_eq!(
            OwnedValue::Array(vec![OwnedValue::Int(1), OwnedValue::Bool(true)]).to_string(),
            "[1, true]"
        );
    }

    /// A record with these ids whose one attribute, key 0 of `key_map`, is `value`.
    fn context<'a>(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        key_map: &'a [String],
        attrs_data: &'a mut Vec<u8>,
        value: &[u8],
    ) -> ThreadContextRef<'a> {
        attrs_data.clear();
        attrs_data.extend([0, value.len() as u8]);
        attrs_data.extend_from_slice(value);
        let header = RecordHeader {
            trace_id,
            span_id,
            valid: 1,
            trace_flags: 1,
            attrs_data_size: (attrs_data.len() as u16).into(),
        };
        ThreadContextRef::new(header, 0, attrs_data, key_map)
    }

    #[test]
    fn filter_keeps_what_it_says() {
        let key_map = ["http.route".to_owned()];
        let mut attrs = Vec::new();
        let context = context([1; 16], [2; 8], &key_map, &mut attrs, b"/cart");
        let bare = Sample::new(1, 7, "w", Some(UserRegisters::default()), &[]);
        let with = bare.clone().with_context(Some(context));
        assert!(Filter::default().keeps(&bare));
        assert!(!Filter::default().with_require_context(true).keeps(&bare));
        assert!(Filter::default().with_require_context(true).keeps(&with));
        let cart = Filter::default().with_attribute("http.route", "/cart");
        assert!(cart.keeps(&with));
        assert!(!cart.keeps(&bare));
        assert!(!Filter::default()
            .with_attribute("http.route", "/search")
            .keeps(&with));
        assert!(!Filter::default().with_threads([8]).keeps(&with));
        assert!(Filter::default().with_threads([7]).keeps(&with));
        // One trace: its samples only, none without a context.
        assert!(Filter::default().with_trace_id([1; 16]).keeps(&with));
        assert!(!Filter::default().with_trace_id([3; 16]).keeps(&with));
        assert!(!Filter::default().with_trace_id([1; 16]).keeps(&bare));
    }

    #[test]
    fn filtered_samples_are_counted_not_walked() {
        let filter = Filter::default().with_attribute("http.route", "/cart");
        let mut profiler = Profiler::new(1, ProfileOptions::default().with_filter(filter));
        let key_map = ["http.route".to_owned()];
        let (mut cart_data, mut search_data) = (Vec::new(), Vec::new());
        let cart = context([0xab; 16], [0xcd; 8], &key_map, &mut cart_data, b"/cart");
        let search = context(
            [0xab; 16],
            [0xcd; 8],
            &key_map,
            &mut search_data,
            b"/search",
        );
        // A frame pointer to follow, and no stack copy to follow it in.
        let registers = UserRegisters {
            ip: 0,
            sp: 0x1000,
            fp: 0x1000,
            lr: 0,
        };
        let bare = Sample::new(1, 3, "t", Some(registers), &[]);
        let dropped = profiler.add(&bare.clone().with_context(Some(search)));
        assert!(!dropped.kept && dropped.end.is_none());
        profiler.add(&bare);
        let kept = profiler.add(&bare.with_context(Some(cart)));
        assert_eq!(kept.end, Some(UnwindEnd::NoStack));
        let profile = profiler.profile();
        let stats = &profile.stats;
        assert_eq!(
            (stats.samples, stats.filtered, stats.with_context),
            (3, 2, 1)
        );
        assert_eq!(stats.unwind_failures(), 1);
        let labels = &profile.label_sets[profile.entries[0].labels];
        assert_eq!(
            labels.get("trace_id"),
            Some("abababababababababababababababab")
        );
        assert_eq!(labels.get("span_id"), Some("cdcdcdcdcdcdcdcd"));
        assert_eq!(labels.get("thread.id"), Some("3"));
        assert_eq!(profile.locations[0].unknown, "[unknown] 0x0");
        assert_eq!(profile.entries[0].nanos, DEFAULT_PERIOD_NS);
    }
}
