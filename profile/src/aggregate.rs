//! Aggregation: one entry per distinct (stack, label set), with its sample count and
//! nanoseconds, in bounded memory. Stacks, label sets and strings are interned; past a
//! limit a sample is counted in the overflow entry (a new stack or label set) or given
//! the value `(overflow)` (a new string), never dropped uncounted.

use foldhash::{HashMap, HashMapExt};
use std::rc::Rc;

use crate::unwind::Frame;

/// How much an aggregate may hold. Start from `Limits::default()` and set fields with
/// the builder methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Distinct stacks. Default 65,536.
    pub max_stacks: usize,
    /// Distinct label sets (one per trace and span, roughly). Default 65,536.
    pub max_label_sets: usize,
    /// Distinct (stack, label set) entries. Default 131,072.
    pub max_entries: usize,
    /// Distinct label strings. Default 131,072.
    pub max_strings: usize,
    /// Bytes of distinct label strings. Default 16 MiB.
    pub max_string_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_stacks: 1 << 16,
            max_label_sets: 1 << 16,
            max_entries: 1 << 17,
            max_strings: 1 << 17,
            max_string_bytes: 16 << 20,
        }
    }
}

impl Limits {
    /// Sets [`max_stacks`](Self::max_stacks).
    #[must_use]
    pub const fn with_max_stacks(mut self, max: usize) -> Self {
        self.max_stacks = max;
        self
    }

    /// Sets [`max_label_sets`](Self::max_label_sets).
    #[must_use]
    pub const fn with_max_label_sets(mut self, max: usize) -> Self {
        self.max_label_sets = max;
        self
    }

    /// Sets [`max_entries`](Self::max_entries).
    #[must_use]
    pub const fn with_max_entries(mut self, max: usize) -> Self {
        self.max_entries = max;
        self
    }

    /// Sets [`max_strings`](Self::max_strings).
    #[must_use]
    pub const fn with_max_strings(mut self, max: usize) -> Self {
        self.max_strings = max;
        self
    }

    /// Sets [`max_string_bytes`](Self::max_string_bytes).
    #[must_use]
    pub const fn with_max_string_bytes(mut self, max: usize) -> Self {
        self.max_string_bytes = max;
        self
    }
}

/// The value a label gets when no more strings fit.
pub(crate) const OVERFLOW_STRING: &str = "(overflow)";

/// A frame of an aggregated stack: the address and the mapping it was in when sampled
/// ([`NO_MAPPING`] when it was in none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct StackFrame {
    pub mapping: u32,
    pub frame: Frame,
}

/// The mapping of a frame that was in no known module.
pub(crate) const NO_MAPPING: u32 = u32::MAX;

/// Samples, and their nanoseconds on and off a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub samples: u64,
    pub nanos: u64,
    pub off_cpu_nanos: u64,
}

impl Counts {
    fn add(&mut self, nanos: u64, off_cpu_nanos: u64) {
        self.samples += 1;
        self.nanos = self.nanos.saturating_add(nanos);
        self.off_cpu_nanos = self.off_cpu_nanos.saturating_add(off_cpu_nanos);
    }
}

/// Interned strings, within a count and a byte limit.
#[derive(Debug, Default)]
struct Strings {
    all: Vec<Rc<str>>,
    ids: HashMap<Rc<str>, u32>,
    bytes: usize,
}

impl Strings {
    fn get_or_insert(&mut self, s: &str, limits: &Limits) -> Option<u32> {
        if let Some(&id) = self.ids.get(s) {
            return Some(id);
        }
        if self.all.len() >= limits.max_strings
            || self.bytes.saturating_add(s.len()) > limits.max_string_bytes
        {
            return None;
        }
        let id = u32::try_from(self.all.len()).ok()?;
        let rc: Rc<str> = s.into();
        self.all.push(rc.clone());
        self.ids.insert(rc, id);
        self.bytes += s.len();
        Some(id)
    }
}

/// Interned slices (stacks, label sets), within a count limit.
#[derive(Debug)]
struct Slices<T> {
    all: Vec<Rc<[T]>>,
    ids: HashMap<Rc<[T]>, u32>,
}

impl<T> Default for Slices<T> {
    fn default() -> Self {
        Self {
            all: Vec::new(),
            ids: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Slices<T> {
    fn get_or_insert(&mut self, items: &[T], max: usize) -> Option<u32> {
        if let Some(&id) = self.ids.get(items) {
            return Some(id);
        }
        if self.all.len() >= max {
            return None;
        }
        let id = u32::try_from(self.all.len()).ok()?;
        let rc: Rc<[T]> = items.into();
        self.all.push(rc.clone());
        self.ids.insert(rc, id);
        Some(id)
    }
}

/// A label set as interned: `(1, 0)` first when the sample had a thread context,
/// `(0, 0)` when not, then `(key, value)` string ids.
pub(crate) type LabelIds = [(u32, u32)];

/// The aggregate of one profile.
#[derive(Debug, Default)]
pub(crate) struct Aggregate {
    limits: Limits,
    strings: Strings,
    stacks: Slices<StackFrame>,
    label_sets: Slices<(u32, u32)>,
    entries: HashMap<(u32, u32), Counts>,
    /// Samples whose stack, label set or entry did not fit.
    pub overflow: Counts,
    /// Labels that got [`OVERFLOW_STRING`] for a value (or key) that did not fit.
    pub overflow_labels: u64,
    /// The label set being built for the current sample.
    scratch: Vec<(u32, u32)>,
}

impl Aggregate {
    pub fn new(limits: Limits) -> Self {
        let mut aggregate = Self {
            limits,
            ..Self::default()
        };
        // Always there, so that a full string table can still say so.
        let unlimited = Limits::default()
            .with_max_strings(usize::MAX)
            .with_max_string_bytes(usize::MAX);
        aggregate.strings.get_or_insert(OVERFLOW_STRING, &unlimited);
        aggregate
    }

    /// Starts the label set of a sample.
    pub fn begin_labels(&mut self, has_context: bool) {
        self.scratch.clear();
        self.scratch.push((u32::from(has_context), 0));
    }

    /// Adds a label to the current sample's set.
    pub fn label(&mut self, key: &str, value: &str) {
        let mut id = |s: &str| match self.strings.get_or_insert(s, &self.limits) {
            Some(id) => id,
            None => {
                self.overflow_labels += 1;
                0
            }
        };
        let pair = (id(key), id(value));
        self.scratch.push(pair);
    }

    /// Counts a sample of `stack` with the label set built since
    /// [`begin_labels`](Self::begin_labels), of `nanos` on a CPU and `off_cpu` off it.
    pub fn add(&mut self, stack: &[StackFrame], nanos: u64, off_cpu: u64) {
        let Some(stack) = self.stacks.get_or_insert(stack, self.limits.max_stacks) else {
            self.overflow.add(nanos, off_cpu);
            return;
        };
        let Some(labels) = self
            .label_sets
            .get_or_insert(&self.scratch, self.limits.max_label_sets)
        else {
            self.overflow.add(nanos, off_cpu);
            return;
        };
        let full = self.entries.len() >= self.limits.max_entries;
        match self.entries.get_mut(&(stack, labels)) {
            Some(counts) => counts.add(nanos, off_cpu),
            None if full => self.overflow.add(nanos, off_cpu),
            None => {
                let mut counts = Counts::default();
                counts.add(nanos, off_cpu);
                self.entries.insert((stack, labels), counts);
            }
        }
    }

    /// Distinct stacks.
    pub fn stack_count(&self) -> usize {
        self.stacks.all.len()
    }

    /// Distinct entries.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// The entries, by stack id then label-set id.
    pub fn entries(&self) -> Vec<((u32, u32), Counts)> {
        let mut all: Vec<_> = self.entries.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all
    }

    pub fn stack(&self, id: u32) -> &[StackFrame] {
        self.stacks.all.get(id as usize).map_or(&[], |s| s)
    }

    pub fn label_set(&self, id: u32) -> &LabelIds {
        self.label_sets.all.get(id as usize).map_or(&[], |s| s)
    }

    pub fn string(&self, id: u32) -> &str {
        self.strings.all.get(id as usize).map_or("", |s| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(address: u64) -> StackFrame {
        StackFrame {
            mapping: NO_MAPPING,
            frame: Frame {
                address,
                return_address: false,
            },
        }
    }

    #[test]
    fn one_entry_per_stack_and_label_set() {
        let mut a = Aggregate::new(Limits::default());
        for route in ["/a", "/a", "/b"] {
            a.begin_labels(true);
            a.label("http.route", route);
            a.add(&[frame(1), frame(2)], 10, 0);
        }
        a.begin_labels(false);
        a.add(&[frame(1), frame(2)], 10, 0);
        assert_eq!(a.stack_count(), 1);
        let entries = a.entries();
        assert_eq!(entries.len(), 3);
        let counts: Vec<u64> = entries.iter().map(|(_, c)| c.samples).collect();
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(entries[0].1.nanos, 20);
        let labels = a.label_set(entries[0].0 .1);
        assert_eq!(labels[0], (1, 0));
        assert_eq!(a.string(labels[1].1), "/a");
        assert_eq!(a.label_set(entries[2].0 .1), &[(0, 0)]);
    }

    #[test]
    fn limits_count_the_overflow() {
        let limits = Limits::default()
            .with_max_stacks(2)
            .with_max_strings(3)
            .with_max_entries(3);
        let mut a = Aggregate::new(limits);
        for i in 0..10 {
            a.begin_labels(true);
            a.label("k", &format!("v{i}"));
            a.add(&[frame(i % 4)], 5, 0);
        }
        assert_eq!(a.stack_count(), 2);
        assert!(a.entry_count() <= 3);
        let counted: u64 = a.entries().iter().map(|(_, c)| c.samples).sum();
        assert_eq!(counted + a.overflow.samples, 10);
        assert!(a.overflow.samples > 0);
        // "(overflow)", "k" and "v0": later values could not be interned.
        assert!(a.overflow_labels >= 8);
    }

    #[test]
    fn label_sets_past_the_limit_are_counted() {
        let mut a = Aggregate::new(Limits::default().with_max_label_sets(2));
        for i in 0..5 {
            a.begin_labels(true);
            a.label("k", &format!("v{i}"));
            a.add(&[frame(0)], 1, 0);
        }
        let sets: std::collections::HashSet<u32> =
            a.entries().iter().map(|((_, l), _)| *l).collect();
        assert!(sets.len() <= 2, "{sets:?}");
        let counted: u64 = a.entries().iter().map(|(_, c)| c.samples).sum();
        assert_eq!(counted + a.overflow.samples, 5);
        assert!(a.overflow.samples >= 3);
    }
}
