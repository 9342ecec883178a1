//! The API without a heap, run under a global allocator that panics on any call: the
//! buffer publisher (publish, update, unpublish), contexts in caller storage (attach,
//! in-place update, append, truncate, swap, detach, storage given back) and the fixed key
//! map. What they published is checked afterwards, with the allocator disarmed, through
//! the header and the TLS slot the way a reader sees them.
//!
//! A test of its own (`harness = false`): the test harness allocates on other threads,
//! which the allocator could not tell apart from the code under test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

use otel_ctx_codec::header::SIGNATURE;
use otel_ctx_codec::proto::{AnyValueView, Limits, ProcessContextView};
use otel_ctx_codec::record::{RecordView, MAX_RECORD_SIZE};
use otel_ctx_codec::threadlocal::ThreadlocalView;
use otel_ctx_writer::process::{AnyValue, BufferPublisher, KeyValue, ProcessContext};
use otel_ctx_writer::thread::{
    self, tls_slot_address, Attached, ContextError, KeyMap, RecordPool, ThreadContext,
};

mod thread_support;
use thread_support::with_own_record;

/// Whether an allocation now is a failure of the code under test.
static ARMED: AtomicBool = AtomicBool::new(false);

struct PanicOnAlloc;

// SAFETY: every call is passed to `System` unchanged, unless armed, when it disarms (so
// that the panic can allocate its message) and panics before allocating anything.
unsafe impl GlobalAlloc for PanicOnAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        refuse("alloc", layout);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        refuse("alloc_zeroed", layout);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refuse("dealloc", layout);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        refuse("realloc", layout);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: PanicOnAlloc = PanicOnAlloc;

fn refuse(call: &str, layout: Layout) {
    if ARMED.swap(false, Ordering::SeqCst) {
        panic!(
            "{call} of {} bytes while the no-alloc API ran",
            layout.size()
        );
    }
}

static RECORDS: RecordPool<2> = RecordPool::new();
static mut FIRST: [u8; 512] = [0; 512];
static mut SECOND: [u8; 512] = [0; 512];
static mut SMALL: [[u8; 16]; 2] = [[0; 16]; 2];
static mut THIRD: [[u8; 512]; 2] = [[0; 512]; 2];

/// What the armed part leaves behind for the checks.
struct Published {
    /// Header payload address and size after publish, and after update.
    headers: [(u64, u32); 2],
    first_payload: [u8; 512],
    first_len: usize,
    updated_payload: [u8; 512],
    updated_len: usize,
    /// The record as the slot showed it after the in-place changes.
    record: [u8; MAX_RECORD_SIZE],
    record_len: usize,
    /// What the swap and the detach handed back.
    swapped_back_ours: bool,
    detached: bool,
    storages_back: usize,
    unpublished: bool,
}

/// The armed part: nothing here may allocate.
fn run(out: &mut Published) {
    let mut keys = KeyMap::new();
    let route = keys.register("http.route").expect("room for a key");
    let method = keys
        .register("http.request.method")
        .expect("room for a key");
    // SAFETY: the only references ever made to the two buffers.
    let (first, second) = unsafe {
        (
            &mut *std::ptr::addr_of_mut!(FIRST),
            &mut *std::ptr::addr_of_mut!(SECOND),
        )
    };
    let mut publisher = BufferPublisher::new(first, second);
    let resource = [
        KeyValue {
            key: "service.name",
            value: AnyValue::String("no-alloc"),
        },
        KeyValue {
            key: "process.pid",
            value: AnyValue::Int(i64::from(std::process::id())),
        },
    ];
    let reference = keys.reference_data();
    publisher
        .publish(&ProcessContext {
            resource: &resource,
            attributes: &reference,
        })
        .expect("publish");
    let header = publisher.header().expect("published");
    out.headers[0] = (header.payload, header.payload_size);
    let payload = publisher.payload().expect("published");
    out.first_payload[..payload.len()].copy_from_slice(payload);
    out.first_len = payload.len();

    let version = [KeyValue {
        key: "service.version",
        value: AnyValue::String("2"),
    }];
    let resource = [resource[0], resource[1], version[0]];
    publisher
        .update(&ProcessContext {
            resource: &resource,
            attributes: &reference,
        })
        .expect("update");
    let header = publisher.header().expect("published");
    out.headers[1] = (header.payload, header.payload_size);
    let payload = publisher.payload().expect("published");
    out.updated_payload[..payload.len()].copy_from_slice(payload);
    out.updated_len = payload.len();

    let storage = RECORDS.take().expect("a storage");
    let context = ThreadContext::in_storage(storage, ThreadContext::CAPACITY).expect("capacity");
    assert!(context.attach().is_none(), "the slot starts empty");
    thread::update([1; 16], [2; 8], 1, &[(route, "/users/:id")]).expect("update");
    thread::append(method, "GET").expect("append");
    thread::append(route, "dropped").expect("append");
    assert_eq!(thread::truncate_attrs(2), Ok(2));
    with_own_record(|record| {
        out.record[..record.len()].copy_from_slice(record);
        out.record_len = record.len();
    })
    .expect("a record is attached");

    let storage = RECORDS.take().expect("a second storage");
    // A capacity out of range hands the storage back with the error.
    let refused = ThreadContext::in_storage(storage, 641).expect_err("641 bytes is too many");
    assert_eq!(
        refused.error,
        ContextError::CapacityOutOfRange { capacity: 641 }
    );
    let storage = refused.storage;
    // A context in storage is a record like any other: its capacity bounds it.
    let mut other = ThreadContext::in_storage(storage, 64).expect("compact capacity");
    assert_eq!(other.capacity(), 64);
    assert_eq!(
        other.append(route, "a value of forty bytes, too long for 64."),
        Err(ContextError::RecordFull {
            needed: 70,
            capacity: 64
        })
    );
    other.append(method, "GET").expect("room for a short value");
    let previous = thread::swap(Some(Attached::Context(other)));
    out.swapped_back_ours = matches!(previous, Some(Attached::Context(_)));
    // Put the first back, which hands the second back.
    let second = thread::swap(previous).and_then(Attached::into_context);
    let first = thread::detach();
    out.detached = first.is_some();
    out.storages_back = [first, second]
        .into_iter()
        .flatten()
        .filter_map(ThreadContext::into_storage)
        .count();
    // SAFETY: this thread's slot.
    out.detached = out.detached && unsafe { tls_slot_address().read() }.is_null();
    out.unpublished = publisher.unpublish().is_ok() && publisher.header().is_none();
}

/// The buffer publisher and the heap one share the process's one publication; a payload
/// that does not fit its buffer is refused with nothing published (allocator disarmed).
fn singleton_and_errors() {
    let resource = [KeyValue {
        key: "service.name",
        value: AnyValue::String("a name longer than sixteen bytes"),
    }];
    let context = ProcessContext {
        resource: &resource,
        attributes: &[],
    };
    // SAFETY: the only reference ever made to these buffers.
    let [a, b] = unsafe { &mut *std::ptr::addr_of_mut!(SMALL) };
    let mut small = BufferPublisher::new(a, b);
    assert!(matches!(
        small.publish(&context),
        Err(otel_ctx_writer::process::Error::Encode(_))
    ));
    assert!(!small.is_published() && small.header().is_none());
    assert!(matches!(
        small.update(&context),
        Err(otel_ctx_writer::process::Error::NotPublished)
    ));

    // SAFETY: the only reference ever made to these buffers.
    let [a, b] = unsafe { &mut *std::ptr::addr_of_mut!(THIRD) };
    let mut buffered = BufferPublisher::new(a, b);
    buffered.publish(&context).expect("publish");
    assert!(buffered.is_published());
    assert!(matches!(
        buffered.publish(&context),
        Err(otel_ctx_writer::process::Error::AlreadyPublished { .. })
    ));
    let heap = otel_ctx_writer::process::Publisher::publish(
        otel_ctx_writer::process::Resource::default(),
        otel_ctx_writer::process::Attributes::new(),
    );
    assert!(matches!(
        heap,
        Err(otel_ctx_writer::process::Error::AlreadyPublished { .. })
    ));
    buffered.unpublish().expect("unpublish");
    let heap = otel_ctx_writer::process::Publisher::publish(
        otel_ctx_writer::process::Resource::default(),
        otel_ctx_writer::process::Attributes::new(),
    )
    .expect("the context is free again");
    assert!(matches!(
        buffered.publish(&context),
        Err(otel_ctx_writer::process::Error::AlreadyPublished { .. })
    ));
    heap.unpublish().expect("unpublish");
    buffered.publish(&context).expect("publish again");
    let header = buffered.header().expect("published");
    assert_eq!(header.payload, buffered.payload().unwrap().as_ptr() as u64);
}

fn main() {
    let mut out = Published {
        headers: [(0, 0); 2],
        first_payload: [0; 512],
        first_len: 0,
        updated_payload: [0; 512],
        updated_len: 0,
        record: [0; MAX_RECORD_SIZE],
        record_len: 0,
        swapped_back_ours: false,
        detached: false,
        storages_back: 0,
        unpublished: false,
    };
    ARMED.store(true, Ordering::SeqCst);
    run(&mut out);
    assert!(
        ARMED.swap(false, Ordering::SeqCst),
        "the allocator was called"
    );

    // The header pointed at the first buffer, then at the second.
    let buffers = [
        std::ptr::addr_of!(FIRST) as u64,
        std::ptr::addr_of!(SECOND) as u64,
    ];
    assert_eq!(out.headers[0], (buffers[0], out.first_len as u32));
    assert_eq!(out.headers[1], (buffers[1], out.updated_len as u32));
    let view = ProcessContextView::decode(&out.first_payload[..out.first_len], &Limits::default())
        .expect("the first payload decodes");
    assert_eq!(
        view.resource_value("service.name"),
        Some(AnyValueView::String("no-alloc"))
    );
    let threadlocal = ThreadlocalView::from_context(&view).expect("reference data");
    let names: Vec<&str> = threadlocal.key_map.expect("a key map").iter().collect();
    assert_eq!(names, ["http.route", "http.request.method"]);
    let view =
        ProcessContextView::decode(&out.updated_payload[..out.updated_len], &Limits::default())
            .expect("the updated payload decodes");
    assert_eq!(
        view.resource_value("service.version"),
        Some(AnyValueView::String("2"))
    );
    assert_eq!(SIGNATURE, *b"OTEL_CTX");

    let record = RecordView::parse(&out.record[..out.record_len], MAX_RECORD_SIZE)
        .expect("the record parses");
    assert!(record.header.is_valid());
    assert_eq!(record.header.trace_id, [1; 16]);
    let entries: Vec<(u8, &[u8])> = record.entries().collect();
    assert_eq!(
        entries,
        [(0, b"/users/:id".as_slice()), (1, b"GET".as_slice())]
    );
    assert!(
        out.swapped_back_ours,
        "the swap handed back the first context"
    );
    assert!(out.detached, "detach emptied the slot");
    assert_eq!(out.storages_back, 2, "both storages were given back");
    assert!(out.unpublished, "unpublish withdrew the context");
    assert_eq!(RECORDS.available(), 0);
    assert!(RECORDS.take().is_none(), "each storage is handed out once");
    singleton_and_errors();
    println!("no_alloc: the API without a heap made no allocation");
}
