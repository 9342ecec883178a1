//! Publish, update and unpublish, each read back as a reader would: the mapping found in
//! `/proc/self/maps` by its exact name, the header and payload checked through the codec.

mod process_support;

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use otel_ctx_codec::header::{MAX_PAYLOAD_SIZE, VERSION};
use otel_ctx_codec::threadlocal::{reference_data, ThreadlocalView, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_writer::process::{
    Attributes, Backing, Error, OwnedKeyValue, OwnedProcessContext, OwnedValue, Publisher,
    Resource, Syscalls,
};
use process_support::*;
use rustix::fd::OwnedFd;
use rustix::fs::MemfdFlags;
use rustix::io::Errno;

fn every_kind_resource() -> Resource {
    Resource::builder()
        .service_name("readback")
        .service_version("1.0.0")
        .deployment_environment_name("test")
        .attribute("k.string", "text")
        .attribute("k.bool", true)
        .attribute("k.int", -42i64)
        .attribute("k.double", 0.25)
        .attribute("k.bytes", vec![0u8, 1, 254, 255])
        .attribute("k.empty", OwnedValue::Empty)
        .attribute(
            "k.array",
            OwnedValue::Array(vec![
                OwnedValue::Int(1),
                OwnedValue::from("two"),
                OwnedValue::Array(vec![]),
            ]),
        )
        .attribute(
            "k.kvlist",
            OwnedValue::KvList(vec![
                OwnedKeyValue::new("inner", false),
                OwnedKeyValue::new("nested", OwnedValue::string_array(["a", "b"])),
            ]),
        )
        .build()
        .expect("build the resource")
}

/// Reads the published context back by name and checks it against the publisher.
fn check_published(publisher: &Publisher) -> ReadBack {
    // SAFETY: `publisher` is alive and borrowed for the whole read.
    let back = unsafe { read_back_published(publisher.address()) }.expect("read back");
    assert_eq!(back.header.version, VERSION);
    assert_eq!(
        back.header.monotonic_published_at_ns,
        publisher.monotonic_published_at_ns()
    );
    assert_eq!(back.payload, publisher.payload());
    let owned = OwnedProcessContext::from_view(&back.view());
    assert_eq!(owned.resource, publisher.resource().attributes().as_slice());
    assert_eq!(owned.attributes, publisher.attributes().as_slice());
    back
}

#[test]
fn maps_names_match_exactly() {
    let recorded = "\
7f1c2a400000-7f1c2a401000 rw-p 00000000 00:01 1234                       /memfd:OTEL_CTX (deleted)
7f1c2a402000-7f1c2a403000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX]
7f1c2a404000-7f1c2a405000 rw-s 00000000 00:01 99                         [anon_shmem:OTEL_CTX]
7f1c2a406000-7f1c2a407000 rw-p 00000000 00:01 1235                       /memfd:OTEL_CTX
7f1c2a408000-7f1c2a409000 rw-p 00000000 00:01 1236                       /memfd:OTEL_CTX2 (deleted)
7f1c2a40a000-7f1c2a40b000 r-xp 00000000 00:00 0                          [anon:OTEL_CTX]
7f1c2a40c000-7f1c2a40d000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX_OLD]
7f1c2a40e000-7f1c2a40f000 rw-p 00000000 08:01 42                         /tmp/OTEL_CTX
7f1c2a410000-7f1c2a411000 rw-p 00000000 00:00 0 
";
    let found: Vec<(usize, String)> = context_mappings_in(recorded)
        .into_iter()
        .map(|m| (m.start, m.name))
        .collect();
    assert_eq!(
        found,
        [
            (0x7f1c2a400000, "/memfd:OTEL_CTX (deleted)".to_string()),
            (0x7f1c2a402000, "[anon:OTEL_CTX]".to_string()),
            (0x7f1c2a404000, "[anon_shmem:OTEL_CTX]".to_string()),
            (0x7f1c2a406000, "/memfd:OTEL_CTX".to_string()),
        ]
    );
}

#[test]
fn publish_update_unpublish_read_back() {
    let _serial = lock();
    assert_eq!(context_mappings(), [], "no context before publishing");
    let extra = Attributes::new().with("extra.flag", true);
    let mut publisher = Publisher::publish(every_kind_resource(), extra).expect("publish");
    let address = publisher.address();

    let first = check_published(&publisher);
    let mapping = &context_mappings()[0];
    assert_eq!(mapping.end - mapping.start, publisher.mapping_len());
    match (publisher.backing(), publisher.is_named()) {
        (Backing::Memfd, false) => assert!(mapping.name.starts_with("/memfd:OTEL_CTX")),
        (Backing::Memfd, true) => assert!(mapping.name != "[anon:OTEL_CTX]"),
        (Backing::Anonymous { .. }, _) => assert_eq!(mapping.name, "[anon:OTEL_CTX]"),
    }
    let view = first.view();
    assert_eq!(
        OwnedValue::from(view.resource_value("service.name").unwrap()),
        OwnedValue::from("readback")
    );
    let instance_id = publisher
        .resource()
        .service_instance_id()
        .unwrap()
        .to_string();
    assert_eq!(instance_id.len(), 36);
    let mut last = first.header.monotonic_published_at_ns;
    assert!(last > 0);

    // Update 1: a resource attribute changes.
    publisher
        .update_with(|resource, _| {
            resource.set("service.version", "1.0.1");
        })
        .expect("update 1");
    let back = check_published(&publisher);
    assert!(back.header.monotonic_published_at_ns > last);
    last = back.header.monotonic_published_at_ns;
    assert_eq!(
        OwnedValue::from(back.view().resource_value("service.version").unwrap()),
        OwnedValue::from("1.0.1")
    );
    assert_eq!(publisher.address(), address, "updates reuse the mapping");

    // Update 2: thread-context reference data joins the extra attributes.
    let reference: Attributes = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user"])
        .into_iter()
        .map(OwnedKeyValue::from)
        .collect();
    publisher
        .update(publisher.resource().clone(), reference)
        .expect("update 2");
    let back = check_published(&publisher);
    assert!(back.header.monotonic_published_at_ns > last);
    last = back.header.monotonic_published_at_ns;
    let view = back.view();
    let threadlocal = ThreadlocalView::from_context(&view).expect("reference data");
    assert_eq!(threadlocal.schema_version, Some(SCHEMA_TLSDESC_V1_DEV));
    let names: Vec<&str> = threadlocal.key_map.unwrap().iter().collect();
    assert_eq!(names, ["http.route", "user"]);
    assert!(view.resource_value("threadlocal.schema_version").is_none());

    // Update 3: an attribute is removed; the instance id stays.
    publisher
        .update_with(|resource, _| {
            resource.remove("k.bytes");
        })
        .expect("update 3");
    let back = check_published(&publisher);
    assert!(back.header.monotonic_published_at_ns > last);
    assert!(back.view().resource_value("k.bytes").is_none());
    assert_eq!(
        back.view().resource_value("service.instance.id").unwrap(),
        otel_ctx_codec::proto::AnyValueView::String(&instance_id)
    );

    publisher.unpublish().expect("unpublish");
    assert_eq!(context_mappings(), [], "mapping gone after unpublish");
    assert!(!mapped_at(address));
}

#[test]
fn the_context_is_a_singleton() {
    let _serial = lock();
    let first = Publisher::publish(every_kind_resource(), Attributes::new()).expect("publish");
    let second = Publisher::publish(every_kind_resource(), Attributes::new());
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    assert_eq!(second.unwrap_err(), Error::AlreadyPublished { pid });
    assert_eq!(context_mappings().len(), 1);
    drop(first);
    assert_eq!(context_mappings(), [], "drop unpublishes");
    let again = Publisher::publish(every_kind_resource(), Attributes::new()).expect("publish");
    check_published(&again);
}

#[test]
fn refused_payloads_change_nothing() {
    let _serial = lock();
    let huge = Resource::builder()
        .attribute("blob", vec![0u8; MAX_PAYLOAD_SIZE as usize])
        .build()
        .unwrap();
    let err = Publisher::publish(huge.clone(), Attributes::new()).unwrap_err();
    assert!(
        matches!(err, Error::PayloadTooLarge { size, limit } if size > 65536 && limit == 65536),
        "{err:?}"
    );
    assert!(err.to_string().contains("65536"), "{err}");
    assert_eq!(context_mappings(), [], "nothing left behind");

    let mut publisher =
        Publisher::publish(every_kind_resource(), Attributes::new()).expect("publish");
    let before = check_published(&publisher);
    let err = publisher.update(huge, Attributes::new()).unwrap_err();
    assert_eq!(err.kind(), "payload_too_large");
    let mut deep = OwnedValue::Array(vec![]);
    for _ in 0..40 {
        deep = OwnedValue::Array(vec![deep]);
    }
    let err = publisher
        .update_with(|resource, _| {
            resource.set("deep", deep);
        })
        .unwrap_err();
    assert_eq!(err.kind(), "unreadable", "{err}");
    let after = check_published(&publisher);
    assert_eq!(
        after.header, before.header,
        "a refused update changes nothing"
    );
    assert_eq!(after.payload, before.payload);
}

// The tests below replace the two tolerated syscalls through `Syscalls`. Their hooks are
// plain `fn`s, so they report through statics; the tests are serialised by `lock()`.

static NAMING_CALLS: AtomicUsize = AtomicUsize::new(0);
static NAMED_ADDRESS: AtomicUsize = AtomicUsize::new(0);
static MEMFD_FLAGS: Mutex<Vec<MemfdFlags>> = Mutex::new(Vec::new());

fn memfd_denied(_: &CStr, _: MemfdFlags) -> Result<OwnedFd, Errno> {
    Err(Errno::PERM)
}

fn naming_succeeds(region: &[u8], _: &CStr) -> Result<(), Errno> {
    NAMING_CALLS.fetch_add(1, Ordering::SeqCst);
    NAMED_ADDRESS.store(region.as_ptr() as usize, Ordering::SeqCst);
    Ok(())
}

fn naming_fails(region: &[u8], _: &CStr) -> Result<(), Errno> {
    NAMING_CALLS.fetch_add(1, Ordering::SeqCst);
    NAMED_ADDRESS.store(region.as_ptr() as usize, Ordering::SeqCst);
    Err(Errno::INVAL)
}

fn memfd_without_noexec_seal(name: &CStr, flags: MemfdFlags) -> Result<OwnedFd, Errno> {
    MEMFD_FLAGS.lock().unwrap().push(flags);
    if flags.contains(MemfdFlags::NOEXEC_SEAL) {
        Err(Errno::INVAL)
    } else {
        rustix::fs::memfd_create(name, flags)
    }
}

#[test]
fn memfd_denied_and_naming_succeeds_publishes_anonymous() {
    let _serial = lock();
    NAMING_CALLS.store(0, Ordering::SeqCst);
    let syscalls = Syscalls {
        memfd_create: memfd_denied,
        name_region: naming_succeeds,
    };
    let mut publisher =
        Publisher::publish_with_syscalls(every_kind_resource(), Attributes::new(), syscalls)
            .expect("publish succeeds when naming does");
    assert_eq!(
        publisher.backing(),
        Backing::Anonymous {
            memfd_error: Errno::PERM
        }
    );
    assert!(publisher.is_named());
    assert_eq!(NAMING_CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(NAMED_ADDRESS.load(Ordering::SeqCst), publisher.address());
    // The simulated naming did not name it, so read it at its address.
    // SAFETY: `publisher` is alive and borrowed for the whole read.
    let first = unsafe { read_context(publisher.address()) }.expect("read back");
    assert_eq!(first.payload, publisher.payload());
    publisher
        .update_with(|resource, _| {
            resource.set("service.version", "2");
        })
        .expect("update");
    assert_eq!(NAMING_CALLS.load(Ordering::SeqCst), 2, "updates name again");
    // SAFETY: as above.
    let second = unsafe { read_context(publisher.address()) }.expect("read back");
    assert!(second.header.monotonic_published_at_ns > first.header.monotonic_published_at_ns);
    assert_eq!(second.payload, publisher.payload());
    let address = publisher.address();
    publisher.unpublish().expect("unpublish");
    assert!(!mapped_at(address));
}

#[test]
fn memfd_denied_and_naming_failing_is_undiscoverable() {
    let _serial = lock();
    NAMING_CALLS.store(0, Ordering::SeqCst);
    NAMED_ADDRESS.store(0, Ordering::SeqCst);
    let syscalls = Syscalls {
        memfd_create: memfd_denied,
        name_region: naming_fails,
    };
    let err = Publisher::publish_with_syscalls(every_kind_resource(), Attributes::new(), syscalls)
        .unwrap_err();
    assert_eq!(
        err,
        Error::Undiscoverable {
            memfd: Errno::PERM,
            naming: Errno::INVAL
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("EPERM") && message.contains("EINVAL"),
        "{message}"
    );
    assert!(message.contains("no reader can find it"), "{message}");
    assert_eq!(NAMING_CALLS.load(Ordering::SeqCst), 1, "naming was tried");
    let address = NAMED_ADDRESS.load(Ordering::SeqCst);
    assert_ne!(address, 0);
    assert!(
        !mapped_at(address),
        "the undiscoverable mapping was unmapped"
    );
    // The singleton was released: a normal publish works.
    let publisher = Publisher::publish(every_kind_resource(), Attributes::new()).expect("publish");
    check_published(&publisher);
}

#[test]
fn memfd_retried_without_noexec_seal() {
    let _serial = lock();
    MEMFD_FLAGS.lock().unwrap().clear();
    let syscalls = Syscalls {
        memfd_create: memfd_without_noexec_seal,
        ..Syscalls::default()
    };
    let publisher =
        Publisher::publish_with_syscalls(every_kind_resource(), Attributes::new(), syscalls)
            .expect("publish");
    assert_eq!(publisher.backing(), Backing::Memfd);
    let base = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    assert_eq!(
        *MEMFD_FLAGS.lock().unwrap(),
        [base | MemfdFlags::NOEXEC_SEAL, base]
    );
    check_published(&publisher);
}
