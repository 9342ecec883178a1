//! The Python names of a process's threads as last read from its `threading` registry
//! (the reading is in `threads.rs`), and the bounds of a reading.

use foldhash::HashMap;
use std::time::{Duration, Instant};

use super::error::PythonError;

/// The most threads whose Python names are kept per process.
pub const MAX_NAMED_THREADS: usize = 256;

/// The longest Python thread name kept, in bytes; a longer one is cut (at a character).
pub const MAX_THREAD_NAME_BYTES: usize = 256;

/// The most bytes one reading of the registry reads from the target.
pub const MAX_REGISTRY_BYTES: usize = 1 << 20;

/// How often, at most, the registry of one process is read again (for a sampled thread
/// that has no Python name yet).
pub const THREAD_NAMES_INTERVAL: Duration = Duration::from_secs(1);

/// Where a process's registry was found: `threading._active` (a dict a module global
/// holds for the process's life), and `PyDict_Type` and `PyUnicode_Type` as the
/// target's `sys.modules` showed them. Kept from one reading to the next, so that
/// `sys.modules` is looked through once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RegistryAt {
    pub active: u64,
    pub dict_type: u64,
    pub str_type: u64,
}

/// The Python names of one process's threads, as
/// [`PythonProcess::thread_name`](super::PythonProcess::thread_name) reads them: once at
/// first, then again only when a thread without one is sampled, at most every
/// [`THREAD_NAMES_INTERVAL`].
#[derive(Debug, Default)]
pub struct PythonThreadNames {
    names: HashMap<u32, Box<str>>,
    read_at: Option<Instant>,
    /// Where the last reading found the registry.
    pub(crate) registry: Option<RegistryAt>,
    /// How many times the registry was read.
    pub reads: u64,
    /// Why the last reading failed (the names of the one before are kept).
    pub error: Option<PythonError>,
}

impl PythonThreadNames {
    /// Takes a reading of the registry
    /// ([`PythonProcess::read_thread_names`](super::PythonProcess::read_thread_names)).
    pub(crate) fn set(&mut self, read: Result<Vec<(u32, String)>, PythonError>) {
        self.read_at = Some(Instant::now());
        self.reads += 1;
        match read {
            Ok(read) => {
                self.error = None;
                self.names = read
                    .into_iter()
                    .take(MAX_NAMED_THREADS)
                    .map(|(tid, name)| (tid, name.into_boxed_str()))
                    .collect();
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Whether the registry is to be read again for thread `tid`: it has no name, and
    /// the last reading is [`THREAD_NAMES_INTERVAL`] old (or there was none).
    pub(crate) fn due(&self, tid: u32) -> bool {
        !self.names.contains_key(&tid)
            && self
                .read_at
                .is_none_or(|at| at.elapsed() >= THREAD_NAMES_INTERVAL)
    }

    /// Thread `tid`'s Python name as last read (reads nothing).
    pub fn name(&self, tid: u32) -> Option<&str> {
        self.names.get(&tid).map(|n| &**n)
    }

    /// The threads named.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no thread is named.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_again_only_for_an_unnamed_thread_and_not_at_once() {
        let mut names = PythonThreadNames::default();
        assert!(names.due(7));
        names.set(Ok(vec![(7, "worker-0".into())]));
        assert_eq!(
            (names.name(7), names.len(), names.reads),
            (Some("worker-0"), 1, 1)
        );
        // Named: never due; unnamed: not before the interval.
        assert!(!names.due(7) && !names.due(8));
        names.read_at = Instant::now().checked_sub(THREAD_NAMES_INTERVAL);
        assert!(!names.due(7) && names.due(8));
        // A failed reading keeps the names read before.
        names.set(Err(PythonError::NoThreadState));
        assert_eq!(names.name(7), Some("worker-0"));
        assert!(names.error.is_some());
        // At most MAX_NAMED_THREADS kept.
        names.set(Ok((0..1000).map(|t| (t, String::new())).collect()));
        assert_eq!(names.len(), MAX_NAMED_THREADS);
    }
}
