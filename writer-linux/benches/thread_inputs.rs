//! Inputs shared by `thread_writes.rs` (this crate) and `thread_writes_libdd.rs`
//! (`libdd-otel-thread-ctx` 2.0.1): both benchmarks produce the same record bytes.

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
/// Attribute counts measured.
pub const COUNTS: [usize; 3] = [0, 2, 8];

/// `id` as 16 lowercase hex digits, the way libdd encodes the local root span id.
#[inline]
#[allow(dead_code)] // used by `thread_writes.rs` only: libdd encodes it itself
pub fn hex(id: [u8; 8], out: &mut [u8; 16]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in id.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(byte >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(byte & 0xf)];
    }
    // SAFETY: only ASCII hex digits were written, which are UTF-8.
    unsafe { std::str::from_utf8_unchecked(out) }
}
