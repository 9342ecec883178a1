//! Finding every process on the host that publishes a process context.

use std::io;

use crate::error::Error;
use crate::maps::MapsScanner;
use crate::process::reader::{ProcessContextReader, ReaderOptions, Snapshot};
use crate::procfs::{comm, pids};

/// A process whose maps name an `OTEL_CTX` mapping.
#[derive(Debug)]
pub struct ScanEntry {
    /// The process.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`), empty if it could not be read.
    pub comm: String,
    /// Its context, or why it could not be read.
    pub context: Result<Snapshot, Error>,
}

/// The result of [`scan`].
#[derive(Debug, Default)]
pub struct Scan {
    /// Processes with a context mapping, by increasing pid.
    pub entries: Vec<ScanEntry>,
    /// Processes whose maps could not be read: permission denied, such as other users'
    /// processes without `CAP_SYS_PTRACE`. They may publish a context this scan missed.
    pub denied: Vec<u32>,
}

/// Scans every process on the host with default options.
pub fn scan() -> io::Result<Scan> {
    scan_with(&ReaderOptions::default())
}

/// Scans every process on the host: one pass over each `/proc/<pid>/maps` through one
/// shared buffer, then a full read of each process that has a context mapping. Processes
/// that exit during the scan are left out. Fails only if `/proc` cannot be listed.
pub fn scan_with(options: &ReaderOptions) -> io::Result<Scan> {
    let mut scanner = MapsScanner::new();
    let mut result = Scan::default();
    for pid in pids()? {
        let mut found = match scanner.find_process_context_mappings(pid) {
            Ok(found) => found,
            Err(e) if is_denied(&e) => {
                result.denied.push(pid);
                continue;
            }
            Err(_) => continue,
        };
        if found.is_empty() {
            continue;
        }
        // The maps were just read: hand the candidates over rather than read them again,
        // exact names first as the reader takes them.
        found.sort_by_key(|c| !c.name.exact);
        let context = ProcessContextReader::with_options(pid, *options).and_then(|mut reader| {
            reader.choose(found)?;
            reader.read()
        });
        if matches!(
            context,
            Err(Error::ProcessGone { .. } | Error::NoContext { .. })
        ) {
            continue;
        }
        result.entries.push(ScanEntry {
            pid,
            comm: comm(pid).unwrap_or_default(),
            context,
        });
    }
    Ok(result)
}

fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}
