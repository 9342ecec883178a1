//! A separate debug file (found by build id, by `.gnu_debuglink`, or fetched from a
//! debuginfod server): checked to be the module's own, then read like a module, under
//! the same budget: its full symbol table and its DWARF.

use std::io::Read;

use otel_ctx_reader::files::{
    BoundedRead, BudgetedFile, BudgetedReader, FileBudget, Root, TargetFile,
};

use super::{DebugNames, Lookup, Missing, SymbolSource, UnknownCause};
use crate::elf::{self, Elf};
use crate::symbolize::SymbolTable;

/// How a debug file must show that it belongs to the module.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expect<'a> {
    /// Its build-id note is the module's.
    BuildId(&'a [u8]),
    /// The CRC-32 of its whole contents is the one `.gnu_debuglink` names.
    Crc(u32),
}

/// Reads the debug file `opened` (at `path` in `root`, found for the module of
/// `lookup`), once it shows it is the module's.
pub(crate) fn load(
    opened: TargetFile,
    path: &str,
    root: Root,
    expect: Expect<'_>,
    lookup: &Lookup<'_>,
) -> Result<DebugNames, Missing> {
    let source = match expect {
        Expect::BuildId(_) => SymbolSource::BuildId {
            path: path.to_owned(),
            root,
        },
        Expect::Crc(_) => SymbolSource::DebugLink {
            path: path.to_owned(),
            root,
        },
    };
    let at = format!("{path} ({root})");
    read(
        opened,
        &at,
        source,
        expect,
        lookup.budget,
        lookup.debug_info,
    )
}

/// Reads a debug file already opened, `at` naming it in what is reported.
pub(crate) fn read(
    opened: TargetFile,
    at: &str,
    source: SymbolSource,
    expect: Expect<'_>,
    budget: FileBudget,
    debug_info: bool,
) -> Result<DebugNames, Missing> {
    let TargetFile { file, size, .. } = opened;
    if let Expect::Crc(crc) = expect {
        if size > budget.max_bytes {
            return Err(Missing::new(
                UnknownCause::Budget,
                format!(
                    "{at}: {} MiB, more than the {} MiB a file may cost, so its CRC cannot be \
                     checked",
                    size >> 20,
                    budget.max_bytes >> 20
                ),
            ));
        }
        let file = file
            .try_clone()
            .map_err(|e| Missing::new(UnknownCause::MissingDebugFile, format!("{at}: {e}")))?;
        let found = crc32(BudgetedReader::new(file, 0, budget)).map_err(|e| {
            Missing::new(
                UnknownCause::Budget,
                format!("{at}: its CRC could not be computed ({e})"),
            )
        })?;
        if found != crc {
            return Err(Missing::new(
                UnknownCause::MissingDebugFile,
                format!(
                    "{at}: its CRC-32 is {found:#010x}, not the {crc:#010x} the module's \
                     .gnu_debuglink names: another build's debug file, not used"
                ),
            ));
        }
    }
    let budgeted = BudgetedFile::new(file, size, budget);
    let over = |budgeted: &BudgetedFile, what: String| match budgeted.exceeded() {
        Some(exceeded) => Missing::new(UnknownCause::Budget, format!("{at}: {exceeded}")),
        None => Missing::new(UnknownCause::MissingDebugFile, format!("{at}: {what}")),
    };
    let elf = Elf::<BoundedRead<'_>>::parse(budgeted.read())
        .map_err(|e| over(&budgeted, format!("not an ELF file ({e})")))?;
    if let Expect::BuildId(id) = expect {
        match elf::section_build_id(&elf) {
            Some(found) if found == id => {}
            found => {
                return Err(over(
                    &budgeted,
                    format!(
                        "has build id {}, not the module's {}: not used",
                        found
                            .as_deref()
                            .map_or_else(|| "none".to_owned(), crate::hex),
                        crate::hex(id)
                    ),
                ))
            }
        }
    }
    let symbols = SymbolTable::read(&elf);
    let full = elf::has_symtab(&elf);
    if budgeted.exceeded().is_some() {
        return Err(over(&budgeted, String::new()));
    }
    let left = || budget.max_bytes.saturating_sub(budgeted.bytes_read());
    let (dwarf, dwarf_note) = match debug_info && elf::has_dwarf(&elf) {
        false => (None, None),
        true => match elf::read_dwarf(&elf, &left) {
            Ok(context) => (Some(context), None),
            Err(e) => (
                None,
                Some(match budgeted.exceeded() {
                    Some(exceeded) => format!("debug info of {at} left out: {exceeded}"),
                    None => format!("debug info of {at} left out: {e}"),
                }),
            ),
        },
    };
    if !full && dwarf.is_none() {
        return Err(Missing::new(
            UnknownCause::MissingDebugFile,
            format!("{at} has neither a symbol table nor debug info"),
        ));
    }
    Ok(DebugNames {
        source,
        symbols,
        full,
        dwarf,
        dwarf_note,
    })
}

/// The CRC-32 (IEEE, as `.gnu_debuglink` uses) of everything `reader` reads.
fn crc32(mut reader: impl Read) -> std::io::Result<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf)? {
            0 => return Ok(hasher.finalize()),
            n => hasher.update(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_of_gnu_debuglink_is_ieee_crc32() {
        // The check value of CRC-32/ISO-HDLC, the CRC of zlib and .gnu_debuglink.
        assert_eq!(crc32(&b"123456789"[..]).unwrap(), 0xcbf4_3926);
        assert_eq!(crc32(&b""[..]).unwrap(), 0);
    }
}
