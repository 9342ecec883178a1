//! The memory functions the compiler calls (there is no C library to provide them). Byte
//! loops with volatile accesses, so that the compiler cannot turn them back into calls
//! to themselves; speed does not matter here.

use core::ptr::{read_volatile, write_volatile};

/// # Safety
/// As C's `memcpy`.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    for i in 0..n {
        // SAFETY: the caller's guarantees.
        unsafe { write_volatile(dst.add(i), read_volatile(src.add(i))) };
    }
    dst
}

/// # Safety
/// As C's `memmove`.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) {
        for i in 0..n {
            // SAFETY: the caller's guarantees; forward, so no byte is read after it is
            // overwritten.
            unsafe { write_volatile(dst.add(i), read_volatile(src.add(i))) };
        }
    } else {
        for i in (0..n).rev() {
            // SAFETY: as above, backward.
            unsafe { write_volatile(dst.add(i), read_volatile(src.add(i))) };
        }
    }
    dst
}

/// # Safety
/// As C's `memset`.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    for i in 0..n {
        // SAFETY: the caller's guarantees.
        unsafe { write_volatile(dst.add(i), c as u8) };
    }
    dst
}

/// # Safety
/// As C's `memcmp`.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: the caller's guarantees.
        let (x, y) = unsafe { (read_volatile(a.add(i)), read_volatile(b.add(i))) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
    }
    0
}

/// # Safety
/// As C's `bcmp`.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's guarantees.
    unsafe { memcmp(a, b, n) }
}

/// # Safety
/// As C's `strlen`.
#[no_mangle]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: the caller's guarantee: `s` is NUL-terminated.
    while unsafe { read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// The unwinding personality the precompiled `core` refers to. This program aborts on
/// panic and never unwinds, so it is never called.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
