//! What the profile layer reads of an ELF file, over any bytes `object` can read: a
//! target's file through the reader's budgeted `pread` ([`BudgetedFile`]), or an image
//! already in memory (the vDSO copied out of the target, a MiniDebugInfo file
//! decompressed). Each reader takes the bytes still allowed (`left`), so that a file's
//! budget bounds what its sections cost, compressed or not.
//!
//! [`BudgetedFile`]: otel_ctx_reader::files::BudgetedFile

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;

use object::elf::{EM_AARCH64, EM_X86_64, NT_GNU_BUILD_ID, PF_X, PT_LOAD, PT_NOTE};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{CompressionFormat, Endianness, Object, ObjectSection, ReadRef};

use crate::arch::Arch;
use crate::bytes::{Bytes, DwarfReader};
use crate::dwarf::Dwarf;

/// An ELF file as `object` parses it, over bytes of any origin.
pub(crate) type Elf<'a, R> = ElfFile64<'a, Endianness, R>;

/// A `PT_LOAD` segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// The zlib stream `data`, inflated to at most `size` bytes (the size its header claims,
/// already within the budget) in one allocation of that size: no growing buffer holds a
/// large section twice. A stream that ends short gives what it holds.
fn inflate(data: &[u8], size: u64) -> Result<Arc<[u8]>, String> {
    let size = usize::try_from(size).map_err(|_| format!("claims {size} bytes uncompressed"))?;
    let mut out: Arc<[u8]> = std::iter::repeat_n(0u8, size).collect();
    let Some(buf) = Arc::get_mut(&mut out) else {
        return Err("the section's buffer is shared".into());
    };
    let mut decoder = flate2::read::ZlibDecoder::new(data);
    let mut filled = 0;
    while filled < buf.len() {
        match decoder.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("zlib: {e}")),
        }
    }
    Ok(match filled == out.len() {
        true => out,
        false => Arc::from(&out[..filled]),
    })
}

/// The sections framehop unwinds with, and the addresses it needs to read them.
#[derive(Clone, Debug, Default)]
pub(crate) struct UnwindSections {
    pub text_svma: Option<Range<u64>>,
    pub got_svma: Option<Range<u64>>,
    pub eh_frame: Option<(Range<u64>, Bytes)>,
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    pub debug_frame: Option<Bytes>,
}

impl UnwindSections {
    /// The sections, less an `.eh_frame_hdr` the unwinder may not trust
    /// ([`eh_frame_hdr_is_sound`]).
    pub fn checked(mut self) -> Self {
        let sound = match (&self.eh_frame_hdr, &self.eh_frame) {
            (Some((hdr, bytes)), Some((eh_frame, _))) => {
                eh_frame_hdr_is_sound(hdr.start, bytes, eh_frame)
            }
            _ => false,
        };
        if !sound {
            self.eh_frame_hdr = None;
        }
        self
    }
}

/// The ELF header, the `PT_LOAD` segments and the build id of a file.
pub(crate) struct Head {
    pub build_id: Option<Box<[u8]>>,
    pub arch: Arch,
    pub segments: Vec<Segment>,
}

/// Reads the ELF header, the program headers and the build-id note (a few hundred
/// bytes), enough to know a module before its sections are read.
pub(crate) fn read_head<'a, R: ReadRef<'a>>(data: R) -> Result<Head, String> {
    let header = object::elf::FileHeader64::<Endianness>::parse(data)
        .map_err(|e| format!("not a 64-bit ELF file ({e})"))?;
    let endian = header
        .endian()
        .map_err(|e| format!("not a 64-bit ELF file ({e})"))?;
    if endian != Endianness::Little {
        return Err("a big-endian ELF file, which this profiler does not read".into());
    }
    let arch = match header.e_machine(endian) {
        EM_X86_64 => Arch::X86_64,
        EM_AARCH64 => Arch::Aarch64,
        other => {
            return Err(format!(
                "an ELF file for machine {other}, not x86_64 or aarch64"
            ))
        }
    };
    let phdrs = header
        .program_headers(endian, data)
        .map_err(|e| format!("malformed program headers ({e})"))?;
    let mut segments = Vec::new();
    let mut build_id = None;
    for ph in phdrs {
        match ph.p_type(endian) {
            PT_LOAD => segments.push(Segment {
                vaddr: ph.p_vaddr(endian),
                offset: ph.p_offset(endian),
                filesz: ph.p_filesz(endian),
                executable: ph.p_flags(endian) & PF_X != 0,
            }),
            PT_NOTE if build_id.is_none() => {
                let Ok(Some(mut notes)) = ph.notes(endian, data) else {
                    continue;
                };
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == b"GNU" && note.n_type(endian) == NT_GNU_BUILD_ID {
                        let desc = note.desc();
                        if !desc.is_empty() && desc.len() <= 64 {
                            build_id = Some(desc.into());
                        }
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Head {
        build_id,
        arch,
        segments,
    })
}

/// The build id of an ELF file from its section headers (`.note.gnu.build-id`): a
/// separate debug file keeps the note, though its segments describe nothing.
pub(crate) fn section_build_id<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> Option<Vec<u8>> {
    elf.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// The bytes of section `name` (decompressed when `SHF_COMPRESSED` with zlib, to at
/// most `max_uncompressed` bytes), with its address range; `None` when the file has no
/// such section or it occupies no bytes in the file.
pub(crate) fn section_bytes<'a, R: ReadRef<'a>>(
    elf: &Elf<'a, R>,
    name: &str,
    max_uncompressed: u64,
) -> Result<Option<(Range<u64>, Bytes)>, String> {
    let Some(section) = elf.section_by_name(name) else {
        return Ok(None);
    };
    let range = section.address()..section.address().saturating_add(section.size());
    let compressed = section.compressed_data().map_err(|e| e.to_string())?;
    let bytes: Arc<[u8]> = match compressed.format {
        CompressionFormat::None => compressed.data.into(),
        CompressionFormat::Zlib => {
            if compressed.uncompressed_size > max_uncompressed {
                return Err(format!(
                    "claims {} bytes uncompressed, more than the {max_uncompressed} left",
                    compressed.uncompressed_size
                ));
            }
            inflate(compressed.data, compressed.uncompressed_size)?
        }
        _ => return Err("compressed in a format this profiler does not read".into()),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some((range, Bytes::new(bytes))))
}

/// The sections framehop unwinds with, each read under what is `left` of the budget,
/// an `.eh_frame_hdr` the unwinder may not trust left out.
pub(crate) fn unwind_sections<'a, R: ReadRef<'a>>(
    elf: &Elf<'a, R>,
    left: &dyn Fn() -> u64,
) -> Result<UnwindSections, String> {
    let section = |name: &str| -> Result<Option<(Range<u64>, Bytes)>, String> {
        section_bytes(elf, name, left()).map_err(|e| format!("section {name}: {e}"))
    };
    let range_of = |name: &str| {
        elf.section_by_name(name)
            .map(|s| s.address()..s.address().saturating_add(s.size()))
    };
    Ok(UnwindSections {
        text_svma: range_of(".text"),
        got_svma: range_of(".got"),
        eh_frame: section(".eh_frame")?,
        eh_frame_hdr: section(".eh_frame_hdr")?,
        debug_frame: section(".debug_frame")?.map(|(_, bytes)| bytes),
    }
    .checked())
}

/// Whether the file has a full symbol table (`.symtab`), not only the dynamic one: a
/// stripped file has not.
pub(crate) fn has_symtab<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> bool {
    elf.section_by_name(".symtab")
        .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData)
}

/// Whether the file carries DWARF (`.debug_info` with bytes in the file).
pub(crate) fn has_dwarf<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> bool {
    elf.section_by_name(".debug_info")
        .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData)
}

/// The DWARF sections, read under what is `left` of the budget, with the index of their
/// units ([`Dwarf`]: a unit is parsed when an address first falls in it). Location lists (`.debug_loc`, `.debug_loclists`: where variables live) are
/// not read: naming frames never looks at them, and they are a good part of a debug
/// file (1.4 of libc's 10 MiB of DWARF).
pub(crate) fn read_dwarf<'a, R: ReadRef<'a>>(
    elf: &Elf<'a, R>,
    left: &dyn Fn() -> u64,
) -> Result<Dwarf, String> {
    let total = std::cell::Cell::new(0usize);
    let load = |id: gimli::SectionId| -> Result<DwarfReader, String> {
        let unused = matches!(
            id,
            gimli::SectionId::DebugLoc | gimli::SectionId::DebugLocLists
        );
        let read = match unused {
            true => None,
            false => section_bytes(elf, id.name(), left())?,
        };
        let bytes = match read {
            Some((_, read)) => read.into_arc(),
            None => Arc::from(&[][..]),
        };
        total.set(total.get() + bytes.len());
        Ok(gimli::EndianArcSlice::new(bytes, gimli::LittleEndian))
    };
    let sections = gimli::DwarfSections::load(load)?;
    Dwarf::new(sections, total.get())
}

/// What `.gnu_debuglink` says: the separate debug file's name and the CRC-32 of its
/// contents. `None` when the section is missing or its name is not a plain file name
/// (empty, with a `/`, `.` or `..`, or not UTF-8): a name that could lead out of the
/// directories it is looked up in is not followed.
pub(crate) fn debuglink<'a, R: ReadRef<'a>>(elf: &Elf<'a, R>) -> Option<(String, u32)> {
    let section = elf.section_by_name(".gnu_debuglink")?;
    let data = section.data().ok()?;
    parse_debuglink(data)
}

/// The name and CRC of a `.gnu_debuglink` section's bytes: the name, a NUL, padding to
/// 4 bytes, then the CRC (GDB's manual, "Debugging Information in Separate Files").
pub(crate) fn parse_debuglink(data: &[u8]) -> Option<(String, u32)> {
    let nul = memchr_nul(data)?;
    let name = std::str::from_utf8(&data[..nul]).ok()?;
    let crc_at = (nul + 1).next_multiple_of(4);
    let crc = u32::from_le_bytes(data.get(crc_at..crc_at + 4)?.try_into().ok()?);
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    plain.then(|| (name.to_owned(), crc))
}

fn memchr_nul(data: &[u8]) -> Option<usize> {
    data.iter().position(|&b| b == 0)
}

/// Whether the `.eh_frame_hdr` at `svma` (`bytes`) is one the unwinder may trust: the
/// encodings every linker writes (GNU ld, gold, lld, mold), pointing at `eh_frame`,
/// with a search table that fits, is sorted, and points into `eh_frame` only.
///
/// gimli searches the table as it is: an entry that points before `.eh_frame` makes
/// it subtract past zero (a panic where overflow is checked). A header that fails here
/// is left out, and framehop indexes `.eh_frame` itself.
pub(crate) fn eh_frame_hdr_is_sound(svma: u64, bytes: &[u8], eh_frame: &Range<u64>) -> bool {
    // version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4.
    const HEADER: [u8; 4] = [1, 0x1b, 0x03, 0x3b];
    let word = |at: usize| -> Option<[u8; 4]> { bytes.get(at..at + 4)?.try_into().ok() };
    let signed = |at: usize| word(at).map(i32::from_le_bytes).map(i64::from);
    let (Some(eh_frame_ptr), Some(count)) = (signed(4), word(8).map(u32::from_le_bytes)) else {
        return false;
    };
    if bytes.get(..4) != Some(&HEADER[..])
        || svma.wrapping_add(4).wrapping_add_signed(eh_frame_ptr) != eh_frame.start
    {
        return false;
    }
    let entries = count as usize;
    if entries.checked_mul(8).and_then(|n| n.checked_add(12)) > Some(bytes.len()) {
        return false;
    }
    let mut previous = i64::MIN;
    (0..entries).all(|i| {
        let (Some(location), Some(fde)) = (signed(12 + 8 * i), signed(16 + 8 * i)) else {
            return false;
        };
        let sorted = location >= previous;
        previous = location;
        sorted && eh_frame.contains(&svma.wrapping_add_signed(fde))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debuglink_names_a_plain_file_only() {
        let link = |name: &[u8], crc: u32| {
            let mut b = name.to_vec();
            b.push(0);
            while !b.len().is_multiple_of(4) {
                b.push(0);
            }
            b.extend_from_slice(&crc.to_le_bytes());
            b
        };
        assert_eq!(
            parse_debuglink(&link(b"libx.so.debug", 0xdead_beef)),
            Some(("libx.so.debug".to_owned(), 0xdead_beef))
        );
        // Exactly four bytes of name: the NUL, then three bytes of padding.
        assert_eq!(
            parse_debuglink(&link(b"abcd", 7)),
            Some(("abcd".to_owned(), 7))
        );
        for bad in [
            &b"../etc/passwd"[..],
            b"a/b.debug",
            b"..",
            b".",
            b"",
            b"\xff.debug",
        ] {
            assert_eq!(parse_debuglink(&link(bad, 1)), None, "{bad:?}");
        }
        // No NUL, or no room for the CRC.
        assert_eq!(parse_debuglink(b"libx.so.debug"), None);
        assert_eq!(parse_debuglink(b"ab\0\0\x01\x02"), None);
    }

    #[test]
    fn eh_frame_hdr_checked_before_it_is_searched() {
        // .eh_frame_hdr at 0x1000, .eh_frame at 0x2000..0x2100; two entries.
        let eh_frame = 0x2000..0x2100;
        let hdr = |entries: &[(i32, i32)], eh_frame_ptr: i32| -> Vec<u8> {
            let mut b = vec![1, 0x1b, 0x03, 0x3b];
            b.extend_from_slice(&eh_frame_ptr.to_le_bytes());
            b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for (location, fde) in entries {
                b.extend_from_slice(&location.to_le_bytes());
                b.extend_from_slice(&fde.to_le_bytes());
            }
            b
        };
        let good = hdr(&[(0x10, 0x1000), (0x20, 0x1010)], 0x1000 - 4);
        assert!(eh_frame_hdr_is_sound(0x1000, &good, &eh_frame));
        // An FDE before .eh_frame (gimli would subtract past zero), or after it.
        let before = hdr(&[(0x10, 0x0ff0), (0x20, 0x1010)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &before, &eh_frame));
        let after = hdr(&[(0x10, 0x1000), (0x20, 0x1100)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &after, &eh_frame));
        // Unsorted, pointing elsewhere, another version, a table longer than the bytes.
        let unsorted = hdr(&[(0x20, 0x1000), (0x10, 0x1010)], 0x1000 - 4);
        assert!(!eh_frame_hdr_is_sound(0x1000, &unsorted, &eh_frame));
        let elsewhere = hdr(&[(0x10, 0x1000)], 0x2000);
        assert!(!eh_frame_hdr_is_sound(0x1000, &elsewhere, &eh_frame));
        let mut version = good.clone();
        version[0] = 2;
        assert!(!eh_frame_hdr_is_sound(0x1000, &version, &eh_frame));
        assert!(!eh_frame_hdr_is_sound(
            0x1000,
            &good[..good.len() - 1],
            &eh_frame
        ));
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(!eh_frame_hdr_is_sound(0x1000, &huge, &eh_frame));
        assert!(!eh_frame_hdr_is_sound(0x1000, &[], &eh_frame));
    }
}
