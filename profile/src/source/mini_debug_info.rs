//! MiniDebugInfo: the `.gnu_debugdata` section Fedora and its kin put in their
//! binaries, an xz-compressed ELF file holding the function symbols `.dynsym` lacks
//! (GDB's manual, "Debugging information in a special section"). Decompressed by
//! lzma-rs into memory, at most the module budget's bytes, within its time.

use std::io::Write;
use std::time::Instant;

use otel_ctx_reader::files::FileBudget;

use super::{DebugNames, Missing, SymbolSource, UnknownCause};
use crate::bytes::Bytes;
use crate::elf::{self, Elf};
use crate::symbolize::SymbolTable;

/// The decompressed symbols of `compressed` (the section's bytes).
pub(crate) fn load(compressed: &Bytes, budget: FileBudget) -> Result<DebugNames, Missing> {
    let image = decompress(compressed, budget)?;
    let elf = Elf::<&[u8]>::parse(&image[..]).map_err(|e| {
        Missing::new(
            UnknownCause::MissingDebugFile,
            format!(".gnu_debugdata does not hold an ELF file ({e})"),
        )
    })?;
    let symbols = SymbolTable::read(&elf);
    if symbols.len() == 0 {
        return Err(Missing::new(
            UnknownCause::MissingDebugFile,
            ".gnu_debugdata holds no function symbols",
        ));
    }
    Ok(DebugNames {
        source: SymbolSource::MiniDebugInfo,
        symbols,
        full: elf::has_symtab(&elf),
        dwarf: None,
        dwarf_note: None,
    })
}

/// Where the decompressed bytes go: at most `max` of them, and none after the
/// deadline.
struct Bounded {
    out: Vec<u8>,
    max: u64,
    deadline: Instant,
    exceeded: Option<String>,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() as u64 + buf.len() as u64 > self.max {
            self.exceeded = Some(format!(
                "more than the {} MiB a file may cost",
                self.max >> 20
            ));
        } else if Instant::now() > self.deadline {
            self.exceeded = Some("longer than a file may take".to_owned());
        }
        if let Some(why) = &self.exceeded {
            return Err(std::io::Error::other(why.clone()));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The xz stream `compressed`, decompressed within `budget`.
fn decompress(compressed: &[u8], budget: FileBudget) -> Result<Vec<u8>, Missing> {
    let mut out = Bounded {
        out: Vec::new(),
        max: budget.max_bytes,
        deadline: Instant::now() + budget.max_time,
        exceeded: None,
    };
    let mut input = compressed;
    match lzma_rs::xz_decompress(&mut input, &mut out) {
        Ok(()) => Ok(out.out),
        Err(e) => Err(match out.exceeded {
            Some(why) => Missing::new(
                UnknownCause::Budget,
                format!(".gnu_debugdata decompresses to {why}"),
            ),
            None => Missing::new(
                UnknownCause::MissingDebugFile,
                format!(".gnu_debugdata is not a valid xz stream ({e})"),
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut out).unwrap();
        out
    }

    #[test]
    fn decompression_is_bounded() {
        let data = vec![7u8; 1 << 20];
        let budget = FileBudget::default();
        assert_eq!(decompress(&xz(&data), budget).unwrap(), data);
        let small = budget.with_max_bytes(64 * 1024);
        let over = decompress(&xz(&data), small).unwrap_err();
        assert_eq!(over.cause, UnknownCause::Budget, "{}", over.reason);
        let bad = decompress(b"not xz at all", budget).unwrap_err();
        assert_eq!(bad.cause, UnknownCause::MissingDebugFile, "{}", bad.reason);
        // Valid xz of something that is no ELF file.
        let not_elf = load(&Bytes::new(xz(b"plain text").into()), budget)
            .err()
            .unwrap();
        assert!(not_elf.reason.contains("ELF"), "{}", not_elf.reason);
    }
}
