//! Finding the mappings that may hold a process context: the names readers match, names
//! that are almost right, and anonymous or memfd mappings of other names that start with
//! the signature; the one a reader would use; the second look once the window is over; and
//! the `VmFlags` of the mapping.

use std::fs::File;

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE};
use otel_ctx_reader::maps::{MappingName, MapsLine, RawLine};
use otel_ctx_reader::memory::{live_thread, CopyError};
use otel_ctx_reader::{Error, ProcessMaps};

use super::{Candidate, Naming, ProcessSide};
use crate::check::smaps;

/// Unnamed anonymous mappings probed for a header that starts with the signature, at
/// most: each costs a copy out of the process.
pub(super) const MAX_PROBED: usize = 4096;

/// Mappings above which the `VmFlags` of the context mapping are not read: the kernel
/// measures every mapping it prints in `/proc/<pid>/smaps` (a page-table walk each), so
/// reading far into it costs seconds on a process with a million mappings.
const MAX_SMAPS_MAPPINGS: usize = 20_000;

impl ProcessSide {
    /// Whether the process has any mapping that may hold a process context.
    pub(in crate::check) fn has_candidates(&mut self) -> Result<bool, Error> {
        Ok(!self.discover()?.is_empty())
    }

    /// Looks at the mappings again once the window is over, before judging them.
    ///
    /// A context is found as soon as its mapping exists, but the writer names it, writes
    /// the header and calls `madvise(MADV_DONTFORK)` only afterwards: judging the name,
    /// the header's identity or the flags from that first look would blame a publication
    /// still in progress.
    pub(in crate::check) fn finish(&mut self) -> Result<(), Error> {
        let Some(start) = self.primary.as_ref().map(|p| p.start) else {
            return Ok(());
        };
        // A first look that already saw the finished publication (the name readers look
        // for, the signature, a consistent read) needs no second pass over the maps,
        // which on a process with a million mappings costs as much as the first.
        let settled = self
            .primary
            .as_ref()
            .is_some_and(|p| p.is_exact() && p.signature_ok())
            && self.last.is_some()
            && !self.unpublished;
        if settled {
            self.vm_flags = self.vm_flags_of(start);
            return Ok(());
        }
        let candidates = self.discover()?;
        let refreshed = candidates
            .iter()
            .find(|c| c.start == start)
            .or_else(|| choose(&candidates))
            .cloned();
        if let Some(primary) = refreshed {
            self.vm_flags = self.vm_flags_of(primary.start);
            self.primary = Some(primary);
            self.candidates = candidates;
        } else if let Some(primary) = &self.primary {
            // Unpublished during the window: its flags can no longer be read.
            self.vm_flags = Err(format!(
                "the mapping at {:#x} was unmapped before its flags could be read",
                primary.start
            ));
        }
        Ok(())
    }

    /// The first 32 bytes of every candidate of at least that size, copied in a few
    /// system calls (thousands of unnamed mappings may be probed); `None` where they are
    /// not mapped.
    fn read_headers(&mut self, lines: &mut [(Candidate, Option<Naming>)]) -> Result<(), Error> {
        let sized: Vec<usize> = (0..lines.len())
            .filter(|&i| {
                let c = &lines[i].0;
                c.end.saturating_sub(c.start) >= HEADER_SIZE as u64
            })
            .collect();
        let mut bytes = vec![[0u8; HEADER_SIZE]; sized.len()];
        let mut reads: Vec<(u64, &mut [u8])> = sized
            .iter()
            .zip(bytes.iter_mut())
            .map(|(&i, buf)| (lines[i].0.start, &mut buf[..]))
            .collect();
        let results = self.memory.read_exact_each(&mut reads);
        drop(reads);
        for ((&i, result), bytes) in sized.iter().zip(results).zip(&bytes) {
            lines[i].0.header = match result {
                // 32 bytes always make a header: every bit pattern is one.
                Ok(()) => ProcessContextHeader::read(bytes).ok(),
                Err(CopyError::Unmapped) => None,
                Err(e) => return Err(Error::from_copy(self.pid, e, "the header")),
            };
        }
        Ok(())
    }

    /// The `VmFlags` of the mapping at `start`, unless the process has so many mappings
    /// that reading its smaps would cost seconds.
    fn vm_flags_of(&mut self, start: u64) -> Result<Option<Vec<String>>, String> {
        if self.mappings > MAX_SMAPS_MAPPINGS {
            return Err(format!(
                "not read: the process has {} mappings, and /proc/<pid>/smaps measures each \
                 one it prints (more than {MAX_SMAPS_MAPPINGS} cost seconds)",
                self.mappings
            ));
        }
        self.read_vm_flags(start)
    }

    fn read_vm_flags(&mut self, start: u64) -> Result<Option<Vec<String>>, String> {
        // Through a live thread when the main thread has exited: the process's own smaps
        // is then empty.
        let path = match live_thread(self.pid) {
            Some(tid) if tid != self.pid => format!("/proc/{}/task/{tid}/smaps", self.pid),
            _ => format!("/proc/{}/smaps", self.pid),
        };
        let file = File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
        smaps::vm_flags(&mut self.scanner, file, start)
            .map_err(|e| format!("cannot read {path}: {e}"))
    }

    /// Every mapping that may hold a process context: the names readers match (even on
    /// executable mappings, which readers skip), names that mention `OTEL_CTX` otherwise,
    /// and anonymous or memfd mappings of any name that start with the signature.
    pub(super) fn discover(&mut self) -> Result<Vec<Candidate>, Error> {
        self.discover_with_maps().map(|(candidates, _)| candidates)
    }

    /// [`discover`](Self::discover), and the rest of the same pass over the maps (the
    /// modules the thread side analyses).
    pub(super) fn discover_with_maps(&mut self) -> Result<(Vec<Candidate>, ProcessMaps), Error> {
        let pid = self.pid;
        // Lines whose naming is `None` qualify only if they start with the signature.
        let mut lines: Vec<(Candidate, Option<Naming>)> = Vec::new();
        // Unnamed mappings that may hold a context: each one probed costs a copy out of
        // the process, so a process with hundreds of thousands of anonymous mappings has
        // only the first MAX_PROBED of them probed; the rest are counted from the raw
        // line, without parsing it.
        let hidden = std::cell::Cell::new(0usize);
        let maps = self
            .scanner
            .process_maps_visiting(
                pid,
                |raw| {
                    if hidden.get() < MAX_PROBED || !unnamed(raw) {
                        return true;
                    }
                    if readable(raw.bytes) {
                        hidden.set(hidden.get() + 1);
                    }
                    false
                },
                |line| {
                    let naming = match naming_of(line.name) {
                        Some(naming) => Some(naming),
                        None if may_hold_hidden_context(line) => {
                            hidden.set(hidden.get() + 1);
                            if hidden.get() > MAX_PROBED {
                                return;
                            }
                            None
                        }
                        None => return,
                    };
                    let candidate = Candidate {
                        start: line.start,
                        end: line.end,
                        perms: line.perms,
                        name: String::from_utf8_lossy(line.name).into_owned(),
                        naming: Naming::Other,
                        header: None,
                    };
                    lines.push((candidate, naming));
                },
            )
            .map_err(|e| Error::from_io(pid, format!("read /proc/{pid}/maps"), e))?;
        self.unprobed = hidden.get().saturating_sub(MAX_PROBED);
        self.mappings = maps.lines;
        self.read_headers(&mut lines)?;
        let mut found = Vec::new();
        for (mut candidate, naming) in lines {
            match naming {
                Some(naming) => candidate.naming = naming,
                None if candidate.signature_ok() => {}
                None => continue,
            }
            found.push(candidate);
        }
        Ok((found, maps))
    }
}

/// The candidate a reader would use, or the checker's best guess when none would: an exact
/// name first, then a good signature, then not executable, then file order.
pub(super) fn choose(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (!c.is_exact(), !c.signature_ok(), c.perms[2] == b'x', *i))
        .map(|(_, c)| c)
}

/// How a maps name is named, if it names a context at all: [`Naming::Exact`] for every name
/// that starts with one of the three names readers look for (OTEP 4719 reading step 1,
/// so `/memfd:OTEL_CTX_v2 (deleted)` too, which only warns), [`Naming::NearMiss`] for
/// other spellings, `None` otherwise.
pub(super) fn naming_of(name: &[u8]) -> Option<Naming> {
    if let Some(name) = MappingName::parse(name) {
        Some(Naming::Exact(name))
    } else if mentions_otel_ctx(name) {
        Some(Naming::NearMiss)
    } else {
        None
    }
}

/// Whether a maps name is a memfd or anonymous-mapping name that mentions the context in
/// another spelling (`otel_ctx`, `OTEL-CTX`, `[anon:OTEL_CTX2]`, ...). Paths of files are
/// not: an executable may well be called `otel-ctx`.
fn mentions_otel_ctx(name: &[u8]) -> bool {
    if !(name.starts_with(b"/memfd:") || name.starts_with(b"[anon")) {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    [&b"otel_ctx"[..], b"otel-ctx", b"otelctx"]
        .iter()
        .any(|needle| lower.windows(needle.len()).any(|w| w == *needle))
}

/// Whether a raw maps line surely has no name: anonymous memory. The kernel ends such a
/// line with the inode and a space; every name a process can choose has a `/` (files,
/// memfds) or a `[` (`[anon:...]`), which the pass over the maps has looked for already,
/// and the kernel's own names end otherwise. A line this does not vouch for is parsed.
fn unnamed(raw: RawLine<'_>) -> bool {
    !raw.slash_or_bracket
        && raw
            .bytes
            .strip_suffix(b"\n")
            .unwrap_or(raw.bytes)
            .ends_with(b" ")
}

/// Whether a raw maps line's permissions (the second field) start with `r`.
fn readable(raw: &[u8]) -> bool {
    memchr::memchr(b' ', raw).and_then(|at| raw.get(at + 1)) == Some(&b'r')
}

/// Whether a mapping may be an unnamed (or otherwise named) context: readable anonymous
/// memory or a memfd, of at least a header's size. Files, the heap and stacks are not.
fn may_hold_hidden_context(line: &MapsLine<'_>) -> bool {
    let anonymous = line.name.is_empty()
        || line.name.starts_with(b"[anon:")
        || line.name.starts_with(b"[anon_shmem:")
        || line.name.starts_with(b"/memfd:");
    anonymous && line.perms[0] == b'r' && line.end.saturating_sub(line.start) >= HEADER_SIZE as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_lines_classified_as_the_parser_would() {
        let lines: [&[u8]; 6] = [
            b"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n",
            b"7f0000000000-7f0000001000 ---p 00000000 00:00 0",
            b"7f0000000000-7f0000001000 rw-p 00000000 00:00 0          [anon:OTEL_CTX]\n",
            b"7f0000000000-7f0000001000 rw-s 00000000 00:0f 123        anon_inode:bpf-map\n",
            b"7f0000000000-7f0000001000 r--p 00000000 08:01 42         /usr/lib/libc.so.6\n",
            b"7f0000000000-7f0000001000 r--s 00000000 00:01 7          /memfd:OTEL_CTX (deleted)\n",
        ];
        for raw in lines {
            let line = MapsLine::parse(raw).expect("a maps line");
            // Vouched for as unnamed only when it is; a line it cannot vouch for is parsed.
            let raw_line = RawLine::new(raw);
            assert!(!unnamed(raw_line) || line.name.is_empty(), "{raw:?}");
            assert_eq!(unnamed(raw_line), raw.ends_with(b"0 \n"), "{raw:?}");
            assert_eq!(readable(raw), line.perms[0] == b'r', "{raw:?}");
        }
    }

    #[test]
    fn near_miss_names() {
        assert!(mentions_otel_ctx(b"/memfd:otel_ctx (deleted)"));
        assert!(mentions_otel_ctx(b"[anon:OTEL-CTX]"));
        assert!(mentions_otel_ctx(b"[anon:OTEL_CTX2]"));
        assert_eq!(
            naming_of(b"[anon:OTEL_CTX2]"),
            Some(Naming::NearMiss),
            "not a prefix: the bracket differs"
        );
        assert!(matches!(
            naming_of(b"/memfd:OTEL_CTX_2 (deleted)"),
            Some(Naming::Exact(name)) if !name.exact
        ));
        assert!(!mentions_otel_ctx(b"/memfd:otel (deleted)"));
        assert!(!mentions_otel_ctx(b""));
        assert!(!mentions_otel_ctx(b"/usr/bin/otel-ctx"));
        assert!(!mentions_otel_ctx(b"/tmp/OTEL_CTX"));
    }
}
