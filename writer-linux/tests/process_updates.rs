//! 100,000 updates: every timestamp is strictly greater than the one before, and neither
//! the heap, the mappings nor the resident set grow.

mod process_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE, MAX_PAYLOAD_SIZE};
use otel_ctx_codec::proto::AnyValueView;
use otel_ctx_writer::process::{Attributes, OwnedValue, Publisher, Resource};
use process_support::*;

/// Counts the bytes currently allocated through the global allocator.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is
// added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const UPDATES: i64 = 100_000;

/// Resident set size in pages, from `/proc/self/statm`.
fn resident_pages() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .expect("statm has a resident field")
}

fn mapping_count() -> usize {
    self_maps().lines().count()
}

/// The header in the publisher's mapping, as a reader sees it.
fn header_at(address: usize) -> ProcessContextHeader {
    // SAFETY: called only while the publisher that owns the mapping at `address` is alive.
    let bytes = unsafe { std::ptr::read_volatile(address as *const [u8; HEADER_SIZE]) };
    ProcessContextHeader::parse(&bytes, MAX_PAYLOAD_SIZE).expect("valid header")
}

#[test]
fn hundred_thousand_updates() {
    let _serial = lock();
    // A small resource keeps 100,000 updates quick under qemu-user too.
    let resource = Resource::from_attributes(
        Attributes::new()
            .with("service.name", "updates")
            .with("counter", 0i64),
    );
    let mut publisher = Publisher::publish(resource, Attributes::new()).expect("publish");
    let address = publisher.address();
    let mut last = header_at(address).monotonic_published_at_ns;

    // One round of updates first, so every lazily allocated buffer exists before counting.
    let mut counter = 0i64;
    let update = |publisher: &mut Publisher, counter: i64| {
        // Alternate the payload's size, so the allocator cannot just hand back one block.
        let label = if counter % 2 == 0 {
            "even"
        } else {
            "odd-and-longer"
        };
        let mut resource = publisher.resource().clone();
        resource.set("counter", counter);
        publisher
            .update(resource, Attributes::new().with("label", label))
            .expect("update");
    };
    for _ in 0..1000 {
        counter += 1;
        update(&mut publisher, counter);
    }
    last = last.max(header_at(address).monotonic_published_at_ns);
    let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
    let maps_before = mapping_count();
    let rss_before = resident_pages();

    for _ in 0..UPDATES {
        counter += 1;
        update(&mut publisher, counter);
        let header = header_at(address);
        assert!(
            header.monotonic_published_at_ns > last,
            "update {counter}: timestamp {} after {last}",
            header.monotonic_published_at_ns
        );
        last = header.monotonic_published_at_ns;
        if counter % 10_000 == 0 {
            // SAFETY: `publisher` is alive and unchanged during the read.
            let back = unsafe { read_context(address) }.expect("read back");
            assert_eq!(
                back.view().resource_value("counter"),
                Some(AnyValueView::Int(counter))
            );
        }
    }

    let heap_after = LIVE_BYTES.load(Ordering::Relaxed);
    let maps_after = mapping_count();
    let rss_after = resident_pages();
    assert_eq!(
        publisher.resource().get("counter"),
        Some(&OwnedValue::Int(counter))
    );
    // The payload alternates between two sizes: the live heap may differ by one payload.
    assert!(
        (heap_after - heap_before).abs() < 1024,
        "heap went from {heap_before} to {heap_after} bytes"
    );
    assert_eq!(maps_after, maps_before, "number of mappings changed");
    // A few pages of slack for the allocator's and the test harness's own bookkeeping.
    assert!(
        rss_after <= rss_before + 64,
        "resident set grew from {rss_before} to {rss_after} pages"
    );
    publisher.unpublish().expect("unpublish");
}
