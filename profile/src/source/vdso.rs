//! The vDSO: a small shared object the kernel maps into every process (`[vdso]` in its
//! maps), whose code `clock_gettime`, `gettimeofday` and `getcpu` run without a system
//! call. It has no file to open: its image is copied out of the target's memory, and
//! read like a module's file for its symbols (`.dynsym`) and its CFI (`.eh_frame`), so
//! that a walk continues through it to its caller.

use std::ops::Range;

use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};

use crate::elf::{self, Elf};
use crate::module::data::{ModuleData, ModuleKey, Names, SkipReason};
use crate::source::SymbolSource;
use crate::symbolize::SymbolTable;

/// The largest vDSO image read (they are two pages on x86_64 and aarch64).
pub(crate) const MAX_VDSO: u64 = 1 << 20;

/// The vDSO of process `pid`, mapped at `range`, read from its memory.
pub(crate) fn read(pid: u32, range: &Range<u64>) -> Result<ModuleData, SkipReason> {
    let len = range.end.saturating_sub(range.start);
    if len == 0 || len > MAX_VDSO {
        return Err(SkipReason::new(format!(
            "a [vdso] mapping of {len} bytes, not the small image a vDSO is"
        )));
    }
    let mut image = vec![0u8; len as usize];
    ProcessMemory::new(pid, ReadMethod::Auto)
        .read_exact(range.start, &mut image)
        .map_err(|e| SkipReason::new(format!("its image could not be read: {e}")))?;
    parse(&image, range.start)
}

/// A vDSO image (`image`, as mapped at `start`) read as a module.
pub(crate) fn parse(image: &[u8], start: u64) -> Result<ModuleData, SkipReason> {
    let head = elf::read_head(image).map_err(SkipReason::new)?;
    let elf = Elf::<&[u8]>::parse(image)
        .map_err(|e| SkipReason::new(format!("malformed vDSO image ({e})")))?;
    let unwind = elf::unwind_sections(&elf, &|| MAX_VDSO).map_err(SkipReason::new)?;
    let symbols = SymbolTable::read(&elf);
    let key = match &head.build_id {
        Some(id) => ModuleKey::BuildId(id.clone()),
        // Each process's image is its own: no other module shares its key.
        None => ModuleKey::File {
            dev: 0,
            inode: start,
        },
    };
    let names = Names {
        symbols,
        dwarf: None,
        dwarf_note: None,
        sources: vec![SymbolSource::Vdso],
        // Its dynamic symbols are all the names it has.
        full: true,
        missing: None,
    };
    Ok(ModuleData::new(
        key,
        head,
        unwind,
        names,
        image.len() as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_vdso_named_and_unwindable() {
        let maps = otel_ctx_reader::ProcessMaps::read(std::process::id()).unwrap();
        let Some(range) = maps.vdso else {
            // A kernel booted with vdso=0 maps none: nothing to read.
            eprintln!("this process has no [vdso] mapping");
            return;
        };
        let module = read(std::process::id(), &range).unwrap();
        assert!(module.unwind.eh_frame.is_some(), "{module:?}");
        let names = module.names.borrow();
        let (name, start) = names
            .symbols
            .lookup(
                // An address inside clock_gettime: its symbol's, found by name.
                (0..u64::from(u16::MAX))
                    .find(|&a| {
                        names
                            .symbols
                            .lookup(a)
                            .is_some_and(|(n, _)| n.contains("clock_gettime"))
                    })
                    .unwrap(),
            )
            .unwrap();
        assert!(name.contains("clock_gettime"), "{name} at {start:#x}");
        // The global name wins over the weak alias at the same address.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(name, "__vdso_clock_gettime");
        drop(names);
        let range = [otel_ctx_reader::maps::FileRange {
            start: range.start,
            end: range.end,
            offset: 0,
            perms: *b"r-xp",
        }];
        assert!(module.bias(&range).is_some());
        // Too large, or empty, is refused before anything is read.
        assert!(read(std::process::id(), &(0..MAX_VDSO + 1)).is_err());
        assert!(read(std::process::id(), &(0..0)).is_err());
        assert!(parse(b"\x7fELF and then nothing", 0).is_err());
    }
}
