//! The `VmFlags` of one mapping, from
//! [`/proc/<pid>/smaps`](https://man7.org/linux/man-pages/man5/proc_pid_smaps.5.html):
//! `dc` ("do not copy on fork") is how `MADV_DONTFORK` shows.

use std::io::{self, Read};
use std::ops::ControlFlow;

use otel_ctx_reader::maps::{MapsLine, MapsScanner};

/// The flags of the mapping that starts at `start`, as two-letter codes; `None` when no
/// mapping starts there or the kernel prints no `VmFlags` (before Linux 3.8).
///
/// The kernel builds smaps one mapping at a time, as it is read, and measuring each
/// mapping walks its page tables: reading stops right after the wanted mapping.
pub(super) fn vm_flags<R: Read>(
    scanner: &mut MapsScanner,
    smaps: R,
    start: u64,
) -> io::Result<Option<Vec<String>>> {
    let mut in_target = false;
    let mut found = None;
    scanner.for_each_line(smaps, |line| {
        if let Some(rest) = line.strip_prefix(b"VmFlags:") {
            if in_target {
                found = Some(
                    rest.split(|&b| b == b' ')
                        .filter(|flag| !flag.is_empty())
                        .map(|flag| String::from_utf8_lossy(flag).into_owned())
                        .collect(),
                );
                return ControlFlow::Break(());
            }
            return ControlFlow::Continue(());
        }
        // Field lines (`Size:   4 kB`) have no address range, so only the first line of
        // each mapping parses as a maps line.
        if let Some(mapping) = MapsLine::parse(line) {
            if in_target {
                // The wanted mapping ended without a VmFlags line.
                return ControlFlow::Break(());
            }
            in_target = mapping.start == start;
        }
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from a process whose context mapping had `MADV_DONTFORK`, beside one that
    /// did not.
    const RECORDED: &str = "\
7f4138bef000-7f4138bf0000 rw-p 00000000 00:01 1027                       /memfd:OTEL_CTX (deleted)
Size:                  4 kB
KernelPageSize:        4 kB
Rss:                   4 kB
THPeligible:           0
VmFlags: rd wr mr mw me ac sd
7f4138bf0000-7f4138bf1000 rw-p 00000000 00:01 1026                       /memfd:OTEL_CTX (deleted)
Size:                  4 kB
Rss:                   4 kB
ProtectionKey:         0
VmFlags: rd wr mr mw me dc ac sd
7f4138bf1000-7f4138bf2000 rw-p 00000000 00:00 0
Size:                  4 kB
";

    fn flags(start: u64) -> Option<Vec<String>> {
        vm_flags(&mut MapsScanner::new(), RECORDED.as_bytes(), start).unwrap()
    }

    #[test]
    fn flags_of_the_wanted_mapping_only() {
        let with = flags(0x7f41_38bf_0000).unwrap();
        assert!(with.iter().any(|f| f == "dc"), "{with:?}");
        assert_eq!(with.len(), 8);
        let without = flags(0x7f41_38be_f000).unwrap();
        assert!(!without.iter().any(|f| f == "dc"), "{without:?}");
        // No such mapping; a mapping without VmFlags (an old kernel).
        assert_eq!(flags(0x1000), None);
        assert_eq!(flags(0x7f41_38bf_1000), None);
    }
}
