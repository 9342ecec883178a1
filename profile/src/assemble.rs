//! The profile of a [`Profiler`]'s aggregate: every distinct frame symbolized (a
//! module's names, a perf map's for code in no module), every `[unknown]` frame counted
//! by its cause, every label spelled out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use crate::aggregate::StackFrame;
use crate::profiler::{MappingRecord, Profiler};
use crate::python::PYTHON_MAPPING;
use crate::source::perf_map::PerfMap;
use crate::source::{SymbolProblem, UnknownCause};
use crate::{hex, DebugInfoStats, Entry, FrameKind, LabelSet, Location, Mapping, Profile};

/// What symbolizing a profile's frames found, beside the names.
#[derive(Default)]
struct Symbolizing {
    /// The perf map, read at the first frame in no module (`None` inside: it has none).
    perf_map: Option<Option<PerfMap>>,
    unknown: BTreeMap<UnknownCause, u64>,
}

impl Profiler {
    /// The profile so far: every distinct frame symbolized, every label spelled out.
    pub fn profile(&self) -> Profile {
        let mut mappings = Vec::new();
        let mut mapping_index: HashMap<u32, usize> = HashMap::new();
        let mut locations = Vec::new();
        let mut location_index: HashMap<StackFrame, usize> = HashMap::new();
        let mut stacks = Vec::new();
        let mut stack_index: HashMap<u32, usize> = HashMap::new();
        let mut label_sets = Vec::new();
        let mut label_index: HashMap<u32, usize> = HashMap::new();
        let mut entries = Vec::new();
        let mut found = Symbolizing::default();
        for ((stack_id, labels_id), counts) in self.aggregate.entries() {
            let stack = match stack_index.get(&stack_id) {
                Some(&at) => at,
                None => {
                    let mut ids = Vec::new();
                    for frame in self.aggregate.stack(stack_id) {
                        let at = match location_index.get(frame) {
                            Some(&at) => at,
                            None => {
                                let mapping = self.profile_mapping(
                                    frame.mapping,
                                    &mut mappings,
                                    &mut mapping_index,
                                );
                                locations
                                    .push(self.location(frame, mapping, &mappings, &mut found));
                                location_index.insert(*frame, locations.len() - 1);
                                locations.len() - 1
                            }
                        };
                        ids.push(at);
                    }
                    stacks.push(ids);
                    stack_index.insert(stack_id, stacks.len() - 1);
                    stacks.len() - 1
                }
            };
            let labels = *label_index.entry(labels_id).or_insert_with(|| {
                label_sets.push(self.label_set(labels_id));
                label_sets.len() - 1
            });
            entries.push(Entry {
                stack: Some(stack),
                labels,
                samples: counts.samples,
                nanos: counts.nanos,
                off_cpu_nanos: counts.off_cpu_nanos,
            });
        }
        if self.aggregate.overflow.samples > 0 {
            label_sets.push(LabelSet {
                has_context: false,
                labels: Vec::new(),
            });
            entries.push(Entry {
                stack: None,
                labels: label_sets.len() - 1,
                samples: self.aggregate.overflow.samples,
                nanos: self.aggregate.overflow.nanos,
                off_cpu_nanos: self.aggregate.overflow.off_cpu_nanos,
            });
        }
        let mut stats = self.stats();
        stats.unknown_frames = found.unknown;
        stats.symbol_problems = self.symbol_problems(&mappings);
        stats.debug_info = self.debug_info(mapping_index.keys());
        if let Some(Some(map)) = found.perf_map {
            if let Some(problem) = &map.stats.problem {
                stats.symbol_problems.push(SymbolProblem {
                    subject: map.stats.path.clone(),
                    problem: problem.clone(),
                    cause: match map.stats.partial {
                        true => UnknownCause::Budget,
                        false => UnknownCause::NoSymbols,
                    },
                });
            }
            stats.perf_map = Some(map.stats);
        }
        Profile {
            pid: self.pid,
            service_name: self.service_name.clone(),
            resource: self.resource.clone(),
            resource_attributes: self.resource_attributes.clone(),
            period_ns: self.options.period_ns,
            off_cpu: self.options.off_cpu,
            start: self.started,
            duration: self.started_at.elapsed(),
            mappings,
            locations,
            stacks,
            label_sets,
            entries,
            stats,
        }
    }

    /// The DWARF of the modules of mappings `ids`, each module once.
    fn debug_info<'a>(&self, ids: impl Iterator<Item = &'a u32>) -> DebugInfoStats {
        let mut seen = HashSet::new();
        let mut out = DebugInfoStats::default();
        for id in ids {
            let Some(Ok(module)) = self.mappings.get(*id as usize).map(|r| &r.module) else {
                continue;
            };
            if !seen.insert(Rc::as_ptr(module)) {
                continue;
            }
            if let Some(dwarf) = &module.names.borrow().dwarf {
                out.modules += 1;
                out.bytes += dwarf.bytes() as u64;
                out.units += dwarf.units();
                out.units_parsed += dwarf.units_parsed();
            }
        }
        out
    }

    fn profile_mapping(
        &self,
        id: u32,
        mappings: &mut Vec<Mapping>,
        index: &mut HashMap<u32, usize>,
    ) -> Option<usize> {
        if let Some(&at) = index.get(&id) {
            return Some(at);
        }
        let record = self.mappings.get(id as usize)?;
        let mut mapping = Mapping {
            path: record.path.clone(),
            start: record.start,
            end: record.end,
            offset: record.offset,
            build_id: None,
            symbolized: false,
            debug_info: false,
            note: None,
            sources: Vec::new(),
        };
        match &record.module {
            Ok(m) => {
                let names = m.names.borrow();
                mapping.build_id = m.build_id.as_deref().map(hex);
                mapping.symbolized = true;
                mapping.debug_info = names.dwarf.is_some();
                mapping.note = names.dwarf_note.clone();
                mapping.sources = names.sources.clone();
            }
            Err(reason) => mapping.note = Some(reason.text.clone()),
        }
        mappings.push(mapping);
        index.insert(id, mappings.len() - 1);
        Some(mappings.len() - 1)
    }

    fn location(
        &self,
        frame: &StackFrame,
        mapping: Option<usize>,
        mappings: &[Mapping],
        found: &mut Symbolizing,
    ) -> Location {
        if frame.mapping == PYTHON_MAPPING {
            return self.python_location(frame.frame.address);
        }
        let address = frame.frame.address;
        let unknown = match mapping.map(|at| &mappings[at]) {
            Some(m) => {
                let offset = address.wrapping_sub(m.start).wrapping_add(m.offset);
                format!("[unknown] {}+{offset:#x}", m.basename())
            }
            None => format!("[unknown] {address:#x}"),
        };
        let mut symbols = self.symbolize_in(frame.mapping, frame.frame).to_vec();
        if symbols.is_empty() {
            let cause = match self.mappings.get(frame.mapping as usize) {
                Some(MappingRecord {
                    module: Ok(module), ..
                }) => module.names.borrow().unknown_cause(),
                Some(MappingRecord {
                    module: Err(reason),
                    ..
                }) if reason.budget => UnknownCause::Budget,
                Some(_) => UnknownCause::NoSymbols,
                None => self.perf_map_symbol(frame, found, &mut symbols),
            };
            if symbols.is_empty() {
                *found.unknown.entry(cause).or_default() += 1;
            }
        }
        Location {
            mapping,
            address,
            symbols,
            unknown,
            kind: FrameKind::Native,
        }
    }

    /// The location of Python frame `index`: its code object's qualified name, file and
    /// first line, and its line with the `lines` option.
    fn python_location(&self, index: u64) -> Location {
        let Some(python) = self.python.location(index) else {
            return Location {
                mapping: None,
                address: 0,
                symbols: Vec::new(),
                unknown: "[unknown python frame]".to_owned(),
                kind: FrameKind::Python { start_line: 0 },
            };
        };
        Location {
            mapping: None,
            address: python.code,
            symbols: vec![crate::Symbol {
                name: python.name.to_string(),
                file: (!python.file.is_empty()).then(|| python.file.to_string()),
                line: python.line,
            }],
            unknown: python.name.to_string(),
            kind: FrameKind::Python {
                start_line: python.start_line,
            },
        }
    }

    /// The name a perf map gives a frame in no module (read at the first such frame),
    /// into `symbols`; the cause it stays unknown for, when none does.
    fn perf_map_symbol(
        &self,
        frame: &StackFrame,
        found: &mut Symbolizing,
        symbols: &mut Vec<crate::Symbol>,
    ) -> UnknownCause {
        let map = found
            .perf_map
            .get_or_insert_with(|| PerfMap::read(self.pid, self.nspid, self.options.module_budget));
        let Some(map) = map else {
            return UnknownCause::NoSymbols;
        };
        if let Some(name) = map.lookup(frame.frame.lookup_address()) {
            symbols.push(crate::Symbol {
                name,
                file: None,
                line: None,
            });
        }
        match map.stats.partial {
            true => UnknownCause::Budget,
            false => UnknownCause::NoSymbols,
        }
    }

    /// The sources that failed the profile's modules (each module once).
    fn symbol_problems(&self, mappings: &[Mapping]) -> Vec<SymbolProblem> {
        let mut problems: Vec<SymbolProblem> = Vec::new();
        for record in &self.mappings {
            let Ok(module) = &record.module else {
                continue;
            };
            if !mappings.iter().any(|m| m.path == record.path) {
                continue;
            }
            let names = module.names.borrow();
            if let Some(missing) = &names.missing {
                if !problems.iter().any(|p| p.subject == record.path) {
                    problems.push(SymbolProblem {
                        subject: record.path.clone(),
                        problem: missing.reason.clone(),
                        cause: missing.cause,
                    });
                }
            }
        }
        problems
    }

    fn label_set(&self, id: u32) -> LabelSet {
        let ids = self.aggregate.label_set(id);
        let has_context = ids.first().is_some_and(|&(flag, _)| flag == 1);
        LabelSet {
            has_context,
            labels: ids
                .iter()
                .skip(1)
                .map(|&(k, v)| {
                    (
                        self.aggregate.string(k).to_owned(),
                        self.aggregate.string(v).to_owned(),
                    )
                })
                .collect(),
        }
    }
}
