//! The ELF modules mapped in a process, with their load bias and TLS analysis.
//!
//! Files are opened through `/proc/<pid>/root/<path>`, so a reader in another mount
//! namespace (a container) sees the target's files; when that file was deleted or
//! replaced since it was mapped, `/proc/<pid>/map_files/` gives the mapped file itself.
//! Analyses are cached by device and inode.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use object::ReadCache;

use super::elf::{ElfError, ElfTls};
use super::resolve::LoadedModule;
use crate::maps::{MapsLine, MapsScanner};

/// Analyses of ELF files, by `(device, inode)`. Files that are not ELF are remembered
/// as such.
#[derive(Debug, Default)]
pub struct ElfCache {
    entries: HashMap<(u64, u64), Option<Arc<ElfTls>>>,
}

impl ElfCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of files analysed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was analysed yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn analyse(&mut self, file: File) -> io::Result<Option<Arc<ElfTls>>> {
        let meta = file.metadata()?;
        let key = (meta.dev(), meta.ino());
        if let Some(hit) = self.entries.get(&key) {
            return Ok(hit.clone());
        }
        // Reads only the parts the analysis needs (headers, symbol tables,
        // relocations), not the whole file.
        let cache = ReadCache::new(file);
        let analysis = match ElfTls::parse(&cache) {
            Ok(elf) => Some(Arc::new(elf)),
            Err(ElfError::Malformed(_) | ElfError::UnsupportedMachine(_)) => None,
        };
        self.entries.insert(key, analysis.clone());
        Ok(analysis)
    }
}

/// One file-backed executable mapping group, as seen in maps.
#[derive(Debug)]
struct MappedFile {
    path: String,
    inode: u64,
    /// `(start, end, file offset)` of every mapping of the file.
    ranges: Vec<(u64, u64, u64)>,
    executable: bool,
}

const DELETED: &str = " (deleted)";

/// Lists the ELF modules of `pid` (those with an executable mapping), analysed.
pub fn loaded_modules(pid: u32, cache: &mut ElfCache) -> io::Result<Vec<LoadedModule>> {
    let mut files: Vec<MappedFile> = Vec::new();
    MapsScanner::new().for_each_process_line(pid, |line| {
        let Some(line) = MapsLine::parse(line) else {
            return ControlFlow::Continue(());
        };
        if line.inode == 0 || !line.name.starts_with(b"/") {
            return ControlFlow::Continue(());
        }
        let Ok(path) = std::str::from_utf8(line.name) else {
            return ControlFlow::Continue(());
        };
        let entry = match files.iter_mut().rev().find(|f| f.path == path) {
            Some(f) => f,
            None => {
                files.push(MappedFile {
                    path: path.to_owned(),
                    inode: line.inode,
                    ranges: Vec::new(),
                    executable: false,
                });
                files.last_mut().expect("just pushed")
            }
        };
        entry.ranges.push((line.start, line.end, line.offset));
        entry.executable |= line.is_executable();
        ControlFlow::Continue(())
    })?;

    let dir = match crate::memory::live_thread(pid) {
        Some(tid) if tid != pid => format!("/proc/{pid}/task/{tid}"),
        _ => format!("/proc/{pid}"),
    };
    let exe = std::fs::read_link(format!("{dir}/exe"))
        .ok()
        .and_then(|p| p.to_str().map(|s| s.trim_end_matches(DELETED).to_owned()));
    let page = rustix::param::page_size() as u64;
    let mut modules = Vec::new();
    for file in files.iter().filter(|f| f.executable) {
        let Some(elf) = open_mapped(&dir, file).and_then(|f| cache.analyse(f).ok().flatten())
        else {
            continue;
        };
        let (load_vaddr, load_offset) = elf.first_load;
        let first_offset = load_offset & !(page - 1);
        let Some(start) = file
            .ranges
            .iter()
            .filter(|(_, _, off)| *off == first_offset)
            .map(|(start, _, _)| *start)
            .min()
        else {
            continue;
        };
        let path = file.path.trim_end_matches(DELETED).to_owned();
        modules.push(LoadedModule {
            is_main: exe.as_deref() == Some(path.as_str()),
            bias: start.wrapping_sub(load_vaddr & !(page - 1)),
            path,
            elf,
        });
    }
    Ok(modules)
}

/// Opens the file behind a mapping: by path under the target's root when it is still
/// the same file, else through `map_files` (which needs `CAP_SYS_ADMIN`).
/// `dir` is the process's `/proc` directory, or a live thread's when the main thread has
/// exited (its `root` and `map_files` are gone with it).
fn open_mapped(dir: &str, file: &MappedFile) -> Option<File> {
    let path = file.path.trim_end_matches(DELETED);
    if let Ok(f) = File::open(format!("{dir}/root{path}")) {
        if f.metadata().is_ok_and(|m| m.ino() == file.inode) {
            return Some(f);
        }
    }
    let (start, end, _) = file.ranges.first()?;
    File::open(format!("{dir}/map_files/{start:x}-{end:x}")).ok()
}
