//! Inputs shared by `thread_writes.rs` (this crate), `thread_writes_libdd.rs`
//! (`libdd-otel-thread-ctx` 2.0.1) and `thread_writes_custom_labels.rs` (`custom-labels`
//! 0.4.6): the same ids, values and counts, so that the rows compared write the same bytes.

// Each benchmark binary uses part of these inputs.
#![allow(dead_code)]

/// Trace id of every update.
pub const TRACE_ID: [u8; 16] = [
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36,
];
/// Span id of every update.
pub const SPAN_ID: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
/// Local root span id: libdd always writes it, as 16 lowercase hex digits under key 0.
pub const LOCAL_ROOT_SPAN_ID: [u8; 8] = [0x53, 0x99, 0x5c, 0x3f, 0x42, 0xcd, 0x8a, 0xd8];
/// Attribute values (keys 1..=8).
pub const VALUES: [&str; 8] = [
    "GET",
    "/api/v1/users/:id",
    "checkout",
    "eu-west-1",
    "tenant-4711",
    "200",
    "grpc",
    "premium",
];
/// Label names for the first two values, for custom-labels (which keys labels by name).
pub const LABEL_KEYS: [&str; 2] = ["http.request.method", "http.route"];

/// The first `N` entries of `template`, as a caller builds its attribute list on each call
/// (one copy; the template is passed through `black_box` by the caller, so the optimizer
/// cannot fold the values in).
#[inline(always)]
pub fn first<const N: usize, T: Copy>(template: &[T]) -> [T; N] {
    match template[..N].try_into() {
        Ok(list) => list,
        Err(_) => unreachable!("a slice of N elements converts to [T; N]"),
    }
}

/// `id` as 16 lowercase hex digits, one table look-up and one byte store per digit: the
/// algorithm libdd uses for the local root span id.
#[inline]
pub fn hex_table(id: [u8; 8], out: &mut [u8; 16]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in id.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(byte >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
    }
    // SAFETY: only ASCII hex digits were written, which are UTF-8.
    unsafe { std::str::from_utf8_unchecked(out) }
}

/// `id` as 16 lowercase hex digits, computed in registers and stored with one 16-byte
/// store (SSE2 on x86_64, 8 digits per `u64` elsewhere): the encoding a caller of this
/// crate that keeps the id as bytes can use.
///
/// The single wide store matters as much as the arithmetic: the record writer copies a
/// 16-byte value with one 16-byte load, which the CPU can serve from one earlier store
/// but not from several narrower ones (that load waits for them to reach the cache).
#[inline]
pub fn hex_wide(id: [u8; 8], out: &mut [u8; 16]) -> &str {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            __m128i, _mm_add_epi8, _mm_and_si128, _mm_cmpgt_epi8, _mm_loadl_epi64, _mm_set1_epi8,
            _mm_srli_epi16, _mm_storeu_si128, _mm_unpacklo_epi8,
        };
        // SAFETY: SSE2 is part of x86_64. `id` is 8 readable bytes (the low half of the
        // loaded vector); `out` is 16 writable bytes; both accesses are unaligned ones.
        unsafe {
            let bytes = _mm_loadl_epi64(id.as_ptr().cast::<__m128i>());
            let low_nibble = _mm_set1_epi8(0x0f);
            let high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibble);
            let low = _mm_and_si128(bytes, low_nibble);
            // Digit 2i: the high nibble of byte i; digit 2i + 1: its low nibble.
            let nibbles = _mm_unpacklo_epi8(high, low);
            // '0' + nibble, and 39 more for nibbles over 9 ('a' is '0' + 10 + 39).
            let over_nine =
                _mm_and_si128(_mm_cmpgt_epi8(nibbles, _mm_set1_epi8(9)), _mm_set1_epi8(39));
            let digits = _mm_add_epi8(_mm_add_epi8(nibbles, _mm_set1_epi8(b'0' as i8)), over_nine);
            _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), digits);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let first = hex_digits_of_4(u32::from_le_bytes([id[0], id[1], id[2], id[3]]));
        let last = hex_digits_of_4(u32::from_le_bytes([id[4], id[5], id[6], id[7]]));
        *out = (u128::from(first) | (u128::from(last) << 64)).to_le_bytes();
    }
    // SAFETY: only ASCII hex digits were written, which are UTF-8.
    unsafe { std::str::from_utf8_unchecked(out) }
}

/// The 8 hex digits of the 4 bytes of `x` (byte 0 is the least significant), as the bytes
/// of a little-endian `u64`: digit `2i` is the high nibble of byte `i`, digit `2i + 1` its
/// low nibble.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn hex_digits_of_4(x: u32) -> u64 {
    let mut x = u64::from(x);
    // Byte i moves to byte 2i.
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    // Byte 2i: the high nibble of byte i; byte 2i + 1: its low nibble.
    let nibbles = ((x >> 4) & 0x000f_000f_000f_000f) | ((x & 0x000f_000f_000f_000f) << 8);
    // Nibbles 0-9 become '0'-'9' (+ 0x30); 10-15 become 'a'-'f' (+ 0x30 + 39). A nibble
    // over 9 carries into bit 4 when 6 is added; no byte overflows into the next.
    let over_nine = ((nibbles + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    nibbles + 0x3030_3030_3030_3030 + over_nine * 39
}

/// Panics unless [`hex_wide`] and [`hex_table`] agree on `LOCAL_ROOT_SPAN_ID` and on ids
/// that cover every nibble in every position.
pub fn check_hex() {
    let mut ids = vec![LOCAL_ROOT_SPAN_ID, [0; 8], [0xff; 8]];
    for nibble in 0..16u8 {
        ids.push([nibble * 0x11; 8]);
        ids.push(core::array::from_fn(|i| {
            (nibble + i as u8) % 16 * 16 + nibble
        }));
    }
    for id in ids {
        let (mut a, mut b) = ([0; 16], [0; 16]);
        assert_eq!(
            hex_wide(id, &mut a),
            hex_table(id, &mut b),
            "hex of {id:02x?}"
        );
    }
}
