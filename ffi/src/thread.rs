//! `otel_ctx.h`: the thread context (OTEP 4947) behind opaque handles.
//!
//! A handle (`otel_thread_ctx *`) owns one record, or, when a swap hands back a record
//! another library attached to the shared `otel_thread_ctx_v1` slot, that record (opaque,
//! never written or freed, only put back). Attaching moves the handle's record into the
//! calling thread's slot; what the slot held comes back as a handle, or NULL.
//!
//! The calling thread's attached context is changed in place: replaced whole
//! (`otel_thread_ctx_update`), or one attribute appended (`_append`, `_append_truncated`),
//! or its last attributes dropped (`_truncate_attrs`).
//!
//! Attach, detach, swap and the in-place changes allocate nothing: the small block of a
//! handle whose record was attached is kept aside for the thread (one per thread) and
//! carries the next record that comes out of the slot. Only a thread that takes out more records than it
//! put in (another library's record) allocates a block.

use core::cell::Cell;
use core::ffi::c_char;

use otel_ctx_codec::record::{MAX_RECORD_SIZE, RECORD_HEADER_SIZE};
use otel_ctx_writer::thread::{self as writer, Attached, ContextError, Key, ThreadContext};

use crate::boundary::{self, Failure, StrError};
use crate::process::registry_failure;

/// One thread-context record, or another library's record taken out of the slot. Opaque.
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx {
    /// Always `Some` in a handle given to C; `None` only while its block is kept aside.
    attached: Option<Attached>,
}

/// An attribute of a record: a registered key index and a NUL-terminated UTF-8 value of
/// at most 255 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_attr {
    /// The key index, from `otel_thread_ctx_register_key`.
    pub key: u8,
    /// The value. Not NULL.
    pub value: *const c_char,
}

/// The result of a call: `error_message` is a static string, NULL on success.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
}

/// The result of `otel_thread_ctx_register_key`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_key_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
    /// The key index of the name, on success.
    pub key: u8,
}

/// The result of a call that hands out a handle: `otel_thread_ctx_new`, `_attach` and
/// `_swap`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_handle_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
    /// The new context (`_new`), or what the slot held before (`_attach`, `_swap`; NULL
    /// when it held nothing). Free it with `otel_thread_ctx_free`, or attach it again.
    pub context: *mut otel_thread_ctx,
}

/// The most attributes one call takes: each entry needs at least 2 bytes of the 612 a
/// 640-byte record has for them.
const MAX_ATTRS: usize = (MAX_RECORD_SIZE - RECORD_HEADER_SIZE) / 2;

const NAME_NULL: Failure =
    Failure(c"the key name is NULL; pass a NUL-terminated UTF-8 attribute name");
const NOT_UTF8: Failure =
    Failure(c"a string is not valid UTF-8; attribute names and values must be UTF-8");
const NAME_TOO_LONG: Failure = Failure(
    c"the key name is longer than 32767 bytes; use an attribute name of the semantic conventions",
);
const ATTRS_NULL: Failure =
    Failure(c"attrs is NULL but attrs_len is not 0; pass an array of attrs_len attributes, or 0");
const VALUE_NULL: Failure =
    Failure(c"an attribute value is NULL; pass a NUL-terminated UTF-8 string (it may be empty)");
const VALUE_TOO_LONG: Failure =
    Failure(c"an attribute value is longer than the 255 bytes a record entry holds; shorten it");
const TOO_MANY_ATTRS: Failure =
    Failure(c"more attributes than a 640-byte record can hold; pass at most 306 attributes");
const LONG_VALUE_TOO_LONG: Failure = Failure(
    c"an attribute value is longer than 32767 bytes, more than a truncating append reads; \
      pass a shorter prefix",
);
const CONTEXT_NULL: Failure = Failure(c"the context is NULL; create one with otel_thread_ctx_new");

/// A static message for each record error: what happened and what to do.
fn context_failure(error: ContextError) -> Failure {
    Failure(match error {
        ContextError::ValueTooLong { .. } => VALUE_TOO_LONG.0,
        ContextError::RecordFull { .. } => {
            c"the attributes do not fit in the 640-byte record; pass fewer or shorter values"
        }
        ContextError::NotAttached => {
            c"no context of this library is attached to this thread; attach one with \
              otel_thread_ctx_attach first"
        }
        ContextError::CapacityOutOfRange { .. } => {
            c"a record capacity outside 28..=640 bytes was asked for"
        }
        ContextError::ForeignRecordAttached => {
            c"the slot holds a record another library attached; this library changes only \
              its own records: attach one of them first"
        }
        ContextError::TraceIdWithoutSpanId => {
            c"a trace id without a span id; OTEP 4947 requires both or neither: pass a \
              non-zero span id, or zero for both"
        }
        ContextError::SpanIdWithoutTraceId => {
            c"a span id without a trace id; OTEP 4947 requires both or neither: pass a \
              non-zero trace id, or zero for both"
        }
        ContextError::TraceFlagsWithoutIds { .. } => {
            c"trace flags without a trace id and span id; pass 0 as flags when there is no \
              trace"
        }
    })
}

fn value_failure(error: StrError) -> Failure {
    match error {
        StrError::Null => VALUE_NULL,
        StrError::TooLong => VALUE_TOO_LONG,
        StrError::NotUtf8 => NOT_UTF8,
    }
}

thread_local! {
    /// The block of a handle whose record went into the slot, for the next record that
    /// comes out: so attach and detach neither allocate nor free.
    static SPARE: Cell<Option<Box<otel_thread_ctx>>> = const { Cell::new(None) };
}

/// Keeps `block` aside for this thread (freeing the one kept before, if any).
#[inline(always)]
fn keep_aside(block: Box<otel_thread_ctx>) {
    // During thread teardown the thread-local may be gone: the block is then just freed.
    let _ = SPARE.try_with(|spare| drop(spare.replace(Some(block))));
}

/// `previous` as a handle for C (NULL for none), in `block` or the thread's spare block.
// Always inlined: `previous` then stays in registers instead of making a round trip
// through memory, which cost more than the attach itself.
#[inline(always)]
fn hand_out(
    previous: Option<Attached>,
    block: Option<Box<otel_thread_ctx>>,
) -> *mut otel_thread_ctx {
    match previous {
        None => {
            if let Some(block) = block {
                keep_aside(block);
            }
            core::ptr::null_mut()
        }
        Some(previous) => {
            let mut block = block
                .or_else(|| SPARE.try_with(Cell::take).ok().flatten())
                .unwrap_or_else(|| Box::new(otel_thread_ctx { attached: None }));
            block.attached = Some(previous);
            Box::into_raw(block)
        }
    }
}

/// Takes back a handle C gave in.
///
/// # Safety
///
/// `context` is NULL or a live handle from this library, not used by C afterwards.
#[inline(always)]
unsafe fn take(context: *mut otel_thread_ctx) -> Result<(Box<otel_thread_ctx>, Attached), Failure> {
    if context.is_null() {
        return Err(CONTEXT_NULL);
    }
    // SAFETY: a live handle is a `Box` this library leaked with `Box::into_raw`, and C
    // gives up its use.
    let mut block = unsafe { Box::from_raw(context) };
    match block.attached.take() {
        Some(attached) => Ok((block, attached)),
        // Unreachable through the API; refused rather than trusted.
        None => Err(CONTEXT_NULL),
    }
}

/// Reads the ids and attributes C passed and calls `with` on them, without allocating.
///
/// # Safety
///
/// `trace_id` is NULL or 16 readable bytes, `span_id` NULL or 8; `attrs` points to
/// `attrs_len` attributes (or `attrs_len` is 0), whose values are readable to their NUL.
unsafe fn with_args<T>(
    trace_id: *const u8,
    span_id: *const u8,
    attrs: *const otel_thread_ctx_attr,
    attrs_len: usize,
    with: impl FnOnce([u8; 16], [u8; 8], &[(Key, &str)]) -> Result<T, Failure>,
) -> Result<T, Failure> {
    // SAFETY: NULL or 16 readable bytes, per the contract.
    let trace_id = unsafe { boundary::bytes_at::<16>(trace_id) };
    // SAFETY: NULL or 8 readable bytes, per the contract.
    let span_id = unsafe { boundary::bytes_at::<8>(span_id) };
    if attrs_len > MAX_ATTRS {
        return Err(TOO_MANY_ATTRS);
    }
    let attrs: &[otel_thread_ctx_attr] = match (attrs.is_null(), attrs_len) {
        (_, 0) => &[],
        (true, _) => return Err(ATTRS_NULL),
        // SAFETY: `attrs` points to `attrs_len` attributes, per the contract.
        (false, len) => unsafe { core::slice::from_raw_parts(attrs, len) },
    };
    // Up to 8 attributes, the common case, are gathered in 192 bytes of stack; clearing
    // the 7 KiB list of the largest count on every call would cost more than the update,
    // and so would the page probes of a 7 KiB stack frame: that list is in a frame of its
    // own.
    if attrs.len() <= SMALL_ATTRS {
        // SAFETY: forwarded from this function's contract.
        unsafe { gather::<SMALL_ATTRS, T>(trace_id, span_id, attrs, with) }
    } else {
        // SAFETY: forwarded from this function's contract.
        unsafe { gather_many(trace_id, span_id, attrs, with) }
    }
}

/// [`gather`] into the list of the most attributes a record holds, out of line.
///
/// # Safety
///
/// As [`gather`].
#[cold]
#[inline(never)]
unsafe fn gather_many<T>(
    trace_id: [u8; 16],
    span_id: [u8; 8],
    attrs: &[otel_thread_ctx_attr],
    with: impl FnOnce([u8; 16], [u8; 8], &[(Key, &str)]) -> Result<T, Failure>,
) -> Result<T, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { gather::<MAX_ATTRS, T>(trace_id, span_id, attrs, with) }
}

/// The most attributes [`with_args`] gathers in its small list.
const SMALL_ATTRS: usize = 8;

/// Reads the values of `attrs` (at most `N`) into a list of `N` pairs on the stack and
/// calls `with` on the ids and the pairs read.
///
/// # Safety
///
/// Every value of `attrs` is NULL or a string readable to its NUL.
#[inline(always)]
unsafe fn gather<const N: usize, T>(
    trace_id: [u8; 16],
    span_id: [u8; 8],
    attrs: &[otel_thread_ctx_attr],
    with: impl FnOnce([u8; 16], [u8; 8], &[(Key, &str)]) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut pairs: [(Key, &str); N] = [(Key::from_index(0), ""); N];
    for (pair, attr) in pairs.iter_mut().zip(attrs) {
        // SAFETY: each value is NULL or a string readable to its NUL.
        let value = unsafe { boundary::str_at(attr.value) }.map_err(value_failure)?;
        *pair = (Key::from_index(attr.key), value);
    }
    with(trace_id, span_id, &pairs[..attrs.len().min(N)])
}

impl From<Result<(), Failure>> for otel_thread_ctx_result {
    fn from(result: Result<(), Failure>) -> Self {
        match result {
            Ok(()) => Self {
                success: true,
                error_message: core::ptr::null(),
            },
            Err(failure) => Self {
                success: false,
                error_message: failure.as_ptr(),
            },
        }
    }
}

impl From<Result<*mut otel_thread_ctx, Failure>> for otel_thread_ctx_handle_result {
    fn from(result: Result<*mut otel_thread_ctx, Failure>) -> Self {
        match result {
            Ok(context) => Self {
                success: true,
                error_message: core::ptr::null(),
                context,
            },
            Err(failure) => Self {
                success: false,
                error_message: failure.as_ptr(),
                context: core::ptr::null_mut(),
            },
        }
    }
}

/// The result of a call that counts: `otel_thread_ctx_append_truncated` (the bytes of the
/// value kept), `_truncate_attrs` and `_attr_count` (attribute entries).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_count_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
    /// The count, on success; 0 otherwise.
    pub count: usize,
}

impl From<Result<usize, Failure>> for otel_thread_ctx_count_result {
    fn from(result: Result<usize, Failure>) -> Self {
        match result {
            Ok(count) => Self {
                success: true,
                error_message: core::ptr::null(),
                count,
            },
            Err(failure) => Self {
                success: false,
                error_message: failure.as_ptr(),
                count: 0,
            },
        }
    }
}

/// The key index of attribute `name`, registering it if it is new: the process
/// context's `threadlocal.attribute_key_map` is updated (now if a context is published,
/// else at the next `otel_process_ctx_publish`). The same name gets the same index; at
/// most 256 names. Takes a lock: call it once per name, not per request.
///
/// # Safety
///
/// `name` is NULL or a string readable to its NUL.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_register_key(
    name: *const c_char,
) -> otel_thread_ctx_key_result {
    let result = boundary::guard(|| {
        // SAFETY: NULL or a string readable to its NUL, per the contract.
        let name = unsafe { boundary::str_at(name) }.map_err(|e| match e {
            StrError::Null => NAME_NULL,
            StrError::TooLong => NAME_TOO_LONG,
            StrError::NotUtf8 => NOT_UTF8,
        })?;
        writer::register(name).map_err(|e| registry_failure(&e))
    });
    match result {
        Ok(key) => otel_thread_ctx_key_result {
            success: true,
            error_message: core::ptr::null(),
            key: key.index(),
        },
        Err(failure) => otel_thread_ctx_key_result {
            success: false,
            error_message: failure.as_ptr(),
            key: 0,
        },
    }
}

/// A new context (a 640-byte record, allocated here) with these ids, flags and
/// attributes, not attached. `trace_id` (16 bytes) and `span_id` (8 bytes) may be NULL
/// for zeros: both zero with flags 0 means no trace.
///
/// # Safety
///
/// `trace_id` is NULL or 16 readable bytes, `span_id` NULL or 8; `attrs` points to
/// `attrs_len` attributes (or `attrs_len` is 0).
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_new(
    trace_id: *const u8,
    span_id: *const u8,
    trace_flags: u8,
    attrs: *const otel_thread_ctx_attr,
    attrs_len: usize,
) -> otel_thread_ctx_handle_result {
    boundary::guard(|| {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            with_args(
                trace_id,
                span_id,
                attrs,
                attrs_len,
                |trace_id, span_id, attrs| {
                    let context = ThreadContext::new(trace_id, span_id, trace_flags, attrs)
                        .map_err(context_failure)?;
                    Ok(Box::into_raw(Box::new(otel_thread_ctx {
                        attached: Some(Attached::Context(context)),
                    })))
                },
            )
        }
    })
    .into()
}

/// Attaches `context` to the calling thread (the `otel_thread_ctx_v1` slot points at
/// it) and returns what the slot held before, or NULL. `context` then belongs to the
/// thread: do not use or free it. Allocates nothing.
///
/// # Safety
///
/// `context` is NULL (refused) or a handle from this library not freed or attached yet.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_attach(
    context: *mut otel_thread_ctx,
) -> otel_thread_ctx_handle_result {
    boundary::guard(|| {
        // SAFETY: forwarded from this function's contract.
        let (block, next) = unsafe { take(context) }?;
        Ok(hand_out(writer::swap(Some(next)), Some(block)))
    })
    .into()
}

/// Detaches the calling thread's context (the slot becomes NULL) and returns it, or NULL
/// when none of this library's is attached (a record another library attached stays).
/// Allocates nothing.
#[no_mangle]
pub extern "C" fn otel_thread_ctx_detach() -> *mut otel_thread_ctx {
    boundary::guard(|| Ok(hand_out(writer::detach().map(Attached::Context), None)))
        .unwrap_or(core::ptr::null_mut())
}

/// Attaches `next` (or, when NULL, empties the slot, whoever attached its record) and
/// returns what the slot held before, or NULL. Allocates nothing unless the slot held
/// another library's record.
///
/// # Safety
///
/// `next` is NULL or a handle from this library not freed or attached yet.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_swap(
    next: *mut otel_thread_ctx,
) -> otel_thread_ctx_handle_result {
    boundary::guard(|| {
        if next.is_null() {
            return Ok(hand_out(writer::swap(None), None));
        }
        // SAFETY: forwarded from this function's contract.
        let (block, next) = unsafe { take(next) }?;
        Ok(hand_out(writer::swap(Some(next)), Some(block)))
    })
    .into()
}

/// Replaces the ids, flags and attributes of the calling thread's attached context in
/// place (`valid = 0`, write, `valid = 1`). On error the record is unchanged and valid.
/// Allocates nothing.
///
/// # Safety
///
/// As `otel_thread_ctx_new`.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_update(
    trace_id: *const u8,
    span_id: *const u8,
    trace_flags: u8,
    attrs: *const otel_thread_ctx_attr,
    attrs_len: usize,
) -> otel_thread_ctx_result {
    boundary::guard(|| {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            with_args(
                trace_id,
                span_id,
                attrs,
                attrs_len,
                |trace_id, span_id, attrs| {
                    writer::update(trace_id, span_id, trace_flags, attrs).map_err(context_failure)
                },
            )
        }
    })
    .into()
}

/// Appends the attribute `key` = `value` to the calling thread's attached context in
/// place: the entry's bytes first, then the new size, so a reader sees the record with or
/// without it, never half of it. A later entry of the same key wins for readers. On error
/// (value NULL, not UTF-8 or over 255 bytes, record full, nothing of this library
/// attached) the record is unchanged and valid. Allocates nothing.
///
/// # Safety
///
/// `value` is NULL or a string readable to its NUL.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_append(
    key: u8,
    value: *const c_char,
) -> otel_thread_ctx_result {
    boundary::guard(|| {
        // SAFETY: NULL or a string readable to its NUL, per the contract.
        let value = unsafe { boundary::str_at(value) }.map_err(value_failure)?;
        writer::append(Key::from_index(key), value).map_err(context_failure)
    })
    .into()
}

/// As `otel_thread_ctx_append`, but a value over 255 bytes (or longer than the record
/// has room for) is cut at a UTF-8 character boundary so that it fits; `count` is the
/// bytes of the value kept. Errors when not even an empty entry fits, and for a value
/// that is NULL, not UTF-8, or over 32767 bytes (it is read and checked whole). Allocates
/// nothing.
///
/// # Safety
///
/// `value` is NULL or a string readable to its NUL.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_append_truncated(
    key: u8,
    value: *const c_char,
) -> otel_thread_ctx_count_result {
    boundary::guard(|| {
        // SAFETY: NULL or a string readable to its NUL, per the contract.
        let value = unsafe { boundary::str_at(value) }.map_err(|e| match e {
            StrError::TooLong => LONG_VALUE_TOO_LONG,
            other => value_failure(other),
        })?;
        writer::append_truncated(Key::from_index(key), value).map_err(context_failure)
    })
    .into()
}

/// Keeps the first `keep` attribute entries of the calling thread's attached context and
/// drops the others, in place (a `keep` at or over the count changes nothing); `count` is
/// the number of entries left. Errors when nothing of this library is attached.
/// Allocates nothing.
#[no_mangle]
pub extern "C" fn otel_thread_ctx_truncate_attrs(keep: usize) -> otel_thread_ctx_count_result {
    boundary::guard(|| writer::truncate_attrs(keep).map_err(context_failure)).into()
}

/// The number of attribute entries of the calling thread's attached context, in `count`.
/// Errors when nothing of this library is attached. Allocates nothing.
#[no_mangle]
pub extern "C" fn otel_thread_ctx_attr_count() -> otel_thread_ctx_count_result {
    boundary::guard(|| writer::attached_attr_count().map_err(context_failure)).into()
}

/// Frees a context that is not attached; NULL is ignored. Another library's record taken
/// out of the slot is only forgotten, never freed.
///
/// # Safety
///
/// `context` is NULL or a handle from this library not freed or attached yet.
#[no_mangle]
pub unsafe extern "C" fn otel_thread_ctx_free(context: *mut otel_thread_ctx) {
    if context.is_null() {
        return;
    }
    // Dropping the record cannot panic; the guard is for the boundary's rule.
    let _ = boundary::guard(|| {
        // SAFETY: a live handle is a `Box` this library leaked, given back by C.
        drop(unsafe { Box::from_raw(context) });
        Ok(())
    });
}
