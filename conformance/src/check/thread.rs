//! The thread-context rules (OTEP 4947): the `otel_thread_ctx_v1` symbol, its access
//! model, and every record the threads have attached, sampled a few times over the window.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use object::elf;
use otel_ctx_codec::attrs::AttrsIter;
use otel_ctx_codec::record::{MAX_RECORD_SIZE, RECORD_ALIGN};
use otel_ctx_codec::threadlocal::{SCHEMA_GO_PPROF_LABELS_V1, TLS_SYMBOL};

use super::process::{Content, KeyMapLen, Presence, Summary, TLS_SCHEMAS};
use super::rules::RuleId;
use super::verdict::{plural, Status, Verdicts};
use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::procfs::thread_ids;
use otel_ctx_reader::thread::tls::{
    defining_module, loaded_modules, read_slot, resolve, ElfCache, LoadedModule, SlotState,
    StoppedThread, ThreadRecord,
};
use otel_ctx_reader::thread::tls::{
    AccessModel, Libc, PtraceError, Resolution, SymbolTable, TlsError,
};
use otel_ctx_reader::thread::DEFAULT_MAX_RECORD_SIZE;
use otel_ctx_reader::{Error, ProcessMaps, SampleError};

/// What one sample of one thread found.
enum Sample {
    /// NULL slot, or no TLS block for the module yet.
    NoContext,
    /// The slot points at a record whose `valid` is not 1.
    Invalid { address: u64, valid: u8 },
    /// A valid record.
    Record(ThreadRecord),
    /// The slot points at an odd address.
    Misaligned(u64),
    /// The slot points at memory the process has not mapped.
    Unreadable { address: u64, what: &'static str },
    /// The thread exited meanwhile.
    Gone,
    /// ptrace was refused.
    Denied(String),
    /// Anything else went wrong on the checker's side (the slot itself unreadable, a DTV
    /// that cannot be followed, ...).
    Error(String),
}

/// How often a rule held over the samples, and the first counter-example.
#[derive(Debug, Default)]
struct Tally {
    checked: usize,
    bad: usize,
    first: Option<String>,
}

impl Tally {
    fn ok(&mut self) {
        self.checked += 1;
    }

    fn bad(&mut self, observed: impl FnOnce() -> String) {
        self.checked += 1;
        self.bad += 1;
        if self.first.is_none() {
            self.first = Some(observed());
        }
    }
}

/// The tallies of the per-sample rules.
#[derive(Debug, Default)]
struct Tallies {
    readable: Tally,
    aligned: Tally,
    valid: Tally,
    size: Tally,
    complete: Tally,
    key_index: Tally,
    utf8: Tally,
    ids: Tally,
    trace_flags: Tally,
    /// Records whose key indexes could not be judged (no usable key map).
    key_index_unknown: usize,
}

/// The thread-context half of a check.
pub(super) struct ThreadSide {
    pid: u32,
    memory: ProcessMemory,
    /// Analyses of the modules' ELF files, kept between looks.
    cache: ElfCache,
    /// The module that defines the symbol (as a reader would choose it).
    defining: Option<LoadedModule>,
    resolution: Option<Result<Resolution, TlsError>>,
    tallies: Tallies,
    samples: usize,
    threads: BTreeSet<u32>,
    ptrace_denied: Option<String>,
    first_error: Option<String>,
    /// The modules the analysis left out, as `path: reason`.
    skipped: Vec<String>,
    /// The main executable's path.
    main: Option<String>,
    /// When the modules may be listed again while no module defines the symbol.
    next_module_look: Instant,
}

/// How often, at most, a check whose process has no module defining the symbol lists
/// the modules again.
const MODULE_LOOK_INTERVAL: Duration = Duration::from_millis(250);

impl ThreadSide {
    /// Finds the module that defines `otel_thread_ctx_v1` among the modules of `maps`
    /// (the pass over `/proc/<pid>/maps` the process side made) and locates the slot.
    pub(super) fn open(maps: &ProcessMaps) -> Self {
        let mut side = Self {
            pid: maps.pid,
            memory: ProcessMemory::new(maps.pid, ReadMethod::Auto),
            cache: ElfCache::new(),
            defining: None,
            resolution: None,
            skipped: Vec::new(),
            main: None,
            next_module_look: Instant::now() + MODULE_LOOK_INTERVAL,
            tallies: Tallies::default(),
            samples: 0,
            threads: BTreeSet::new(),
            ptrace_denied: None,
            first_error: None,
        };
        side.find_symbol(maps);
        side
    }

    /// Looks for the defining module among the loaded ones, and resolves the slot.
    fn find_symbol(&mut self, maps: &ProcessMaps) {
        let modules = loaded_modules(maps, &mut self.cache);
        self.skipped = modules
            .skipped
            .iter()
            .map(|skipped| skipped.to_string())
            .collect();
        let modules = modules.loaded;
        self.main = modules.iter().find(|m| m.is_main).map(|m| m.path.clone());
        self.defining = defining_module(&modules).cloned();
        self.resolution = self.defining.as_ref().map(|_| {
            let libc = Libc::of_modules(&modules);
            resolve(&modules, libc, &self.memory)
        });
    }

    /// The modules left out of the analysis, and why (`path: reason`).
    pub(super) fn skipped_modules(&self) -> &[String] {
        &self.skipped
    }

    /// Samples every thread once; `key_map` gives the key map's length (`true`: read the
    /// process context again first).
    pub(super) fn sample_round(
        &mut self,
        key_map: &mut dyn FnMut(bool) -> KeyMapLen,
    ) -> Result<(), Error> {
        if self.defining.is_none() && Instant::now() >= self.next_module_look {
            // A library that defines the variable may be loaded after the process context
            // is published (a runtime that loads its native agent late). Reading the maps
            // takes the target's mmap lock: at most once per interval.
            self.next_module_look = Instant::now() + MODULE_LOOK_INTERVAL;
            let pid = self.pid;
            let maps = ProcessMaps::read(pid)
                .map_err(|e| Error::from_io(pid, format!("read /proc/{pid}/maps"), e))?;
            self.find_symbol(&maps);
        }
        let Some(Ok(resolution)) = &self.resolution else {
            return Ok(());
        };
        let resolution = resolution.clone();
        for tid in thread_ids(self.pid)? {
            let sample = self.sample(tid, &resolution);
            if !matches!(sample, Sample::Gone) {
                self.samples += 1;
                self.threads.insert(tid);
            }
            self.judge_sample(tid, sample, key_map);
        }
        Ok(())
    }

    /// Stops thread `tid`, follows its slot, lets it go.
    fn sample(&self, tid: u32, resolution: &Resolution) -> Sample {
        let stopped = match StoppedThread::stop(tid) {
            Ok(stopped) => stopped,
            Err(PtraceError::Gone) => return Sample::Gone,
            Err(e @ (PtraceError::Denied { .. } | PtraceError::Traced { .. })) => {
                return Sample::Denied(e.to_string())
            }
            Err(e) => return Sample::Error(e.to_string()),
        };
        let tp = match stopped.thread_pointer() {
            Ok(tp) => tp,
            Err(PtraceError::Gone) => return Sample::Gone,
            Err(e) => return Sample::Error(e.to_string()),
        };
        let slot = match resolution.slot_address(tp, &self.memory) {
            Ok(Some(slot)) => slot,
            Ok(None) => return Sample::NoContext,
            Err(e) => return Sample::Error(e.to_string()),
        };
        // The thread stays stopped until `stopped` is dropped, after the copies.
        match read_slot(slot, &self.memory, DEFAULT_MAX_RECORD_SIZE) {
            Ok(SlotState::NoTlsBlock | SlotState::Null) => Sample::NoContext,
            Ok(SlotState::Invalid { address, valid }) => Sample::Invalid { address, valid },
            Ok(SlotState::Record(record)) => Sample::Record(record),
            Err(SampleError::Misaligned { address }) => Sample::Misaligned(address),
            // The slot itself: the checker computed a wrong address, not the writer's fault.
            Err(SampleError::Memory { address, .. }) if address == slot => Sample::Error(format!(
                "thread {tid}: the slot address {slot:#x} computed from the thread pointer cannot be read"
            )),
            // The process is exiting: its memory is going away under every pointer.
            Err(SampleError::Memory { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Sample::Gone
            }
            Err(SampleError::Memory { what, address, .. }) => {
                Sample::Unreadable { address, what }
            }
            Err(e) => Sample::Error(e.to_string()),
        }
    }

    fn label(&self, tid: u32) -> String {
        label(self.pid, tid)
    }

    fn judge_sample(
        &mut self,
        tid: u32,
        sample: Sample,
        key_map: &mut dyn FnMut(bool) -> KeyMapLen,
    ) {
        let t = &mut self.tallies;
        match sample {
            Sample::NoContext | Sample::Gone => {}
            Sample::Denied(e) => {
                self.ptrace_denied.get_or_insert(e);
            }
            Sample::Error(e) => {
                self.first_error.get_or_insert(e);
            }
            Sample::Misaligned(address) => {
                let who = self.label(tid);
                self.tallies.aligned.bad(|| {
                    format!("{who}: the slot points at {address:#x}, not {RECORD_ALIGN}-aligned")
                });
            }
            Sample::Unreadable { address, what } => {
                let who = self.label(tid);
                self.tallies.readable.bad(|| {
                    format!(
                        "{who}: the slot points at {address:#x}, but {what} there is not mapped \
                         (a freed or never-initialised record?)"
                    )
                });
            }
            Sample::Invalid { address, valid } => {
                t.readable.ok();
                t.aligned.ok();
                if valid == 0 {
                    t.valid.ok();
                } else {
                    let who = self.label(tid);
                    self.tallies.valid.bad(|| {
                        format!(
                            "{who}: valid = {valid} in the record at {address:#x}; only 0 and 1 \
                             are defined (readers ignore the record)"
                        )
                    });
                }
            }
            Sample::Record(record) => {
                t.readable.ok();
                t.aligned.ok();
                t.valid.ok();
                let pid = self.pid;
                let who = || label(pid, tid);
                judge_record(&mut self.tallies, &who, &record, key_map);
            }
        }
    }

    /// Judges every rule of this side into `v`.
    pub(super) fn judge(&self, v: &mut Verdicts, process: Summary<'_>) {
        self.judge_symbol(v, process);
        self.judge_reference_data(v, process);
        self.judge_samples(v);
    }

    fn judge_symbol(&self, v: &mut Verdicts, process: Summary<'_>) {
        let symbol_rules = [
            RuleId::TcSymbolDynsym,
            RuleId::TcSymbolType,
            RuleId::TcSymbolSize,
            RuleId::TcSymbolBinding,
            RuleId::TcAccessModel,
        ];
        let Some(module) = &self.defining else {
            let schema = process.content.and_then(|c| match &c.schema {
                Presence::Valid(s) if TLS_SCHEMAS.contains(&s.as_str()) => Some(s.as_str()),
                _ => None,
            });
            if let Some(schema) = schema {
                v.fail(
                    RuleId::TcSymbolDynsym,
                    format!(
                        "threadlocal.schema_version is {schema:?}, but no loaded module defines \
                         {TLS_SYMBOL} (in .dynsym or .symtab): readers find no thread contexts"
                    ),
                );
            }
            v.skip_unset(
                symbol_rules,
                "no loaded module defines otel_thread_ctx_v1: no thread contexts (optional)",
            );
            return;
        };
        let Some(symbol) = module.elf.symbol else {
            return;
        };
        let (status, observed) = judge_symbol_table(symbol.table, &module.path);
        v.set(RuleId::TcSymbolDynsym, status, observed);
        if symbol.is_tls() {
            v.pass(RuleId::TcSymbolType, "STT_TLS");
        } else {
            v.fail(
                RuleId::TcSymbolType,
                format!(
                    "{} ({}): not a thread-local variable (declare it __thread / thread_local)",
                    symbol_type_name(symbol.kind),
                    symbol.kind
                ),
            );
        }
        if symbol.size == 8 {
            v.pass(RuleId::TcSymbolSize, "8 bytes");
        } else {
            v.fail(
                RuleId::TcSymbolSize,
                format!("{} bytes: the slot is one 8-byte pointer", symbol.size),
            );
        }
        match symbol.binding {
            elf::STB_GLOBAL => v.pass(RuleId::TcSymbolBinding, "GLOBAL"),
            elf::STB_WEAK => v.warn(
                RuleId::TcSymbolBinding,
                "WEAK: readers find it, but another definition may take its place at link time",
            ),
            elf::STB_LOCAL => v.fail(
                RuleId::TcSymbolBinding,
                "LOCAL: a static variable, which no other module or reader can name",
            ),
            other => v.fail(
                RuleId::TcSymbolBinding,
                format!("binding {other}: not GLOBAL"),
            ),
        }
        self.judge_access_model(v);
    }

    fn judge_access_model(&self, v: &mut Verdicts) {
        let rule = RuleId::TcAccessModel;
        match &self.resolution {
            None => v.skip(rule, "no definition to reach"),
            Some(Ok(r)) => {
                let module = &r.module;
                match r.model {
                    AccessModel::TlsDescStatic | AccessModel::TlsDescDynamic => v.pass(
                        rule,
                        format!("TLSDESC ({}) through {module}", r.model.name()),
                    ),
                    AccessModel::GeneralDynamic => v.warn(
                        rule,
                        format!(
                            "general dynamic (the legacy GNU dialect) through {module}: allowed, \
                             but TLSDESC (-mtls-dialect=gnu2 on x86_64) is faster for the writer"
                        ),
                    ),
                    // The linker relaxes an executable's own accesses: OTEP 4947 puts that
                    // outside the writer's control and makes readers handle it.
                    AccessModel::LocalExec => v.pass(
                        rule,
                        format!(
                            "local exec in the main executable {module}: the linker relaxed the \
                             access (outside the writer's control; readers handle it)"
                        ),
                    ),
                    AccessModel::InitialExec if self.main.as_deref() == Some(module.as_str()) => v
                        .pass(
                            rule,
                            format!(
                                "initial exec in the main executable {module}: the linker relaxed \
                                 the access (outside the writer's control; readers handle it)"
                            ),
                        ),
                    AccessModel::InitialExec => v.warn(
                        rule,
                        format!(
                            "initial exec compiled into the shared object {module} \
                             (-ftls-model=initial-exec): it takes static TLS, which a library \
                             loaded with dlopen may not get; TLSDESC is the recommended model"
                        ),
                    ),
                }
            }
            Some(Err(TlsError::LocalDynamicUnsupported { module })) => v.fail(
                rule,
                format!(
                    "local dynamic in {module}: readers cannot locate the slot; build it with \
                     -mtls-dialect=gnu2 (TLSDESC) and default visibility"
                ),
            ),
            Some(Err(TlsError::NoAccess { module })) => v.fail(
                rule,
                format!(
                    "{module} defines {TLS_SYMBOL}, but no TLSDESC, general-dynamic or \
                     initial-exec relocation reaches it: readers cannot locate the slot"
                ),
            ),
            Some(Err(TlsError::NotTls { .. } | TlsError::NoTlsSegment { .. })) => {
                v.skip(rule, "not a TLS variable (see tc.symbol.type)")
            }
            Some(Err(e)) => v.warn(rule, format!("the slot could not be located: {e}")),
        }
    }

    fn judge_reference_data(&self, v: &mut Verdicts, process: Summary<'_>) {
        let rule = RuleId::TlReferenceData;
        let Some(module) = &self.defining else {
            for rule in [rule, RuleId::TlReferenceDataSchema] {
                v.skip(rule, "the process defines no otel_thread_ctx_v1");
            }
            return;
        };
        let path = &module.path;
        if !process.found {
            v.skip(RuleId::TlReferenceDataSchema, "no process context");
            v.fail(
                rule,
                format!(
                    "{path} defines {TLS_SYMBOL}, but the process publishes no process context: \
                     readers need its threadlocal.* reference data before they read threads"
                ),
            );
            return;
        }
        let (status, observed) = judge_exporter_schema(process.content);
        v.set(RuleId::TlReferenceDataSchema, status, observed);
        let Some(content) = process.content else {
            v.skip(rule, "the process context cannot be decoded");
            return;
        };
        match (&content.schema, &content.key_map) {
            (Presence::Absent, _) => v.fail(
                rule,
                format!(
                    "{path} defines {TLS_SYMBOL}, but the process context has no \
                     threadlocal.schema_version: readers wait for it and never read thread contexts"
                ),
            ),
            (_, Presence::Absent) => v.warn(
                rule,
                "no threadlocal.attribute_key_map: readers cannot name record attributes",
            ),
            (_, _) => v.pass(
                rule,
                "threadlocal.schema_version and threadlocal.attribute_key_map are published",
            ),
        }
    }

    fn judge_samples(&self, v: &mut Verdicts) {
        let t = &self.tallies;
        let skip_reason = match &self.resolution {
            None => "the process defines no otel_thread_ctx_v1".to_owned(),
            Some(Err(_)) => "the slot cannot be located (see tc.access_model)".to_owned(),
            Some(Ok(_)) => match &self.ptrace_denied {
                Some(e) if t.readable.checked + t.aligned.checked == 0 => e.clone(),
                _ => {
                    let mut reason = format!(
                        "no thread had a context attached in {} of {}",
                        plural(self.samples, "sample"),
                        plural(self.threads.len(), "thread")
                    );
                    if let Some(e) = &self.first_error {
                        reason.push_str(&format!(" (first sampling error: {e})"));
                    }
                    reason
                }
            },
        };
        let scope = format!(
            "in {} of {}",
            plural(self.samples, "sample"),
            plural(self.threads.len(), "thread")
        );
        let rows: [(RuleId, &Tally, &str); 9] = [
            (RuleId::TcRecordReadable, &t.readable, "non-NULL slot"),
            (RuleId::TcRecordAligned, &t.aligned, "record pointer"),
            (RuleId::TcRecordValid, &t.valid, "record"),
            (RuleId::TcRecordSize, &t.size, "valid record"),
            (RuleId::TcAttrsComplete, &t.complete, "valid record"),
            (
                RuleId::TcAttrsKeyIndex,
                &t.key_index,
                "record with attributes",
            ),
            (RuleId::TcAttrsUtf8, &t.utf8, "record with attributes"),
            (RuleId::TcRecordIds, &t.ids, "valid record"),
            (
                RuleId::TcRecordTraceFlags,
                &t.trace_flags,
                "record without ids",
            ),
        ];
        for (rule, tally, unit) in rows {
            if tally.bad > 0 {
                let first = tally.first.clone().unwrap_or_default();
                let observed =
                    format!("{first} ({} of {})", tally.bad, plural(tally.checked, unit));
                v.broken(rule, observed);
            } else if tally.checked > 0 {
                v.pass(rule, format!("{} {scope}", plural(tally.checked, unit)));
            } else if rule == RuleId::TcAttrsKeyIndex && t.key_index_unknown > 0 {
                v.skip(
                    rule,
                    "the key map cannot be read (see pc.payload.decodes and tl.key_map.shape)",
                );
            } else if rule == RuleId::TcRecordTraceFlags && t.ids.checked > 0 {
                v.skip(
                    rule,
                    format!(
                        "the rule is about records without trace and span ids, and every \
                         valid record {scope} has ids"
                    ),
                );
            } else if matches!(rule, RuleId::TcAttrsKeyIndex | RuleId::TcAttrsUtf8)
                && t.complete.checked > 0
            {
                v.skip(rule, format!("no record {scope} has attributes"));
            } else {
                v.skip(rule, skip_reason.clone());
            }
        }
    }
}

/// The rules about a valid record's content.
fn judge_record(
    t: &mut Tallies,
    who: &dyn Fn() -> String,
    record: &ThreadRecord,
    key_map: &mut dyn FnMut(bool) -> KeyMapLen,
) {
    let header = &record.header;
    let size = header.record_size();
    if size > MAX_RECORD_SIZE {
        t.size.bad(|| {
            let who = who();
            format!(
                "{who}: {size} bytes (attrs_data_size {}), over the {MAX_RECORD_SIZE} bytes the \
                 eBPF profiler reads",
                header.attrs_data_size()
            )
        });
    } else {
        t.size.ok();
    }

    let trace_zero = header.trace_id == [0; 16];
    let span_zero = header.span_id == [0; 8];
    if trace_zero == span_zero {
        t.ids.ok();
    } else {
        let (set, unset) = if trace_zero {
            ("span_id", "trace_id")
        } else {
            ("trace_id", "span_id")
        };
        t.ids
            .bad(|| format!("{}: {set} is set but {unset} is all zero", who()));
    }
    if trace_zero && span_zero {
        if header.trace_flags == 0 {
            t.trace_flags.ok();
        } else {
            let flags = header.trace_flags;
            t.trace_flags.bad(|| {
                format!(
                    "{}: trace_flags {flags:#04x} without trace and span ids",
                    who()
                )
            });
        }
    }

    let mut entries = AttrsIter::new(&record.attrs_data);
    let mut max_key = None;
    let mut bad_utf8 = None;
    for (key, value) in entries.by_ref() {
        max_key = max_key.max(Some(key));
        if bad_utf8.is_none() && std::str::from_utf8(value).is_err() {
            bad_utf8 = Some((key, value.to_vec()));
        }
    }
    let rest = entries.remainder();
    if rest.is_empty() {
        t.complete.ok();
    } else {
        t.complete.bad(|| {
            let who = who();
            let shown = &rest[..rest.len().min(4)];
            format!(
                "{who}: attrs-data ({} bytes) ends in an incomplete entry of {} bytes \
                 (starting {shown:02x?}); readers stop there",
                record.attrs_data.len(),
                rest.len()
            )
        });
    }
    let Some(max_key) = max_key else {
        return;
    };
    match bad_utf8 {
        None => t.utf8.ok(),
        Some((key, value)) => t.utf8.bad(|| {
            let who = who();
            let shown = &value[..value.len().min(8)];
            format!("{who}: the value of key index {key} is not UTF-8 (bytes {shown:02x?})")
        }),
    }
    let inside = |len: KeyMapLen| matches!(len, KeyMapLen::Known(n) if usize::from(max_key) < n);
    if inside(key_map(false)) {
        t.key_index.ok();
        return;
    }
    // The key map may have grown since it was read (OTEP 4947: refresh before ignoring).
    match key_map(true) {
        len if inside(len) => t.key_index.ok(),
        KeyMapLen::Known(n) => t.key_index.bad(|| {
            let who = who();
            format!(
                "{who}: key index {max_key}, but threadlocal.attribute_key_map has {} \
                 (readers ignore the entry)",
                plural(n, "name")
            )
        }),
        KeyMapLen::Absent => t.key_index.bad(|| {
            let who = who();
            format!(
                "{who}: key index {max_key}, but the process context has no \
                 threadlocal.attribute_key_map (readers ignore every entry)"
            )
        }),
        KeyMapLen::Unknown => t.key_index_unknown += 1,
    }
}

/// Judges the symbol table `otel_thread_ctx_v1` was found in. OTEP 4947 requires it in
/// `.dynsym`, and readers that follow it look nowhere else: a symbol only in `.symtab`
/// (found by this checker and our reader, which also read `.symtab`) gives other readers
/// no thread contexts at all.
fn judge_symbol_table(table: SymbolTable, path: &str) -> (Status, String) {
    match table {
        SymbolTable::Dynsym => (Status::Pass, format!("in {path}")),
        SymbolTable::Symtab => (
            Status::Fail,
            format!(
                "only in the .symtab of {path}: readers that follow the spec look in .dynsym \
                 only and find no thread contexts; export it: link with \
                 -Wl,--export-dynamic-symbol={TLS_SYMBOL} (in Rust, call \
                 otel_ctx_export::export_tls_symbol() from build.rs, package otel-ctx-export)"
            ),
        ),
    }
}

/// Judges the schema a process that exports `otel_thread_ctx_v1` announces. Readers
/// trust `threadlocal.schema_version` to tell them where the thread contexts are: with
/// `go_pprof_labels_v1` they read pprof labels and never the records the symbol points
/// at. An unknown schema is `tl.schema_version`'s to judge, a missing one
/// `tl.reference_data`'s.
fn judge_exporter_schema(content: Option<&Content>) -> (Status, String) {
    let Some(content) = content else {
        return (
            Status::Skip,
            "the process context cannot be decoded".to_owned(),
        );
    };
    match &content.schema {
        Presence::Valid(schema) if TLS_SCHEMAS.contains(&schema.as_str()) => {
            (Status::Pass, format!("{schema:?}"))
        }
        Presence::Valid(schema) if schema == SCHEMA_GO_PPROF_LABELS_V1 => (
            Status::Warn,
            format!(
                "{schema:?}, but the process exports {TLS_SYMBOL}: readers that trust the \
                 schema read pprof labels and never the TLS records; announce \
                 tlsdesc_v1_dev (or tls_v1) if the records are the thread contexts"
            ),
        ),
        Presence::Valid(schema) => (
            Status::Skip,
            format!("{schema:?} is not a schema readers know (see tl.schema_version)"),
        ),
        Presence::Absent => (
            Status::Skip,
            "no threadlocal.schema_version (see tl.reference_data)".to_owned(),
        ),
        Presence::Invalid => (
            Status::Skip,
            "threadlocal.schema_version is not a string (see tl.schema_version)".to_owned(),
        ),
    }
}

/// `thread <tid> (<name>)`, as failures name a thread.
fn label(pid: u32, tid: u32) -> String {
    match otel_ctx_reader::procfs::thread_name(pid, tid) {
        name if name.is_empty() => format!("thread {tid}"),
        name => format!("thread {tid} ({name})"),
    }
}

fn symbol_type_name(kind: u8) -> &'static str {
    match kind {
        elf::STT_NOTYPE => "STT_NOTYPE",
        elf::STT_OBJECT => "STT_OBJECT",
        elf::STT_FUNC => "STT_FUNC",
        elf::STT_TLS => "STT_TLS",
        _ => "another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_codec::record::RecordHeader;

    fn record(trace: u8, span: u8, flags: u8, attrs: &[u8]) -> ThreadRecord {
        let mut header = RecordHeader {
            trace_id: [trace; 16],
            span_id: [span; 8],
            valid: 1,
            trace_flags: flags,
            ..RecordHeader::default()
        };
        header.attrs_data_size.set(attrs.len() as u16);
        ThreadRecord {
            address: 0x1000,
            header,
            attrs_data: attrs.to_vec(),
        }
    }

    fn judge(records: &[ThreadRecord], key_map: KeyMapLen) -> (Tallies, usize) {
        let mut t = Tallies::default();
        let mut refreshes = 0;
        let mut lookup = |refresh: bool| {
            refreshes += usize::from(refresh);
            key_map
        };
        for r in records {
            judge_record(&mut t, &|| "thread 7".to_owned(), r, &mut lookup);
        }
        (t, refreshes)
    }

    #[test]
    fn a_good_record_passes_every_rule() {
        let (t, refreshes) = judge(&[record(1, 2, 1, &[0, 2, b'h', b'i'])], KeyMapLen::Known(1));
        for tally in [&t.size, &t.ids, &t.complete, &t.utf8, &t.key_index] {
            assert_eq!((tally.checked, tally.bad), (1, 0));
        }
        // With ids, the trace_flags rule does not apply.
        assert_eq!(t.trace_flags.checked, 0);
        assert_eq!(refreshes, 0);
    }

    #[test]
    fn each_defect_is_caught() {
        let records = [
            record(1, 0, 1, &[]),
            record(0, 0, 1, &[]),
            record(0, 0, 0, &[0, 5, b'a']),
            record(0, 0, 0, &[0, 2, 0xff, 0xfe]),
            record(0, 0, 0, &[9, 1, b'x']),
        ];
        let (t, refreshes) = judge(&records, KeyMapLen::Known(2));
        assert_eq!(t.ids.bad, 1);
        assert!(t.ids.first.as_deref().unwrap().contains("trace_id is set"));
        assert_eq!(t.trace_flags.bad, 1);
        assert_eq!(t.complete.bad, 1);
        assert!(t
            .complete
            .first
            .as_deref()
            .unwrap()
            .contains("incomplete entry of 3 bytes"));
        assert_eq!(t.utf8.bad, 1);
        assert_eq!(t.key_index.bad, 1);
        assert!(t
            .key_index
            .first
            .as_deref()
            .unwrap()
            .contains("key index 9"));
        // Only the out-of-map index made the checker read the key map again.
        assert_eq!(refreshes, 1);
        let big = record(1, 1, 1, &[b'x'; 700]);
        let (t, _) = judge(&[big], KeyMapLen::Known(1));
        assert_eq!(t.size.bad, 1);
    }

    #[test]
    fn a_symbol_only_in_symtab_fails() {
        let (status, observed) = judge_symbol_table(SymbolTable::Dynsym, "/bin/app");
        assert_eq!((status, observed.as_str()), (Status::Pass, "in /bin/app"));
        // Readers that follow OTEP 4947 look in .dynsym only: they find nothing.
        let (status, observed) = judge_symbol_table(SymbolTable::Symtab, "/bin/app");
        assert_eq!(status, Status::Fail, "{observed}");
        assert!(
            observed.contains("-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"),
            "{observed}"
        );
        assert!(observed.contains("otel-ctx-export"), "{observed}");
    }

    #[test]
    fn an_exported_symbol_goes_with_a_tls_schema() {
        let content = |schema: Presence<String>| Content {
            schema,
            key_map: Presence::Absent,
        };
        let judge = |schema| judge_exporter_schema(Some(&content(schema))).0;
        for schema in TLS_SCHEMAS {
            assert_eq!(judge(Presence::Valid(schema.into())), Status::Pass);
        }
        let (status, observed) = judge_exporter_schema(Some(&content(Presence::Valid(
            SCHEMA_GO_PPROF_LABELS_V1.into(),
        ))));
        assert_eq!(status, Status::Warn, "{observed}");
        assert!(observed.contains("never the TLS records"), "{observed}");
        assert_eq!(judge(Presence::Valid("tls_v9".into())), Status::Skip);
        assert_eq!(judge(Presence::Absent), Status::Skip);
        assert_eq!(judge(Presence::Invalid), Status::Skip);
        assert_eq!(judge_exporter_schema(None).0, Status::Skip);
    }

    #[test]
    fn key_indexes_without_a_key_map() {
        let (t, _) = judge(&[record(1, 1, 1, &[0, 1, b'a'])], KeyMapLen::Absent);
        assert_eq!(t.key_index.bad, 1);
        let (t, _) = judge(&[record(1, 1, 1, &[0, 1, b'a'])], KeyMapLen::Unknown);
        assert_eq!((t.key_index.checked, t.key_index_unknown), (0, 1));
    }
}
