//! Bad input never crashes: NULL pointers, strings that are not UTF-8, over-long values,
//! odd-length attribute arrays and a 257th key each give a result with an error message.
//! Nothing here publishes a process context, so the tests can share the process.

use core::ffi::{c_char, CStr};
use core::ptr::{null, null_mut};

use otel_ctx_ffi::process::*;
use otel_ctx_ffi::thread::*;

/// The error message of a failed call.
fn message(success: bool, error_message: *const c_char) -> String {
    assert!(!success, "the call succeeded");
    assert!(!error_message.is_null(), "a failure has a message");
    // SAFETY: error messages are static NUL-terminated strings.
    unsafe { CStr::from_ptr(error_message) }
        .to_str()
        .expect("UTF-8 message")
        .to_owned()
}

/// A valid data block, to be spoiled by each case.
fn data() -> otel_process_ctx_data {
    otel_process_ctx_data {
        deployment_environment_name: c"test".as_ptr(),
        service_instance_id: c"id".as_ptr(),
        service_name: c"svc".as_ptr(),
        service_version: c"1".as_ptr(),
        telemetry_sdk_language: c"c".as_ptr(),
        telemetry_sdk_version: c"1".as_ptr(),
        telemetry_sdk_name: c"t".as_ptr(),
        resource_attributes: null_mut(),
        extra_attributes: null_mut(),
        thread_ctx_config: null(),
    }
}

fn publish_error(data: &otel_process_ctx_data) -> String {
    // SAFETY: every pointer of `data` is NULL or valid.
    let result = unsafe { otel_process_ctx_publish(data) };
    message(result.success, result.error_message)
}

#[test]
fn publish_refuses_bad_data() {
    // SAFETY: NULL is allowed and refused.
    let result = unsafe { otel_process_ctx_publish(null()) };
    assert!(message(result.success, result.error_message).contains("data is NULL"));

    let mut d = data();
    d.service_name = null();
    assert!(publish_error(&d).contains("is NULL"));

    let not_utf8 = [0xffu8, 0xfe, 0];
    let mut d = data();
    d.service_version = not_utf8.as_ptr().cast();
    assert!(publish_error(&d).contains("UTF-8"));

    let long = vec![b'a'; 40_000]
        .into_iter()
        .chain([0])
        .collect::<Vec<u8>>();
    let mut d = data();
    d.deployment_environment_name = long.as_ptr().cast();
    assert!(publish_error(&d).contains("INT16_MAX"));

    let mut odd = [c"key".as_ptr(), null()];
    let mut d = data();
    d.resource_attributes = odd.as_mut_ptr();
    assert!(publish_error(&d).contains("odd length"));
    let mut odd = [c"k".as_ptr(), c"v".as_ptr(), c"k2".as_ptr(), null()];
    let mut d = data();
    d.extra_attributes = odd.as_mut_ptr();
    assert!(publish_error(&d).contains("odd length"));

    let config = otel_thread_ctx_config_data {
        schema_version: null(),
        attribute_key_map: null_mut(),
    };
    let mut d = data();
    d.thread_ctx_config = &config;
    assert!(publish_error(&d).contains("schema_version is NULL"));

    let names: Vec<std::ffi::CString> = (0..257)
        .map(|i| std::ffi::CString::new(format!("key.{i}")).expect("no NUL"))
        .collect();
    let mut keys: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    keys.push(null());
    let config = otel_thread_ctx_config_data {
        schema_version: c"tlsdesc_v1_dev".as_ptr(),
        attribute_key_map: keys.as_mut_ptr(),
    };
    let mut d = data();
    d.thread_ctx_config = &config;
    assert!(publish_error(&d).contains("more than 256 keys"));
}

#[test]
fn read_without_a_context_and_drop_of_null() {
    let result = otel_process_ctx_read();
    assert!(message(result.success, result.error_message).contains("otel_process_ctx_publish"));
    assert!(result.data.service_name.is_null());
    // SAFETY: NULL is allowed and refused.
    assert!(!unsafe { otel_process_ctx_read_drop(null_mut()) });
}

#[test]
fn thread_calls_refuse_bad_input_and_attach_detach_swap_round_trip() {
    // SAFETY: every pointer below is NULL or valid for the call.
    unsafe {
        let r = otel_thread_ctx_attach(null_mut());
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_new"));
        otel_thread_ctx_free(null_mut());

        let r = otel_thread_ctx_new(null(), null(), 0, null(), 2);
        assert!(message(r.success, r.error_message).contains("attrs is NULL"));
        let bad = [otel_thread_ctx_attr {
            key: 0,
            value: null(),
        }];
        let r = otel_thread_ctx_new(null(), null(), 0, bad.as_ptr(), 1);
        assert!(message(r.success, r.error_message).contains("value is NULL"));
        let not_utf8 = [0xc3u8, 0x28, 0];
        let bad = [otel_thread_ctx_attr {
            key: 0,
            value: not_utf8.as_ptr().cast(),
        }];
        let r = otel_thread_ctx_new(null(), null(), 0, bad.as_ptr(), 1);
        assert!(message(r.success, r.error_message).contains("UTF-8"));
        let long = vec![b'v'; 300].into_iter().chain([0]).collect::<Vec<u8>>();
        let bad = [otel_thread_ctx_attr {
            key: 0,
            value: long.as_ptr().cast(),
        }];
        let r = otel_thread_ctx_new(null(), null(), 0, bad.as_ptr(), 1);
        assert!(message(r.success, r.error_message).contains("255 bytes"));
        let trace_id = [1u8; 16];
        let r = otel_thread_ctx_new(trace_id.as_ptr(), null(), 1, null(), 0);
        assert!(message(r.success, r.error_message).contains("both or neither"));
        let r = otel_thread_ctx_update(null(), null(), 0, null(), 0);
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_attach"));
        let r = otel_thread_ctx_append(0, c"v".as_ptr());
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_attach"));
        let r = otel_thread_ctx_append_truncated(0, c"v".as_ptr());
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_attach"));
        assert_eq!(r.count, 0);
        let r = otel_thread_ctx_truncate_attrs(0);
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_attach"));
        let r = otel_thread_ctx_attr_count();
        assert!(message(r.success, r.error_message).contains("otel_thread_ctx_attach"));

        // A round trip: attach, update in place, swap, detach, free.
        let span_id = [2u8; 8];
        let value = [otel_thread_ctx_attr {
            key: 0,
            value: c"/a".as_ptr(),
        }];
        let a = otel_thread_ctx_new(trace_id.as_ptr(), span_id.as_ptr(), 1, value.as_ptr(), 1);
        assert!(a.success);
        let b = otel_thread_ctx_new(null(), null(), 0, null(), 0);
        assert!(b.success);
        let previous = otel_thread_ctx_attach(a.context);
        assert!(previous.success && previous.context.is_null());
        let r = otel_thread_ctx_update(trace_id.as_ptr(), span_id.as_ptr(), 0, value.as_ptr(), 1);
        assert!(r.success);
        // The in-place appends refuse bad values and leave the one attribute.
        let r = otel_thread_ctx_append(1, null());
        assert!(message(r.success, r.error_message).contains("value is NULL"));
        let r = otel_thread_ctx_append(1, not_utf8.as_ptr().cast());
        assert!(message(r.success, r.error_message).contains("UTF-8"));
        let r = otel_thread_ctx_append(1, long.as_ptr().cast());
        assert!(message(r.success, r.error_message).contains("255 bytes"));
        let r = otel_thread_ctx_append_truncated(1, null());
        assert!(message(r.success, r.error_message).contains("value is NULL"));
        let r = otel_thread_ctx_append_truncated(1, not_utf8.as_ptr().cast());
        assert!(message(r.success, r.error_message).contains("UTF-8"));
        let huge = vec![b'h'; 40_000]
            .into_iter()
            .chain([0])
            .collect::<Vec<u8>>();
        let r = otel_thread_ctx_append_truncated(1, huge.as_ptr().cast());
        assert!(message(r.success, r.error_message).contains("32767"));
        assert_eq!(otel_thread_ctx_attr_count().count, 1);
        // Good values: appended, the long one cut to 255 bytes, then truncated away.
        assert!(otel_thread_ctx_append(1, c"GET".as_ptr()).success);
        let r = otel_thread_ctx_append_truncated(2, long.as_ptr().cast());
        assert!(r.success && r.count == 255, "kept {}", r.count);
        assert_eq!(otel_thread_ctx_attr_count().count, 3);
        let r = otel_thread_ctx_truncate_attrs(1);
        assert!(r.success && r.count == 1);
        assert_eq!(otel_thread_ctx_attr_count().count, 1);
        let swapped = otel_thread_ctx_swap(b.context);
        assert!(
            swapped.success && !swapped.context.is_null(),
            "a comes back"
        );
        let detached = otel_thread_ctx_detach();
        assert!(!detached.is_null(), "b comes back");
        assert!(otel_thread_ctx_detach().is_null());
        otel_thread_ctx_free(detached);
        otel_thread_ctx_free(swapped.context);

        let r = otel_thread_ctx_register_key(null());
        assert!(message(r.success, r.error_message).contains("NULL"));
        let r = otel_thread_ctx_register_key(not_utf8.as_ptr().cast());
        assert!(message(r.success, r.error_message).contains("UTF-8"));
        for i in 0..256 {
            let name = std::ffi::CString::new(format!("key.{i}")).expect("no NUL");
            let r = otel_thread_ctx_register_key(name.as_ptr());
            assert!(r.success, "key {i}");
            assert_eq!(usize::from(r.key), i);
        }
        let r = otel_thread_ctx_register_key(c"key.256".as_ptr());
        assert!(message(r.success, r.error_message).contains("256 names"));
    }
}

#[test]
fn contexts_of_few_and_many_attributes() {
    let values: Vec<std::ffi::CString> = (0..40)
        .map(|i| std::ffi::CString::new(format!("v{i}")).expect("no NUL"))
        .collect();
    let attrs: Vec<otel_thread_ctx_attr> = (0u8..)
        .zip(&values)
        .map(|(key, value)| otel_thread_ctx_attr {
            key,
            value: value.as_ptr(),
        })
        .collect();
    // Both sides of the 8-attribute boundary of the small list, and many more.
    for len in [0, 1, 8, 9, 40] {
        // SAFETY: `attrs` holds at least `len` attributes with NUL-terminated values.
        unsafe {
            let made = otel_thread_ctx_new(null(), null(), 0, attrs.as_ptr(), len);
            assert!(made.success, "new with {len}");
            let previous = otel_thread_ctx_attach(made.context);
            assert!(previous.success && previous.context.is_null());
            assert_eq!(otel_thread_ctx_attr_count().count, len);
            let r = otel_thread_ctx_update(null(), null(), 0, attrs.as_ptr(), len);
            assert!(r.success, "update with {len}");
            assert_eq!(otel_thread_ctx_attr_count().count, len);
            // A bad value after the first 8 is found too.
            if len > 8 {
                let mut bad = attrs[..len].to_vec();
                bad[len - 1].value = null();
                let r = otel_thread_ctx_update(null(), null(), 0, bad.as_ptr(), len);
                assert!(message(r.success, r.error_message).contains("value is NULL"));
                assert_eq!(otel_thread_ctx_attr_count().count, len);
            }
            otel_thread_ctx_free(otel_thread_ctx_detach());
        }
    }
}
