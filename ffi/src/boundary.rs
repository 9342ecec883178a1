//! What every exported function shares: panics caught at the boundary, static error
//! messages, and the reading of C strings and NULL-terminated arrays under hard bounds.
//!
//! Every dereference of a pointer that C handed in happens here.

use core::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A failure, as a static NUL-terminated message for the `error_message` of a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure(pub &'static CStr);

impl Failure {
    /// The message, for C.
    pub fn as_ptr(self) -> *const c_char {
        self.0.as_ptr()
    }
}

/// What a panic inside the library turns into: the library's state is still consistent
/// (every change is made after the fallible work), so the caller may go on.
pub const PANICKED: Failure = Failure(
    c"internal error: the library panicked; the call had no effect, please report it with \
      the arguments that caused it",
);

/// Runs `body`, turning a panic into [`PANICKED`]: unwinding into C is undefined
/// behaviour, and the workspace's shared profile cannot be `panic = "abort"`.
pub fn guard<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(Err(PANICKED))
}

/// The longest string accepted, the reference header's limit (`INT16_MAX` bytes).
pub const MAX_STRING_LEN: usize = i16::MAX as usize;

/// Why a C string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrError {
    /// The pointer is NULL.
    Null,
    /// Longer than [`MAX_STRING_LEN`] bytes.
    TooLong,
    /// Not UTF-8.
    NotUtf8,
}

/// The UTF-8 string at `ptr`, at most [`MAX_STRING_LEN`] bytes before its NUL.
///
/// # Safety
///
/// `ptr` is NULL, or points to memory readable up to its NUL or for
/// `MAX_STRING_LEN + 1` bytes, whichever comes first, and unchanged for `'a`.
pub unsafe fn str_at<'a>(ptr: *const c_char) -> Result<&'a str, StrError> {
    if ptr.is_null() {
        return Err(StrError::Null);
    }
    // SAFETY: the caller guarantees the bytes up to the NUL or the bound are readable;
    // strnlen reads no further than either.
    let len = unsafe { libc::strnlen(ptr, MAX_STRING_LEN + 1) };
    if len > MAX_STRING_LEN {
        return Err(StrError::TooLong);
    }
    // SAFETY: strnlen found `len` readable bytes before the NUL.
    let bytes = unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    // Only the verdict of `from_utf8` is used: the string is rebuilt from the pointer and
    // length at hand, rather than read back from the result `from_utf8` leaves in memory
    // (a 16-byte load of two 8-byte stores, which stalls on x86_64).
    if core::str::from_utf8(bytes).is_err() {
        return Err(StrError::NotUtf8);
    }
    // SAFETY: `bytes` was just found to be UTF-8.
    Ok(unsafe { core::str::from_utf8_unchecked(bytes) })
}

/// The pointers of a NULL-terminated array, without the NULL; at most `max` of them
/// (`None` when there are more). A NULL array is an empty one.
///
/// # Safety
///
/// `array` is NULL, or points to pointers readable up to a NULL one or for `max + 1`
/// entries, whichever comes first.
pub unsafe fn entries<'a>(array: *const *const c_char, max: usize) -> Option<&'a [*const c_char]> {
    if array.is_null() {
        return Some(&[]);
    }
    let mut len = 0;
    loop {
        if len > max {
            return None;
        }
        // SAFETY: entries up to the first NULL (at most `max + 1`) are readable.
        if unsafe { *array.add(len) }.is_null() {
            break;
        }
        len += 1;
    }
    // SAFETY: the `len` entries before the NULL were just read.
    Some(unsafe { core::slice::from_raw_parts(array, len) })
}

/// The `N` bytes at `ptr`, or all zeros when `ptr` is NULL.
///
/// # Safety
///
/// `ptr` is NULL or points to `N` readable bytes.
pub unsafe fn bytes_at<const N: usize>(ptr: *const u8) -> [u8; N] {
    if ptr.is_null() {
        return [0; N];
    }
    // SAFETY: `ptr` points to `N` readable bytes; `[u8; N]` has alignment 1.
    unsafe { ptr.cast::<[u8; N]>().read() }
}

/// A copy of `s` on the C heap (`malloc`), NUL-terminated; NULL when out of memory.
pub fn malloc_str(s: &str) -> *mut c_char {
    // SAFETY: malloc has no precondition; NULL is checked.
    let out = unsafe { libc::malloc(s.len() + 1) }.cast::<u8>();
    if !out.is_null() {
        // SAFETY: `out` has `len + 1` writable bytes that do not overlap `s`.
        unsafe {
            core::ptr::copy_nonoverlapping(s.as_ptr(), out, s.len());
            *out.add(s.len()) = 0;
        }
    }
    out.cast()
}

/// Frees what [`malloc_str`] (or any `malloc`) returned; NULL is ignored.
///
/// # Safety
///
/// `ptr` is NULL or a live allocation of the C heap, not used afterwards.
pub unsafe fn free(ptr: *mut core::ffi::c_void) {
    // SAFETY: the caller passes a live malloc'ed pointer or NULL, which free accepts.
    unsafe { libc::free(ptr) }
}

/// A NULL-terminated array of `malloc`ed copies of `strings`, itself `malloc`ed; NULL when
/// out of memory (nothing is leaked then).
pub fn malloc_str_array<'s>(strings: impl ExactSizeIterator<Item = &'s str>) -> *mut *const c_char {
    let len = strings.len();
    // SAFETY: malloc has no precondition; NULL is checked.
    let array = unsafe { libc::malloc((len + 1) * core::mem::size_of::<*const c_char>()) }
        .cast::<*const c_char>();
    if array.is_null() {
        return array;
    }
    for (i, s) in strings.enumerate() {
        let copy = malloc_str(s);
        // SAFETY: `array` has `len + 1` entries and `i < len`.
        unsafe { *array.add(i) = copy };
        if copy.is_null() {
            // SAFETY: the entries before `i` and the array itself are this function's
            // allocations, NULL-terminated at `i`.
            unsafe { free_str_array(array) };
            return core::ptr::null_mut();
        }
    }
    // SAFETY: entry `len` is the last of the `len + 1`.
    unsafe { *array.add(len) = core::ptr::null() };
    array
}

/// Frees a NULL-terminated array of `malloc`ed strings and the array; NULL is ignored.
///
/// # Safety
///
/// `array` is NULL or was made by [`malloc_str_array`] (or the same way), not used
/// afterwards.
pub unsafe fn free_str_array(array: *mut *const c_char) {
    if array.is_null() {
        return;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated; entries up to the NULL are readable.
        let entry = unsafe { *array.add(i) };
        if entry.is_null() {
            break;
        }
        // SAFETY: every entry is a malloc'ed string owned by the array.
        unsafe { free(entry.cast_mut().cast()) };
        i += 1;
    }
    // SAFETY: the array itself is a malloc'ed block.
    unsafe { free(array.cast()) };
}
