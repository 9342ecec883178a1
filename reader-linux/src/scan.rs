//! Finding every process on the host that publishes a process context.

use std::fs;
use std::io;

use crate::error::Error;
use crate::maps::MapsScanner;
use crate::reader::{ProcessContextReader, ReaderOptions, Snapshot};

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

/// The command name of process `pid` (`/proc/<pid>/comm`, at most 15 bytes).
pub fn comm(pid: u32) -> io::Result<String> {
    let mut comm = fs::read_to_string(format!("/proc/{pid}/comm"))?;
    if comm.ends_with('\n') {
        comm.pop();
    }
    Ok(comm)
}

/// The pids in `/proc`, in increasing order.
pub fn pids() -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The thread ids of process `pid` (`/proc/<pid>/task`), in increasing order.
pub fn thread_ids(pid: u32) -> Result<Vec<u32>, Error> {
    let path = format!("/proc/{pid}/task");
    let mut tids: Vec<u32> = fs::read_dir(&path)
        .map_err(|e| Error::from_io(pid, format!("list {path}"), e))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
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
