//! `otel_process_ctx.h`: the process context (OTEP 4719), with the names, field order and
//! meaning of the reference C header of OpenTelemetry's sig-profiling repository, so that
//! a C program written against that header builds against this library unchanged.
//!
//! Publishing goes through one [`Publisher`] of the writer, kept here behind a mutex. The
//! thread configuration of [`otel_process_ctx_data`] becomes the thread reference data
//! (`threadlocal.schema_version`, `threadlocal.attribute_key_map`) in the extra
//! attributes; with the schema `tlsdesc_v1_dev` its keys are registered as the thread
//! API's keys ([`crate::thread`]), in order, so both APIs share one key map.

use core::ffi::c_char;
use std::sync::{Mutex, MutexGuard};

use otel_ctx_codec::threadlocal::{MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_writer::process::{
    self as writer, Attributes, OwnedValue, Publisher, Resource, DEPLOYMENT_ENVIRONMENT_NAME,
    SERVICE_INSTANCE_ID, SERVICE_NAME, SERVICE_VERSION, TELEMETRY_SDK_LANGUAGE, TELEMETRY_SDK_NAME,
    TELEMETRY_SDK_VERSION,
};
use otel_ctx_writer::thread as thread_writer;

use crate::boundary::{self, Failure, StrError};

/// The thread-context configuration published with the process context (OTEP 4947's
/// reference data).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_thread_ctx_config_data {
    /// `threadlocal.schema_version`, e.g. `"tlsdesc_v1_dev"`.
    pub schema_version: *const c_char,
    /// `threadlocal.attribute_key_map`: a NULL-terminated array of attribute names, the
    /// position of each being its key index (at most 256). May be NULL.
    pub attribute_key_map: *mut *const c_char,
}

/// The data of a process context.
///
/// Every string is UTF-8, at most `INT16_MAX` bytes, may be empty, and is copied by
/// `otel_process_ctx_publish`: it only needs to live for the call. The seven
/// semantic-convention strings must not be NULL.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_process_ctx_data {
    /// `deployment.environment.name`.
    pub deployment_environment_name: *const c_char,
    /// `service.instance.id`.
    pub service_instance_id: *const c_char,
    /// `service.name`.
    pub service_name: *const c_char,
    /// `service.version`.
    pub service_version: *const c_char,
    /// `telemetry.sdk.language`.
    pub telemetry_sdk_language: *const c_char,
    /// `telemetry.sdk.version`.
    pub telemetry_sdk_version: *const c_char,
    /// `telemetry.sdk.name`.
    pub telemetry_sdk_name: *const c_char,
    /// More resource attributes: `key, value, key, value, ..., NULL`. May be NULL.
    pub resource_attributes: *mut *const c_char,
    /// Extra attributes (field 2 of the payload), the same way. May be NULL.
    pub extra_attributes: *mut *const c_char,
    /// The thread-context configuration. May be NULL.
    pub thread_ctx_config: *const otel_thread_ctx_config_data,
}

/// The result of a call: `error_message` is a static string, NULL on success.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_process_ctx_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
}

/// The result of `otel_process_ctx_read`: the strings of `data` are `malloc`ed; free them
/// with `otel_process_ctx_read_drop`.
#[cfg(not(otel_process_ctx_no_read))]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct otel_process_ctx_read_result {
    /// Whether the call succeeded.
    pub success: bool,
    /// What went wrong and what to do, when `success` is false; a static string.
    pub error_message: *const c_char,
    /// The context read back: a field is NULL when the context does not have it, as are
    /// the arrays when empty and `thread_ctx_config` when there is no reference data.
    pub data: otel_process_ctx_data,
}

/// The publisher of this library, shared by every call.
static PUBLISHER: Mutex<Option<Publisher>> = Mutex::new(None);

fn publisher() -> MutexGuard<'static, Option<Publisher>> {
    // Every change of the state is a whole-value assignment after the fallible work, so a
    // panic while the lock was held leaves nothing torn.
    PUBLISHER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Most `key, value` pairs accepted in one attribute array: readers refuse more.
const MAX_PAIRS: usize = 4096;

const DATA_NULL: Failure =
    Failure(c"otel_process_ctx_publish: data is NULL; pass a pointer to an otel_process_ctx_data");
const FIELD_NULL: Failure = Failure(
    c"a string field of otel_process_ctx_data is NULL; set all seven semantic-convention \
      fields (an empty string is allowed)",
);
const NOT_UTF8: Failure = Failure(
    c"a string of otel_process_ctx_data is not valid UTF-8; OpenTelemetry attributes are \
      UTF-8 strings",
);
const TOO_LONG: Failure = Failure(
    c"a string of otel_process_ctx_data is longer than INT16_MAX (32767) bytes; shorten it",
);
const ODD_ATTRIBUTES: Failure = Failure(
    c"an attribute array has a key without a value (odd length); write key, value pairs \
      followed by one NULL",
);
const TOO_MANY_ATTRIBUTES: Failure = Failure(
    c"an attribute array has more than 4096 key, value pairs, more than readers accept; \
      publish fewer, and check that the array ends with NULL",
);
const SCHEMA_NULL: Failure = Failure(
    c"thread_ctx_config.schema_version is NULL; set it, e.g. to \"tlsdesc_v1_dev\", or \
      pass no thread_ctx_config",
);
const TOO_MANY_KEYS: Failure = Failure(
    c"thread_ctx_config.attribute_key_map has more than 256 keys, the most a u8 key \
      index can reach; publish fewer keys",
);
const KEY_MAP_CONFLICT: Failure = Failure(
    c"thread_ctx_config.attribute_key_map does not start with the keys already \
      registered, in order (key indexes never change); list the keys published so far \
      first and append new ones at the end",
);
const NOT_PUBLISHED: Failure = Failure(
    c"no process context is published by this process; call otel_process_ctx_publish \
      first",
);
const OUT_OF_MEMORY: Failure =
    Failure(c"out of memory while copying the context; free memory and try again");

/// What an unreadable C string means for the caller.
fn string_failure(error: StrError, null: Failure) -> Failure {
    match error {
        StrError::Null => null,
        StrError::TooLong => TOO_LONG,
        StrError::NotUtf8 => NOT_UTF8,
    }
}

/// A static message for each writer error: what happened and what to do.
pub(crate) fn publish_failure(error: &writer::Error) -> Failure {
    Failure(match error.kind() {
        "payload_too_large" => {
            c"the encoded process context is larger than the 65536 bytes readers accept; \
              publish fewer or shorter attributes"
        }
        "unreadable" => {
            c"readers would refuse this process context (too many attributes); publish \
              fewer attributes"
        }
        "already_published" => {
            c"this process's context is held by another publisher in the same process (the \
              Rust API); publish through that one, or unpublish it first"
        }
        "syscall" => {
            c"a system call needed to publish failed (memfd_create, ftruncate, mmap, \
              madvise or getrandom); check seccomp filters and memory limits"
        }
        "undiscoverable" => {
            c"memfd_create failed and naming the anonymous mapping failed too, so no \
              reader could find the context; allow memfd_create or enable \
              CONFIG_ANON_VMA_NAME"
        }
        "key_map_too_long" => TOO_MANY_KEYS.0,
        "key_map_not_append_only" => KEY_MAP_CONFLICT.0,
        "not_published" | "inherited_across_fork" => NOT_PUBLISHED.0,
        _ => c"publishing the process context failed; check the data and try again",
    })
}

/// A static message for each registry error.
pub(crate) fn registry_failure(error: &thread_writer::RegistryError) -> Failure {
    match error {
        thread_writer::RegistryError::TooManyKeys { .. } => Failure(
            c"the key map already holds 256 names, the most a u8 key index can reach; reuse \
              an existing key",
        ),
        thread_writer::RegistryError::Publish(e) => publish_failure(e),
    }
}

/// The `key, value` pairs of a NULL-terminated attribute array.
///
/// # Safety
///
/// `array` is NULL or a NULL-terminated array of strings, each readable to its NUL.
unsafe fn pairs(array: *const *const c_char) -> Result<Vec<(&'static str, &'static str)>, Failure> {
    // SAFETY: forwarded from the caller; one entry past the bound is read at most.
    let entries = unsafe { boundary::entries(array, 2 * MAX_PAIRS) }.ok_or(TOO_MANY_ATTRIBUTES)?;
    if entries.len() % 2 == 1 {
        return Err(ODD_ATTRIBUTES);
    }
    entries
        .chunks_exact(2)
        .map(|pair| {
            // SAFETY: every entry before the NULL is a string readable to its NUL, which
            // outlives this call (the result is copied before returning to C).
            let key = unsafe { boundary::str_at(pair[0]) };
            // SAFETY: as above.
            let value = unsafe { boundary::str_at(pair[1]) };
            Ok((
                key.map_err(|e| string_failure(e, ODD_ATTRIBUTES))?,
                value.map_err(|e| string_failure(e, ODD_ATTRIBUTES))?,
            ))
        })
        .collect()
}

/// Publishes the thread configuration as reference data: with the writer's own schema,
/// as the thread API's registered keys (in order), otherwise as given.
///
/// # Safety
///
/// `config` is NULL or points to an `otel_thread_ctx_config_data` whose strings are
/// readable to their NUL.
unsafe fn apply_thread_config(config: *const otel_thread_ctx_config_data) -> Result<(), Failure> {
    if config.is_null() {
        return Ok(());
    }
    // SAFETY: `config` is non-NULL and points to a config, per the contract.
    let config = unsafe { &*config };
    // SAFETY: the schema version is NULL or a string readable to its NUL.
    let schema = unsafe { boundary::str_at(config.schema_version) }
        .map_err(|e| string_failure(e, SCHEMA_NULL))?;
    // SAFETY: the key map is NULL or NULL-terminated; at most one entry past the bound is
    // read.
    let entries = unsafe { boundary::entries(config.attribute_key_map, MAX_KEY_MAP_LEN) }
        .ok_or(TOO_MANY_KEYS)?;
    let keys = entries
        .iter()
        // SAFETY: every entry before the NULL is a string readable to its NUL.
        .map(|&key| unsafe { boundary::str_at(key) }.map_err(|e| string_failure(e, NOT_UTF8)))
        .collect::<Result<Vec<&str>, Failure>>()?;
    if schema == SCHEMA_TLSDESC_V1_DEV {
        for (index, key) in keys.iter().enumerate() {
            let registered = thread_writer::register(key).map_err(|e| registry_failure(&e))?;
            if usize::from(registered.index()) != index {
                return Err(KEY_MAP_CONFLICT);
            }
        }
        if keys.is_empty() {
            writer::announce_thread_contexts().map_err(|e| publish_failure(&e))?;
        }
        Ok(())
    } else {
        writer::set_thread_reference_data(schema, &keys).map_err(|e| publish_failure(&e))
    }
}

/// The resource and extra attributes of `data`, copied.
///
/// # Safety
///
/// `data` is NULL or points to an `otel_process_ctx_data` as its documentation says.
unsafe fn owned(data: *const otel_process_ctx_data) -> Result<(Resource, Attributes), Failure> {
    if data.is_null() {
        return Err(DATA_NULL);
    }
    // SAFETY: non-NULL, and points to the data per the contract.
    let data = unsafe { &*data };
    let fields = [
        (
            DEPLOYMENT_ENVIRONMENT_NAME,
            data.deployment_environment_name,
        ),
        (SERVICE_INSTANCE_ID, data.service_instance_id),
        (SERVICE_NAME, data.service_name),
        (SERVICE_VERSION, data.service_version),
        (TELEMETRY_SDK_LANGUAGE, data.telemetry_sdk_language),
        (TELEMETRY_SDK_VERSION, data.telemetry_sdk_version),
        (TELEMETRY_SDK_NAME, data.telemetry_sdk_name),
    ];
    let mut resource = Attributes::new();
    for (key, ptr) in fields {
        // SAFETY: each field is NULL or a string readable to its NUL.
        let value = unsafe { boundary::str_at(ptr) }.map_err(|e| string_failure(e, FIELD_NULL))?;
        resource.set(key, value);
    }
    // SAFETY: the arrays are NULL or NULL-terminated arrays of strings.
    for (key, value) in unsafe { pairs(data.resource_attributes) }? {
        resource.set(key, value);
    }
    let mut extra = Attributes::new();
    // SAFETY: as above.
    for (key, value) in unsafe { pairs(data.extra_attributes) }? {
        extra.set(key, value);
    }
    Ok((Resource::from_attributes(resource), extra))
}

fn publish(data: *const otel_process_ctx_data) -> Result<(), Failure> {
    // SAFETY: the caller of otel_process_ctx_publish promises a valid or NULL `data`.
    let (resource, extra) = unsafe { owned(data) }?;
    // SAFETY: as above; `data` was checked non-NULL by `owned`.
    unsafe { apply_thread_config((*data).thread_ctx_config) }?;
    let mut slot = publisher();
    // A publisher inherited across fork refers to the parent's mapping, which this child
    // does not have: dropping it writes and unmaps nothing, and the child publishes anew.
    if slot.as_ref().is_some_and(Publisher::is_inherited) {
        *slot = None;
    }
    match slot.as_mut() {
        Some(publisher) => publisher
            .update(resource, extra)
            .map_err(|e| publish_failure(&e)),
        None => {
            *slot = Some(Publisher::publish(resource, extra).map_err(|e| publish_failure(&e))?);
            Ok(())
        }
    }
}

impl From<Result<(), Failure>> for otel_process_ctx_result {
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

/// Publishes the process context, or replaces the one published (the context is a
/// singleton). Every string is copied. In a forked child, publishes the child's own.
///
/// # Safety
///
/// `data` is NULL (refused with an error) or points to an `otel_process_ctx_data` whose
/// strings are readable up to their NUL and whose arrays are NULL-terminated.
#[no_mangle]
pub unsafe extern "C" fn otel_process_ctx_publish(
    data: *const otel_process_ctx_data,
) -> otel_process_ctx_result {
    boundary::guard(|| publish(data)).into()
}

/// Withdraws the process context, if this process published one. Returns `true` when it
/// is gone (or there was none), `false` when unmapping it failed. In a forked child it
/// forgets the parent's context.
#[no_mangle]
pub extern "C" fn otel_process_ctx_drop_current() -> bool {
    boundary::guard(|| match publisher().take() {
        Some(publisher) if !publisher.is_inherited() => {
            publisher.unpublish().map_err(|e| publish_failure(&e))
        }
        _ => Ok(()),
    })
    .is_ok()
}

/// The string value of `key` among `attributes`, copied to the C heap; NULL when absent.
#[cfg(not(otel_process_ctx_no_read))]
fn malloc_value(attributes: &Attributes, key: &str) -> Result<*const c_char, Failure> {
    match attributes.get(key).and_then(OwnedValue::as_str) {
        None => Ok(core::ptr::null()),
        Some(value) => {
            let copy = boundary::malloc_str(value);
            if copy.is_null() {
                Err(OUT_OF_MEMORY)
            } else {
                Ok(copy)
            }
        }
    }
}

/// `key, value, ..., NULL` of the string attributes of `attributes` not in `skip`, or NULL
/// when there are none.
#[cfg(not(otel_process_ctx_no_read))]
fn malloc_pairs(
    attributes: &Attributes,
    skip: impl Fn(&str) -> bool,
) -> Result<*mut *const c_char, Failure> {
    let strings: Vec<&str> = attributes
        .iter()
        .filter(|kv| !skip(&kv.key))
        .filter_map(|kv| Some([kv.key.as_str(), kv.value.as_str()?]))
        .flatten()
        .collect();
    if strings.is_empty() {
        return Ok(core::ptr::null_mut());
    }
    let array = boundary::malloc_str_array(strings.into_iter());
    if array.is_null() {
        Err(OUT_OF_MEMORY)
    } else {
        Ok(array)
    }
}

/// The thread configuration among the extra attributes, on the C heap; NULL when the
/// context has no `threadlocal.schema_version`.
#[cfg(not(otel_process_ctx_no_read))]
fn malloc_thread_config(extra: &Attributes) -> Result<*const otel_thread_ctx_config_data, Failure> {
    use otel_ctx_codec::threadlocal::{ATTRIBUTE_KEY_MAP_KEY, SCHEMA_VERSION_KEY};
    let schema = malloc_value(extra, SCHEMA_VERSION_KEY)?;
    if schema.is_null() {
        return Ok(core::ptr::null());
    }
    let names: Vec<&str> = match extra.get(ATTRIBUTE_KEY_MAP_KEY) {
        Some(OwnedValue::Array(values)) => values.iter().filter_map(OwnedValue::as_str).collect(),
        _ => Vec::new(),
    };
    let key_map = boundary::malloc_str_array(names.into_iter());
    // SAFETY: malloc has no precondition; NULL is checked.
    let config = unsafe { libc::malloc(core::mem::size_of::<otel_thread_ctx_config_data>()) }
        .cast::<otel_thread_ctx_config_data>();
    if key_map.is_null() || config.is_null() {
        // SAFETY: each is NULL or this function's own allocation.
        unsafe {
            boundary::free(schema.cast_mut().cast());
            boundary::free_str_array(key_map);
            boundary::free(config.cast());
        }
        return Err(OUT_OF_MEMORY);
    }
    // SAFETY: `config` is a fresh allocation of the struct's size, suitably aligned
    // (malloc aligns for every fundamental type).
    unsafe {
        config.write(otel_thread_ctx_config_data {
            schema_version: schema,
            attribute_key_map: key_map,
        })
    };
    Ok(config)
}

#[cfg(not(otel_process_ctx_no_read))]
const EMPTY_DATA: otel_process_ctx_data = otel_process_ctx_data {
    deployment_environment_name: core::ptr::null(),
    service_instance_id: core::ptr::null(),
    service_name: core::ptr::null(),
    service_version: core::ptr::null(),
    telemetry_sdk_language: core::ptr::null(),
    telemetry_sdk_version: core::ptr::null(),
    telemetry_sdk_name: core::ptr::null(),
    resource_attributes: core::ptr::null_mut(),
    extra_attributes: core::ptr::null_mut(),
    thread_ctx_config: core::ptr::null(),
};

/// Frees every allocation of `data` and resets it to NULLs.
///
/// # Safety
///
/// Every pointer of `data` is NULL or was allocated by [`read`].
#[cfg(not(otel_process_ctx_no_read))]
unsafe fn free_data(data: &mut otel_process_ctx_data) {
    let strings = [
        data.deployment_environment_name,
        data.service_instance_id,
        data.service_name,
        data.service_version,
        data.telemetry_sdk_language,
        data.telemetry_sdk_version,
        data.telemetry_sdk_name,
    ];
    // SAFETY: every pointer is NULL or the read's own malloc'ed block, freed once here.
    unsafe {
        for s in strings {
            boundary::free(s.cast_mut().cast());
        }
        boundary::free_str_array(data.resource_attributes);
        boundary::free_str_array(data.extra_attributes);
        if !data.thread_ctx_config.is_null() {
            let config = &*data.thread_ctx_config;
            boundary::free(config.schema_version.cast_mut().cast());
            boundary::free_str_array(config.attribute_key_map);
            boundary::free(data.thread_ctx_config.cast_mut().cast());
        }
    }
    *data = EMPTY_DATA;
}

/// The published context, copied to the C heap.
#[cfg(not(otel_process_ctx_no_read))]
fn read() -> Result<otel_process_ctx_data, Failure> {
    let (resource, extra) = {
        let slot = publisher();
        match slot.as_ref() {
            Some(publisher) if !publisher.is_inherited() => (
                publisher.resource().into_attributes(),
                publisher.attributes(),
            ),
            _ => return Err(NOT_PUBLISHED),
        }
    };
    const SEMCONV: [&str; 7] = [
        DEPLOYMENT_ENVIRONMENT_NAME,
        SERVICE_INSTANCE_ID,
        SERVICE_NAME,
        SERVICE_VERSION,
        TELEMETRY_SDK_LANGUAGE,
        TELEMETRY_SDK_VERSION,
        TELEMETRY_SDK_NAME,
    ];
    let mut data = EMPTY_DATA;
    let filled = (|| {
        data.deployment_environment_name = malloc_value(&resource, DEPLOYMENT_ENVIRONMENT_NAME)?;
        data.service_instance_id = malloc_value(&resource, SERVICE_INSTANCE_ID)?;
        data.service_name = malloc_value(&resource, SERVICE_NAME)?;
        data.service_version = malloc_value(&resource, SERVICE_VERSION)?;
        data.telemetry_sdk_language = malloc_value(&resource, TELEMETRY_SDK_LANGUAGE)?;
        data.telemetry_sdk_version = malloc_value(&resource, TELEMETRY_SDK_VERSION)?;
        data.telemetry_sdk_name = malloc_value(&resource, TELEMETRY_SDK_NAME)?;
        data.resource_attributes = malloc_pairs(&resource, |key| SEMCONV.contains(&key))?;
        data.extra_attributes = malloc_pairs(&extra, |key| key.starts_with("threadlocal."))?;
        data.thread_ctx_config = malloc_thread_config(&extra)?;
        Ok(())
    })();
    match filled {
        Ok(()) => Ok(data),
        Err(failure) => {
            // SAFETY: every pointer of `data` is NULL or one of this read's allocations.
            unsafe { free_data(&mut data) };
            Err(failure)
        }
    }
}

/// Reads this process's own context back. On success the strings and arrays of `data`
/// are `malloc`ed: free them with `otel_process_ctx_read_drop`. Non-string attribute
/// values (published through the Rust API) are left out.
#[cfg(not(otel_process_ctx_no_read))]
#[no_mangle]
pub extern "C" fn otel_process_ctx_read() -> otel_process_ctx_read_result {
    match boundary::guard(read) {
        Ok(data) => otel_process_ctx_read_result {
            success: true,
            error_message: core::ptr::null(),
            data,
        },
        Err(failure) => otel_process_ctx_read_result {
            success: false,
            error_message: failure.as_ptr(),
            data: EMPTY_DATA,
        },
    }
}

/// Frees the data of a result of `otel_process_ctx_read` and sets its pointers to NULL.
/// Returns `false` when `result` is NULL.
///
/// # Safety
///
/// `result` is NULL or points to a result returned by `otel_process_ctx_read` whose data
/// was not freed yet (a freed one has only NULLs, and may be passed again).
#[cfg(not(otel_process_ctx_no_read))]
#[no_mangle]
pub unsafe extern "C" fn otel_process_ctx_read_drop(
    result: *mut otel_process_ctx_read_result,
) -> bool {
    if result.is_null() {
        return false;
    }
    boundary::guard(|| {
        // SAFETY: non-NULL, and a live result of otel_process_ctx_read per the contract.
        unsafe { free_data(&mut (*result).data) };
        Ok(())
    })
    .is_ok()
}
