//! A module's DWARF, parsed one compilation unit at a time, when an address first falls
//! in it.
//!
//! addr2line parses every unit of a file when its context is made: each unit's
//! abbreviations and line program header. For libc's debug file that is 4,400 units and
//! about 21 MiB, of which a profile needs a few dozen. Here a file's sections are kept,
//! with an index of which unit covers which addresses (from `.debug_aranges`, or from a
//! unit's own ranges where that section leaves it out, the unit parsed and dropped at
//! once). A lookup parses the one unit that covers the address, as an addr2line context
//! of its own over the same sections, and keeps it (at most [`MAX_PARSED_UNITS`]).
//!
//! A unit's context sees only that unit of `.debug_info`: a reference into another unit
//! (`DW_FORM_ref_addr`, as link-time optimization and `dwz` write) is not followed, and
//! the frame it would have named takes the symbol table's name instead.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use gimli::{Reader, Section, UnitType};

use crate::bytes::DwarfReader;

/// Units a module keeps parsed; past that, they are parsed again as needed.
pub(crate) const MAX_PARSED_UNITS: usize = 256;

/// Units whose ranges claim one address that a lookup parses, at most (a file whose
/// units all claim every address costs that many parses, not all of them).
const MAX_TRIED: usize = 8;

/// Inlined frames given for one address, at most.
const MAX_INLINE_DEPTH: usize = 64;

/// One frame of an address: the function's name (demangled), and its file and line.
pub(crate) type Frame = (Option<String>, Option<String>, Option<u32>);

/// The addresses one unit covers.
#[derive(Clone, Copy, Debug)]
struct Span {
    begin: u64,
    end: u64,
    unit: u32,
}

/// A module's DWARF: its sections, which unit covers which addresses, and the units
/// parsed so far.
pub(crate) struct Dwarf {
    sections: gimli::DwarfSections<DwarfReader>,
    /// Sorted by `begin`.
    spans: Box<[Span]>,
    /// The largest `end` of `spans[..=i]`: where a search by address may stop.
    max_end: Box<[u64]>,
    /// Each unit's bytes in `.debug_info` (offset, length).
    units: Box<[(usize, usize)]>,
    parsed: RefCell<HashMap<u32, Rc<addr2line::Context<DwarfReader>>>>,
    bytes: usize,
}

impl std::fmt::Debug for Dwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dwarf")
            .field("units", &self.units.len())
            .field("spans", &self.spans.len())
            .field("parsed", &self.parsed.borrow().len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Dwarf {
    /// Indexes the units of `sections` (each section's bytes, empty where the file has
    /// none; `bytes` in all). Fails only when `.debug_info` cannot be walked at all; a unit that cannot
    /// be read is left out.
    pub fn new(sections: gimli::DwarfSections<DwarfReader>, bytes: usize) -> Result<Self, String> {
        let dwarf = sections.borrow(|section| section.clone());
        let info_len = dwarf.debug_info.reader().len();

        // What `.debug_aranges` says, by the offset of the unit it describes. A header
        // or entry that does not parse ends what is taken from the section.
        let mut aranges: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Ok(Some(header)) = headers.next() {
            let ranges = aranges.entry(header.debug_info_offset().0).or_default();
            let mut entries = header.entries();
            while let Ok(Some(entry)) = entries.next() {
                let range = entry.range();
                if range.begin < range.end {
                    ranges.push((range.begin, range.end));
                }
            }
        }

        let mut units = Vec::new();
        let mut spans = Vec::new();
        let mut headers = dwarf.units();
        loop {
            let header = match headers.next() {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(e) if units.is_empty() => return Err(format!("malformed DWARF ({e})")),
                Err(_) => break,
            };
            let Some(offset) = header.debug_info_offset() else {
                continue;
            };
            let (start, len) = (offset.0, header.length_including_self());
            if start.checked_add(len).is_none_or(|end| end > info_len) {
                break;
            }
            // Type units and partial units name no code of their own.
            if matches!(
                header.type_(),
                UnitType::Type { .. } | UnitType::SplitType { .. } | UnitType::Partial
            ) {
                continue;
            }
            let Ok(index) = u32::try_from(units.len()) else {
                break;
            };
            units.push((start, len));
            let mut add = |begin: u64, end: u64| {
                if begin < end {
                    spans.push(Span {
                        begin,
                        end,
                        unit: index,
                    });
                }
            };
            match aranges.remove(&start) {
                Some(ranges) if !ranges.is_empty() => {
                    ranges.into_iter().for_each(|(b, e)| add(b, e));
                }
                // Not in `.debug_aranges`: the unit's own ranges, read from its root
                // entry, and the unit dropped.
                _ => {
                    let Ok(unit) = dwarf.unit(header) else {
                        continue;
                    };
                    if let Ok(mut ranges) = dwarf.unit_ranges(&unit) {
                        while let Ok(Some(range)) = ranges.next() {
                            add(range.begin, range.end);
                        }
                    }
                }
            }
        }
        spans.sort_unstable_by_key(|s| (s.begin, s.end));
        let max_end = spans
            .iter()
            .scan(0u64, |max, s| {
                *max = (*max).max(s.end);
                Some(*max)
            })
            .collect();
        Ok(Self {
            sections,
            spans: spans.into(),
            max_end,
            units: units.into(),
            parsed: RefCell::new(HashMap::new()),
            bytes,
        })
    }

    /// The bytes of the sections kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many compilation units the file has.
    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// How many units have been parsed and are kept.
    pub fn units_parsed(&self) -> usize {
        self.parsed.borrow().len()
    }

    /// The frames at `svma`, innermost first (an inlined function, then the one it was
    /// inlined into, and so on out to the function the code belongs to); the file and
    /// line only when `lines` is asked. Empty when no unit covers `svma`.
    pub fn frames(&self, svma: u64, lines: bool) -> Vec<Frame> {
        // The spans that begin at or before `svma`, scanned back while one could still
        // reach it.
        let mut at = self.spans.partition_point(|s| s.begin <= svma);
        let mut tried: Vec<u32> = Vec::new();
        while at > 0 && self.max_end[at - 1] > svma && tried.len() < MAX_TRIED {
            at -= 1;
            let span = self.spans[at];
            if span.end <= svma || tried.contains(&span.unit) {
                continue;
            }
            tried.push(span.unit);
            let Some(context) = self.unit(span.unit) else {
                continue;
            };
            let found = frames_of(&context, svma, lines);
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// The context of unit `index`, parsed now if it is not yet.
    fn unit(&self, index: u32) -> Option<Rc<addr2line::Context<DwarfReader>>> {
        if let Some(context) = self.parsed.borrow().get(&index) {
            return Some(context.clone());
        }
        let &(start, len) = self.units.get(index as usize)?;
        let mut dwarf = self.sections.borrow(|section| section.clone());
        // Only this unit of `.debug_info`; no `.debug_aranges`, whose offsets are the
        // whole section's (addr2line reads the unit's ranges from its root entry).
        let info = dwarf.debug_info.reader().range(start..start + len);
        dwarf.debug_info = info.into();
        dwarf.debug_aranges = DwarfReader::new(Arc::from(&[][..]), gimli::LittleEndian).into();
        let context = Rc::new(addr2line::Context::from_dwarf(dwarf).ok()?);
        let mut parsed = self.parsed.borrow_mut();
        if parsed.len() >= MAX_PARSED_UNITS {
            parsed.clear();
        }
        parsed.insert(index, context.clone());
        Some(context)
    }
}

/// The frames addr2line gives for `svma` in one unit's context.
fn frames_of(context: &addr2line::Context<DwarfReader>, svma: u64, lines: bool) -> Vec<Frame> {
    let mut out = Vec::new();
    let Ok(mut frames) = context.find_frames(svma).skip_all_loads() else {
        return out;
    };
    while let Ok(Some(frame)) = frames.next() {
        if out.len() >= MAX_INLINE_DEPTH {
            break;
        }
        let name = frame
            .function
            .as_ref()
            .and_then(|f| f.demangle().ok())
            .map(std::borrow::Cow::into_owned);
        let (file, line) = match (&frame.location, lines) {
            (Some(location), true) => (location.file.map(str::to_owned), location.line),
            _ => (None, None),
        };
        out.push((name, file, line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn dwarf_marker_function(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    fn reader(bytes: &[u8]) -> DwarfReader {
        DwarfReader::new(Arc::from(bytes), gimli::LittleEndian)
    }

    /// Sections with `info` as `.debug_info` and nothing else.
    fn with_info(info: &[u8]) -> Result<Dwarf, String> {
        let sections = gimli::DwarfSections::load(|id| {
            Ok::<_, String>(match id {
                gimli::SectionId::DebugInfo => reader(info),
                _ => reader(&[]),
            })
        })?;
        Dwarf::new(sections, info.len())
    }

    #[test]
    fn empty_lying_and_garbage_sections_give_no_frames() {
        let empty = with_info(&[]).expect("no DWARF is not an error");
        assert_eq!((empty.units(), empty.bytes()), (0, 0));
        assert!(empty.frames(0x1000, true).is_empty());
        // A DWARF 5 unit header that claims more bytes than the section holds.
        let lying = [0xf0, 0xff, 0, 0, 5, 0, 1, 8, 0, 0, 0, 0];
        if let Ok(dwarf) = with_info(&lying) {
            assert_eq!(dwarf.units(), 0);
            assert!(dwarf.frames(0, true).is_empty());
        }
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        if let Ok(dwarf) = with_info(&garbage) {
            for address in [0, 0x1000, u64::MAX] {
                let _ = dwarf.frames(address, true);
            }
        }
    }

    #[test]
    fn an_address_parses_the_one_unit_that_covers_it() {
        let exe = std::fs::read("/proc/self/exe").expect("this test's executable");
        let elf = crate::elf::Elf::<&[u8]>::parse(&exe[..]).expect("an ELF file");
        let dwarf = crate::elf::read_dwarf(&elf, &|| u64::MAX).expect("its DWARF");
        assert!(dwarf.units() > 1, "{dwarf:?}");
        assert_eq!(dwarf.units_parsed(), 0);
        // The test executable is position-independent, its first segment at address 0:
        // an address of the file is one of the process less where offset 0 is mapped.
        let path = std::fs::read_link("/proc/self/exe").expect("its path");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let base = maps
            .lines()
            .filter(|l| l.ends_with(path.to_str().expect("utf-8")))
            .find(|l| {
                l.split_whitespace()
                    .nth(2)
                    .is_some_and(|o| u64::from_str_radix(o, 16) == Ok(0))
            })
            .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .expect("the executable's first mapping");
        let svma = dwarf_marker_function as *const () as usize as u64 - base;
        let frames = dwarf.frames(svma, true);
        assert!(
            frames.iter().any(|(name, file, line)| {
                name.as_deref()
                    .is_some_and(|n| n.ends_with("dwarf_marker_function"))
                    && file.as_deref().is_some_and(|f| f.ends_with("dwarf.rs"))
                    && line.is_some()
            }),
            "{frames:?}"
        );
        assert_eq!(dwarf.units_parsed(), 1);
        // Without lines, the same function; the unit is parsed once.
        let names = dwarf.frames(svma, false);
        assert!(names
            .iter()
            .all(|(_, file, line)| file.is_none() && line.is_none()));
        assert_eq!(names.len(), frames.len());
        assert_eq!(dwarf.units_parsed(), 1);
        assert_eq!(dwarf_marker_function(2), 6);
    }
}
