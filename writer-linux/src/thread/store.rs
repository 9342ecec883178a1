//! The stores of one attrs-data entry: composed in registers, and emitted as they are.
//!
//! An entry (`key: u8, len: u8, value`) starts at any byte of attrs-data. [`write_entry_at`]
//! writes it with stores of 1, 2, 8 or 16 bytes that the compiler emits as they are
//! (volatile, or one store instruction in `asm!`, which the compiler treats as an opaque
//! memory access): key, length and a value of up to 6 bytes in one 8-byte store, up to 14
//! bytes in two, a 16-byte hex id in two. The protocol (`record.rs`) puts these stores
//! where no reader looks (inside `valid = 0`, or past `attrs_data_size`), between its
//! compiler fences; an 8-byte store may run up to [`WRITE_AHEAD`] bytes past the entry,
//! just as invisible, and the record's block has room for them past its capacity.
//!
//! Entries are stores at their own offsets rather than aligned atomic words because an
//! entry starts at any byte: building aligned words in registers (shifting each entry into
//! place) takes more instructions than it saves stores, and this path is bound by the
//! instructions it runs (measured: slower on every update benchmark). The unaligned 2-, 8-
//! and 16-byte stores are `asm!` ([`store2`], [`store8`], [`store16`]), for x86_64 and
//! aarch64, the only architectures the crate builds for (`thread.rs` refuses the others):
//! stable Rust's only unaligned volatile store, `write_volatile` of a byte array, passes
//! the value through a stack slot (one store and one load more per store).

use core::ptr;

use otel_ctx_codec::attrs::ENTRY_OVERHEAD;

/// Bytes past its end that the write of an entry may store ([`write_entry_at`]): an
/// 8-byte store of an entry of 2 bytes.
pub(crate) const WRITE_AHEAD: usize = 8 - ENTRY_OVERHEAD;

/// Writes the entry `key, len, value` at `dst` ([`write_entry_of_len`] says how).
///
/// Values of up to 22 bytes (nearly all: methods, routes, status codes, hex ids) go
/// through one jump, taken from a table indexed by the length, to a copy of
/// [`write_entry_of_len`] compiled for that constant length: its length tests are gone,
/// its offsets and the header are constants. Longer values take the general code.
///
/// # Safety
/// `dst` must be writable for `2 + value.len() + WRITE_AHEAD` bytes; `value` must be at
/// most 255 bytes.
#[inline(always)]
pub(crate) unsafe fn write_entry_at(dst: *mut u8, key: u8, value: &[u8]) {
    let src = value.as_ptr();
    macro_rules! by_length {
        ($($len:literal)*) => {
            match value.len() {
                // SAFETY: the caller's guarantees; `$len` is the value's length.
                $($len => unsafe { write_entry_of_len(dst, key, src, $len) },)*
                // SAFETY: the caller's guarantees; `len` is the value's length.
                len => unsafe { write_entry_of_len(dst, key, src, len) },
            }
        };
    }
    by_length!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22)
}

/// Writes at `dst` the entry `key, len, value`, the value being the `len` bytes at `src`,
/// composed in registers and stored with few wide stores ([`store8`], [`store16`]):
///
/// | value length | stores |
/// |---|---|
/// | 0 to 6 | one 8-byte word: key, length, value |
/// | 7 | that word with the first 6 bytes, and the last byte |
/// | 8 to 14 | the word with the first 6 bytes, and the last 8 bytes |
/// | 15 | the word, bytes 6 to 14, and the last 8 bytes |
/// | 16 | the key and length (2 bytes), and the value in one 16-byte store |
/// | 17 to 22 | the word, and the last 16 bytes |
/// | 23 and more | the word, then the rest 16 bytes at a time, the last chunk overlapping |
///
/// Overlapping stores write the same bytes twice. An 8-byte store of an entry shorter
/// than 8 bytes runs past it, by up to [`WRITE_AHEAD`] bytes.
///
/// # Safety
/// `src` must be readable for `len` bytes, `len` must be at most 255, and `dst` must be
/// writable for `2 + len + WRITE_AHEAD` bytes.
#[inline(always)]
unsafe fn write_entry_of_len(dst: *mut u8, key: u8, src: *const u8, len: usize) {
    // The key and the length as the first two bytes of a little-endian word.
    let header = u64::from(key) | (len as u64) << 8;
    // SAFETY: every load is inside `src[..len]` (the second of a pair starts at
    // `len - width` with `len >= width`), every store inside the entry or the
    // `WRITE_AHEAD` bytes after it (guaranteed by the caller).
    unsafe {
        if len <= 8 - ENTRY_OVERHEAD {
            store8(dst, header | load_short(src, len) << 16);
        } else if len < 8 {
            // 7 bytes: the first 6 with the header, the last on its own.
            let value = load_short(src, len);
            store8(dst, header | value << 16);
            store1(dst.add(8), (value >> 48) as u8);
        } else if len == 16 {
            // A hex id: the header on its own, the value in one 16-byte load and store.
            store2(dst, header as u16);
            store16(dst.add(ENTRY_OVERHEAD), src);
        } else {
            // 8 bytes or more: the header and the first 6 bytes in one word.
            store8(dst, header | load_u64(src) << 16);
            if len <= 16 - ENTRY_OVERHEAD {
                // The entry's last 8 bytes: the value's last 8.
                store8(dst.add(len - 6), load_u64(src.add(len - 8)));
            } else if len < 16 {
                // 15 bytes: bytes 6 to 14, then the last 8.
                store8(dst.add(8), load_u64(src.add(6)));
                store8(dst.add(len - 6), load_u64(src.add(len - 8)));
            } else if len <= 16 + 6 {
                // The value's last 16 bytes (a hex id is one such load and store).
                store16(dst.add(len - 14), src.add(len - 16));
            } else {
                // The bytes after the first 6, 16 at a time: there are at least 17.
                let mut at = 6;
                while at + 16 < len {
                    store16(dst.add(ENTRY_OVERHEAD + at), src.add(at));
                    at += 16;
                }
                store16(dst.add(len - 14), src.add(len - 16));
            }
        }
    }
}

/// One volatile byte store.
///
/// # Safety
/// `dst` must be writable.
#[inline(always)]
unsafe fn store1(dst: *mut u8, byte: u8) {
    // SAFETY: guaranteed by the caller.
    unsafe { ptr::write_volatile(dst, byte) }
}

/// One 2-byte store of the little-endian `half` at `dst` (no alignment), emitted as it is
/// ([`store8`] says why in `asm!`).
///
/// # Safety
/// `dst` must be writable for 2 bytes.
#[inline(always)]
unsafe fn store2(dst: *mut u8, half: u16) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 2-byte store to `dst`, writable by the caller's guarantee; x86_64 allows
    // it unaligned. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "mov word ptr [{dst}], {half:x}",
            dst = in(reg) dst,
            half = in(reg) half,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: one 2-byte store to `dst`, writable by the caller's guarantee; aarch64
    // allows it unaligned on normal memory. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "strh {half:w}, [{dst}]",
            dst = in(reg) dst,
            half = in(reg) half.to_le(),
            options(nostack, preserves_flags),
        );
    }
}

/// One 8-byte store of the little-endian word `word` at `dst` (no alignment), which the
/// compiler emits as it is: never removed, split, merged or moved across another memory
/// access.
///
/// On x86_64 and aarch64 it is one store instruction in `asm!` (which the compiler treats
/// as an opaque access to memory, at least as strong as a volatile store). Rust's
/// `write_volatile` of a `[u8; 8]` (the only unaligned volatile store on stable Rust)
/// passes the value through a stack slot first: one store and one load more per entry.
///
/// # Safety
/// `dst` must be writable for 8 bytes.
#[inline(always)]
unsafe fn store8(dst: *mut u8, word: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 8-byte store to `dst`, writable by the caller's guarantee; x86_64
    // allows it unaligned. No stack, no flags.
    unsafe {
        core::arch::asm!(
            "mov qword ptr [{dst}], {word}",
            dst = in(reg) dst,
            word = in(reg) word,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: one 8-byte store to `dst`, writable by the caller's guarantee; aarch64
    // allows it unaligned on normal memory (the heap). No stack, no flags.
    unsafe {
        core::arch::asm!(
            "str {word}, [{dst}]",
            dst = in(reg) dst,
            word = in(reg) word.to_le(),
            options(nostack, preserves_flags),
        );
    }
}

/// One 16-byte store at `dst` of the 16 bytes at `src` (neither aligned), emitted as it is
/// ([`store8`] says why in `asm!`).
///
/// # Safety
/// `src` must be readable and `dst` writable for 16 bytes.
#[inline(always)]
unsafe fn store16(dst: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86_64; an unaligned 16-byte load inside `src[..16]` (the
    // caller's guarantee) and one unaligned 16-byte store to `dst`, writable for 16 bytes.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128};
        let bytes = _mm_loadu_si128(src.cast::<__m128i>());
        core::arch::asm!(
            "movups xmmword ptr [{dst}], {bytes}",
            dst = in(reg) dst,
            bytes = in(xmm_reg) bytes,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: NEON is part of aarch64; an unaligned 16-byte load inside `src[..16]` (the
    // caller's guarantee) and one 16-byte store to `dst`, writable for 16 bytes and
    // allowed unaligned on normal memory.
    unsafe {
        use core::arch::aarch64::vld1q_u8;
        let bytes = vld1q_u8(src);
        core::arch::asm!(
            "str {bytes:q}, [{dst}]",
            dst = in(reg) dst,
            bytes = in(vreg) bytes,
            options(nostack, preserves_flags),
        );
    }
}

/// `SHIFT[i]` is `1 << (8 * i)`: a multiplication by it moves bytes up by `i` (one
/// instruction, where a shift by a variable count takes more).
const SHIFT: [u64; 8] = {
    let mut shift = [0; 8];
    let mut i = 0;
    while i < 8 {
        shift[i] = 1 << (8 * i);
        i += 1;
    }
    shift
};

/// The `len` bytes at `src` (at most 7) as a little-endian number, 0 above them. Loads
/// only inside `src[..len]`: two overlapping loads of the largest width that fits.
///
/// # Safety
/// `src` must be readable for `len` bytes.
#[inline(always)]
unsafe fn load_short(src: *const u8, len: usize) -> u64 {
    // SAFETY: every load is inside `src[..len]`: the second of a pair starts at
    // `len - width` with `len >= width`.
    unsafe {
        if len >= 4 {
            let low = u64::from(u32::from_le(src.cast::<u32>().read_unaligned()));
            let high = u64::from(u32::from_le(
                src.add(len - 4).cast::<u32>().read_unaligned(),
            ));
            low | high.wrapping_mul(SHIFT[(len - 4) % 8])
        } else if len >= 2 {
            let low = u64::from(u16::from_le(src.cast::<u16>().read_unaligned()));
            let high = u64::from(u16::from_le(
                src.add(len - 2).cast::<u16>().read_unaligned(),
            ));
            low | high.wrapping_mul(SHIFT[(len - 2) % 8])
        } else if len == 1 {
            u64::from(src.read())
        } else {
            0
        }
    }
}

/// The 8 bytes at `src` as a little-endian number.
///
/// # Safety
/// `src` must be readable for 8 bytes.
#[inline(always)]
unsafe fn load_u64(src: *const u8) -> u64 {
    // SAFETY: guaranteed by the caller; the load is unaligned.
    u64::from_le(unsafe { src.cast::<u64>().read_unaligned() })
}
