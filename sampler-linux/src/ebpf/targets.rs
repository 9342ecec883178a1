//! The processes one sampler follows: what user space keeps of each (its resolution and
//! the generation of its `targets` entry), and the thread readers that name their
//! samples, found by process id.

use std::collections::{BTreeMap, HashMap as StdHashMap};

use foldhash::{HashMap, HashMapExt};
use std::hash::BuildHasher;

use otel_ctx_reader::thread::tls::Resolution;
use otel_ctx_reader::thread::ThreadReader;

/// The thread readers that name an [`EbpfSampler`](super::EbpfSampler)'s samples: the
/// reader of a sample's process is found by the sample's process id. One
/// [`ThreadReader`] serves a sampler of its own process; a map or a list of readers
/// serves a sampler of many.
pub trait EbpfReaders {
    /// The reader of process `pid`, if there is one.
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader>;
}

impl EbpfReaders for ThreadReader {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        (self.pid() == pid).then_some(self)
    }
}

/// A process followed with a reader, or for its stacks only (`None`).
impl EbpfReaders for Option<ThreadReader> {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        self.as_mut().and_then(|r| r.reader_mut(pid))
    }
}

impl<R: EbpfReaders + ?Sized> EbpfReaders for &mut R {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        (**self).reader_mut(pid)
    }
}

impl<S: BuildHasher> EbpfReaders for StdHashMap<u32, ThreadReader, S> {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        self.get_mut(&pid)
    }
}

impl EbpfReaders for BTreeMap<u32, ThreadReader> {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        self.get_mut(&pid)
    }
}

impl EbpfReaders for [ThreadReader] {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        self.iter_mut().find(|r| r.pid() == pid)
    }
}

impl EbpfReaders for Vec<ThreadReader> {
    fn reader_mut(&mut self, pid: u32) -> Option<&mut ThreadReader> {
        self.as_mut_slice().reader_mut(pid)
    }
}

/// One followed process.
#[derive(Debug)]
pub(super) struct Target {
    /// Where the program finds its threads' slot; `None` for a process followed for its
    /// stacks only.
    pub resolution: Option<Resolution>,
    /// Copied into each of its samples by the program: a sample of an older entry (an
    /// earlier resolution, or an earlier process of the same id) is dropped.
    pub generation: u64,
}

/// The followed processes, by process id, and the order they were added in.
#[derive(Debug)]
pub(super) struct Targets {
    by_pid: HashMap<u32, Target>,
    order: Vec<u32>,
    max: usize,
    /// The last generation handed out; every entry written gets a new one.
    generation: u64,
}

impl Targets {
    /// No process yet, room for `max`.
    pub fn new(max: usize) -> Self {
        Self {
            by_pid: HashMap::with_capacity(max.min(64)),
            order: Vec::new(),
            max,
            generation: 0,
        }
    }

    /// How many processes there is room for.
    pub const fn max(&self) -> usize {
        self.max
    }

    /// Process `pid`'s entry.
    pub fn get(&self, pid: u32) -> Option<&Target> {
        self.by_pid.get(&pid)
    }

    /// Whether `pid` could be added (or replaced) now.
    pub fn has_room_for(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid) || self.by_pid.len() < self.max
    }

    /// The generation the next entry written for any process carries.
    pub const fn next_generation(&self) -> u64 {
        self.generation + 1
    }

    /// Records `pid`'s entry, written to the program with
    /// [`next_generation`](Self::next_generation).
    pub fn insert(&mut self, pid: u32, resolution: Option<Resolution>) {
        self.generation += 1;
        let target = Target {
            resolution,
            generation: self.generation,
        };
        if self.by_pid.insert(pid, target).is_none() {
            self.order.push(pid);
        }
    }

    /// Forgets `pid`; whether it was followed.
    pub fn remove(&mut self, pid: u32) -> bool {
        if self.by_pid.remove(&pid).is_none() {
            return false;
        }
        self.order.retain(|&p| p != pid);
        true
    }

    /// The followed processes, in the order they were added.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.order.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::thread::tls::{AccessModel, Libc, Machine, SlotLocation, SymbolTable};

    fn resolution(offset: i64) -> Resolution {
        Resolution {
            module: "/bin/w".into(),
            defining_module: "/bin/w".into(),
            symbol_table: SymbolTable::Dynsym,
            model: AccessModel::LocalExec,
            location: SlotLocation::TpOffset(offset),
            libc: Libc::Glibc,
            machine: Machine::X86_64,
        }
    }

    #[test]
    fn entries_keep_their_order_and_new_generations() {
        let mut t = Targets::new(2);
        assert_eq!(t.pids().next(), None);
        t.insert(10, Some(resolution(-8)));
        t.insert(20, None);
        assert_eq!(t.pids().collect::<Vec<_>>(), [10, 20]);
        assert!(!t.has_room_for(30) && t.has_room_for(10));
        let before = t.get(10).unwrap().generation;
        // Replacing keeps the place, with a new generation.
        t.insert(10, Some(resolution(-24)));
        assert_eq!(t.pids().collect::<Vec<_>>(), [10, 20]);
        assert!(t.get(10).unwrap().generation > before);
        assert_eq!(t.get(10).unwrap().resolution, Some(resolution(-24)));
        assert_eq!(t.get(20).unwrap().resolution, None);
        assert!(t.remove(10) && !t.remove(10));
        assert_eq!(t.pids().next(), Some(20));
        assert!(t.has_room_for(30));
    }
}
