//! The program's look at itself the way a reader looks at it: the TLS slot's address from
//! the executable's symbol table and `PT_TLS` segment (the local-exec formula of the
//! reader), and the published process context and record decoded by the codec.

use otel_ctx_codec::record::{RecordView, MAX_RECORD_SIZE};

use crate::tls::round_up;

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const PT_TLS: u32 = 7;
const STT_TLS: u8 = 6;
const SYMBOL: &[u8] = b"otel_thread_ctx_v1";

/// Where the symbol was found and what the formula gives.
pub struct SlotOffset {
    /// `.dynsym` or `.symtab`.
    pub table: &'static str,
    pub st_value: u64,
    /// The slot's offset from the thread pointer.
    pub offset: i64,
}

fn u16_at(file: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(file.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(file: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(file.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(file: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(file.get(at..at + 8)?.try_into().ok()?))
}

/// The NUL-terminated name at `at` in a string table.
fn name_at(strtab: &[u8], at: usize) -> Option<&[u8]> {
    let rest = strtab.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(&rest[..end])
}

/// `st_value` of `otel_thread_ctx_v1` (an `STT_TLS` symbol) in the section of type
/// `kind`, if the file has one that defines it.
fn find_symbol(file: &[u8], kind: u32) -> Option<u64> {
    let shoff = u64_at(file, 0x28)? as usize;
    let shentsize = usize::from(u16_at(file, 0x3a)?);
    let shnum = usize::from(u16_at(file, 0x3c)?);
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        if u32_at(file, sh + 4)? != kind {
            continue;
        }
        let offset = u64_at(file, sh + 24)? as usize;
        let size = u64_at(file, sh + 32)? as usize;
        let link = u32_at(file, sh + 40)? as usize;
        let entsize = (u64_at(file, sh + 56)? as usize).max(24);
        let str_sh = shoff + link * shentsize;
        let str_offset = u64_at(file, str_sh + 24)? as usize;
        let str_size = u64_at(file, str_sh + 32)? as usize;
        let strtab = file.get(str_offset..str_offset.checked_add(str_size)?)?;
        for sym in (offset..offset + size).step_by(entsize) {
            let name = name_at(strtab, u32_at(file, sym)? as usize)?;
            let info = *file.get(sym + 4)?;
            let shndx = u16_at(file, sym + 6)?;
            if name == SYMBOL && info & 0xf == STT_TLS && shndx != 0 {
                return u64_at(file, sym + 8);
            }
        }
    }
    None
}

/// `p_memsz` and `p_align` of the file's `PT_TLS`.
fn tls_segment(file: &[u8]) -> Option<(u64, u64)> {
    let phoff = u64_at(file, 0x20)? as usize;
    let phentsize = usize::from(u16_at(file, 0x36)?);
    let phnum = usize::from(u16_at(file, 0x38)?);
    (0..phnum).find_map(|i| {
        let ph = phoff + i * phentsize;
        (u32_at(file, ph)? == PT_TLS).then_some(())?;
        Some((u64_at(file, ph + 40)?, u64_at(file, ph + 48)?.max(1)))
    })
}

/// The slot's offset from the thread pointer, as a reader computes it for an executable
/// whose accesses the linker relaxed to local exec: the symbol in `.dynsym` (else
/// `.symtab`), and the TLS segment's size and alignment.
pub fn slot_offset(file: &[u8]) -> Result<SlotOffset, &'static str> {
    if file.get(..4) != Some(b"\x7fELF".as_slice()) || file.get(4) != Some(&2) {
        return Err("/proc/self/exe is not a 64-bit ELF file");
    }
    let (table, st_value) = match find_symbol(file, SHT_DYNSYM) {
        Some(value) => (".dynsym", value),
        None => (
            ".symtab",
            find_symbol(file, SHT_SYMTAB).ok_or("otel_thread_ctx_v1 is in no symbol table")?,
        ),
    };
    let (memsz, align) = tls_segment(file).ok_or("the executable has no PT_TLS segment")?;
    let (memsz, align, value) = (memsz as usize, align as usize, st_value as i64);
    #[cfg(target_arch = "x86_64")]
    // Variant II: the block ends at the thread pointer.
    let offset = value - round_up(memsz, align) as i64;
    #[cfg(target_arch = "aarch64")]
    // Variant I: a 16-byte control block, then the block, aligned.
    let offset = {
        let _ = memsz;
        round_up(16, align) as i64 + value
    };
    Ok(SlotOffset {
        table,
        st_value,
        offset,
    })
}

/// The record at `record` copied the way a reader copies it (the header, then
/// `attrs_data_size` bytes) into `buf`, and parsed.
///
/// # Safety
/// `record` must point at a record of this process that nothing writes meanwhile.
pub unsafe fn read_record(
    record: *const u8,
    buf: &mut [u8; MAX_RECORD_SIZE],
) -> Result<RecordView<'_>, &'static str> {
    // SAFETY: the caller's guarantee: a record is at least its 28-byte header.
    let header = unsafe { core::slice::from_raw_parts(record, 28) };
    let size = 28 + usize::from(u16::from_ne_bytes([header[26], header[27]]));
    if size > MAX_RECORD_SIZE {
        return Err("the record is larger than readers copy");
    }
    // SAFETY: as above, `size` bytes of the record.
    buf[..size].copy_from_slice(unsafe { core::slice::from_raw_parts(record, size) });
    RecordView::parse(&buf[..size], MAX_RECORD_SIZE).map_err(|_| "the record does not parse")
}
