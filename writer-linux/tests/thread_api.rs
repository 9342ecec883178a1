//! Attach, detach, swap, scoped guard, in-place update, append and truncate, errors,
//! per-thread isolation: checked through the TLS slot, the way a reader sees it.

use otel_ctx_codec::record::{RecordView, MAX_RECORD_SIZE, RECORD_HEADER_SIZE};
use otel_ctx_writer::thread::{
    self, attached_record_address, tls_slot_address, ContextError, Key, ThreadContext,
};

mod thread_support;
use thread_support::{decode, own_record_bytes};

const ROUTE: Key = Key::from_index(0);
const METHOD: Key = Key::from_index(1);
const USER: Key = Key::from_index(2);

/// The record the slot points at, copied the way a reader copies it (header, then
/// `attrs_data_size` bytes), or `None` for NULL.
fn read_through_slot() -> Option<Vec<u8>> {
    // SAFETY: the slot address is this thread's `otel_thread_ctx_v1`, valid while the
    // thread lives.
    let record = unsafe { tls_slot_address().read() };
    assert_eq!(record, attached_record_address());
    own_record_bytes()
}

fn attrs_of(bytes: &[u8]) -> Vec<(u8, String)> {
    decode(bytes).attrs
}

fn ids_of(bytes: &[u8]) -> ([u8; 16], [u8; 8], u8) {
    let record = decode(bytes);
    (record.trace_id, record.span_id, record.trace_flags)
}

fn pairs(list: &[(u8, &str)]) -> Vec<(u8, String)> {
    list.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

#[test]
fn new_record_bytes_match_the_spec_layout() {
    let ctx = ThreadContext::new(
        [0x11; 16],
        [0x22; 8],
        0x01,
        &[(ROUTE, "/a"), (METHOD, "GET")],
    )
    .unwrap();
    let b = ctx.as_bytes();
    assert_eq!(&b[..16], &[0x11; 16]);
    assert_eq!(&b[16..24], &[0x22; 8]);
    assert_eq!(b[24], 1, "valid");
    assert_eq!(b[25], 0x01, "trace_flags");
    assert_eq!(u16::from_ne_bytes([b[26], b[27]]), 9, "attrs_data_size");
    assert_eq!(&b[28..], &[0, 2, b'/', b'a', 1, 3, b'G', b'E', b'T']);
    assert_eq!(ctx.capacity(), 640);
    assert_eq!(
        ctx.as_ptr() as usize % 64,
        0,
        "record starts on a cache line"
    );
    assert_eq!(ctx.attr_count(), 2);

    let empty = ThreadContext::with_capacity(28).unwrap();
    assert_eq!(empty.as_bytes(), &{
        let mut h = [0u8; 28];
        h[24] = 1;
        h
    });
    assert_eq!(
        ThreadContext::with_capacity(27).unwrap_err(),
        ContextError::CapacityOutOfRange { capacity: 27 }
    );
    assert_eq!(
        ThreadContext::with_capacity(641).unwrap_err().kind(),
        "capacity_out_of_range"
    );
}

#[test]
fn attach_detach_swap() {
    assert!(read_through_slot().is_none());
    assert!(!thread::is_attached());
    let a = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "a")]).unwrap();
    let b = ThreadContext::compact([2; 16], [2; 8], 0, &[(ROUTE, "b")]).unwrap();
    let (a_addr, b_addr) = (a.as_ptr(), b.as_ptr());

    assert!(a.attach().is_none());
    assert!(thread::is_attached());
    assert_eq!(attached_record_address(), a_addr);
    assert_eq!(attrs_of(&read_through_slot().unwrap()), pairs(&[(0, "a")]));

    // Swap: attaching b hands a back.
    let a = b.attach().expect("a was attached");
    assert!(matches!(a, thread::Attached::Context(_)), "{a:?}");
    assert_eq!(a.as_ptr(), a_addr);
    assert_eq!(attached_record_address(), b_addr);
    assert_eq!(ids_of(&read_through_slot().unwrap()), ([2; 16], [2; 8], 0));

    // Swap back with the free function; then detach.
    let b = thread::swap(Some(a))
        .and_then(thread::Attached::into_context)
        .expect("b was attached");
    assert_eq!(b.as_ptr(), b_addr);
    assert_eq!(b.capacity(), 64);
    let a = thread::detach().expect("a was attached");
    assert_eq!(a.as_ptr(), a_addr);
    assert!(read_through_slot().is_none());
    assert!(thread::detach().is_none());
    assert!(thread::swap(None).is_none());
}

#[test]
fn scoped_guard_restores_previous() {
    let outer = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "outer")]).unwrap();
    let outer_addr = outer.as_ptr();
    let outer_guard = outer.attach_scoped();
    {
        let inner = ThreadContext::new([2; 16], [2; 8], 1, &[(ROUTE, "inner")]).unwrap();
        let _inner_guard = inner.attach_scoped();
        assert_eq!(
            attrs_of(&read_through_slot().unwrap()),
            pairs(&[(0, "inner")])
        );
    }
    assert_eq!(attached_record_address(), outer_addr);
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "outer")])
    );

    // `detach` on the guard restores the previous (none) and hands the context back.
    let outer = outer_guard.detach().expect("outer was attached");
    assert_eq!(outer.as_ptr(), outer_addr);
    assert!(read_through_slot().is_none());

    // A guard whose context was swapped out meanwhile restores the previous anyway and
    // drops whatever was attached then.
    let guard = outer.attach_scoped();
    let replacement = ThreadContext::new([3; 16], [3; 8], 0, &[]).unwrap();
    let outer = replacement.attach().expect("outer");
    drop(guard);
    assert!(read_through_slot().is_none());
    drop(outer);
}

#[test]
fn update_in_place_keeps_the_address() {
    assert_eq!(
        thread::update([1; 16], [1; 8], 1, &[]).unwrap_err(),
        ContextError::NotAttached
    );
    let ctx = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "first"), (USER, "u1")]).unwrap();
    let addr = ctx.as_ptr();
    ctx.attach();
    thread::update([7; 16], [8; 8], 0x03, &[(METHOD, "POST")]).unwrap();
    assert_eq!(attached_record_address(), addr);
    let bytes = read_through_slot().unwrap();
    assert_eq!(ids_of(&bytes), ([7; 16], [8; 8], 3));
    assert_eq!(attrs_of(&bytes), pairs(&[(1, "POST")]));

    // An update to no trace and no attributes.
    thread::update([0; 16], [0; 8], 0, &[]).unwrap();
    let bytes = read_through_slot().unwrap();
    assert_eq!(bytes.len(), 28);
    assert_eq!(ids_of(&bytes), ([0; 16], [0; 8], 0));
    drop(thread::detach());
}

#[test]
fn append_and_truncate() {
    let ctx = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "/r")]).unwrap();
    ctx.attach();
    thread::append(METHOD, "GET").unwrap();
    thread::append(USER, "alice").unwrap();
    assert_eq!(thread::attached_attr_count().unwrap(), 3);
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "/r"), (1, "GET"), (2, "alice")])
    );
    // Last occurrence wins for readers: an append overrides an earlier value.
    thread::append(ROUTE, "/s").unwrap();
    let bytes = read_through_slot().unwrap();
    let view = RecordView::parse(&bytes, MAX_RECORD_SIZE).unwrap();
    assert_eq!(view.resolve(3).get(0), Some(&b"/s"[..]));

    assert_eq!(thread::truncate_attrs(2).unwrap(), 2);
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "/r"), (1, "GET")])
    );
    // Truncating to more entries than there are changes nothing.
    assert_eq!(thread::truncate_attrs(10).unwrap(), 2);
    assert_eq!(
        read_through_slot().unwrap().len(),
        RECORD_HEADER_SIZE + 4 + 5
    );
    // The released bytes are reused by the next append.
    thread::append(USER, "bob").unwrap();
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "/r"), (1, "GET"), (2, "bob")])
    );
    assert_eq!(thread::truncate_attrs(0).unwrap(), 0);
    assert_eq!(read_through_slot().unwrap().len(), RECORD_HEADER_SIZE);

    let mut ctx = thread::detach().unwrap();
    ctx.append(ROUTE, "detached").unwrap();
    assert_eq!(ctx.attr_count(), 1);
    assert_eq!(ctx.truncate_attrs(0), 0);
    assert_eq!(ctx.record_size(), 28);
    assert_eq!(
        thread::append(ROUTE, "x").unwrap_err(),
        ContextError::NotAttached
    );
}

#[test]
fn errors_leave_the_record_unchanged_and_valid() {
    let ctx = ThreadContext::compact([5; 16], [6; 8], 1, &[(ROUTE, "0123456789")]).unwrap();
    ctx.attach();
    let before = read_through_slot().unwrap();

    let long = "x".repeat(256);
    assert_eq!(
        thread::update([9; 16], [9; 8], 0, &[(ROUTE, "ok"), (USER, &long)]).unwrap_err(),
        ContextError::ValueTooLong { key: 2, len: 256 }
    );
    assert_eq!(read_through_slot().unwrap(), before);
    assert_eq!(
        thread::append(USER, &long).unwrap_err().kind(),
        "value_too_long"
    );
    assert_eq!(read_through_slot().unwrap(), before);

    // 28 + 12 used; 64 - 40 = 24 left: an entry of 23 bytes (2 + 21) fits, 23 + 2 does not.
    let err = thread::append(USER, &"y".repeat(23)).unwrap_err();
    assert_eq!(
        err,
        ContextError::RecordFull {
            needed: 65,
            capacity: 64
        }
    );
    assert!(err.to_string().contains("unchanged"));
    assert_eq!(read_through_slot().unwrap(), before);
    assert_eq!(
        thread::update([9; 16], [9; 8], 0, &[(ROUTE, &"z".repeat(35))]).unwrap_err(),
        ContextError::RecordFull {
            needed: 65,
            capacity: 64
        }
    );
    assert_eq!(read_through_slot().unwrap(), before);
    assert_eq!(before[24], 1);

    // The truncating append cuts at a character boundary: "é" is 2 bytes, 22 fit.
    let kept = thread::append_truncated(USER, &"é".repeat(20)).unwrap();
    assert_eq!(kept, 22);
    let bytes = read_through_slot().unwrap();
    assert_eq!(bytes.len(), 64);
    assert_eq!(
        attrs_of(&bytes),
        pairs(&[(0, "0123456789"), (2, &"é".repeat(11))])
    );
    // Full: not even an empty entry fits.
    assert_eq!(
        thread::append_truncated(USER, "a").unwrap_err().kind(),
        "record_full"
    );
    drop(thread::detach());

    // Values are cut at 255 bytes at most.
    let mut big = ThreadContext::new([0; 16], [0; 8], 0, &[]).unwrap();
    assert_eq!(big.append_truncated(ROUTE, &"€".repeat(100)).unwrap(), 255);
    assert_eq!(
        ThreadContext::new([0; 16], [0; 8], 0, &[(ROUTE, "a".repeat(255).as_str()); 3])
            .unwrap_err()
            .kind(),
        "record_full"
    );
}

#[test]
fn each_thread_has_its_own_slot() {
    let main_ctx = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "main")]).unwrap();
    main_ctx.attach();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0u8..4)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                assert!(
                    read_through_slot().is_none(),
                    "a new thread starts with NULL"
                );
                let name = format!("t{i}");
                let ctx =
                    ThreadContext::new([i + 10; 16], [i + 1; 8], 1, &[(ROUTE, &name)]).unwrap();
                ctx.attach();
                barrier.wait();
                for round in 0..1000u32 {
                    thread::update([i + 10; 16], [i + 1; 8], 1, &[(ROUTE, &name)]).unwrap();
                    let bytes = read_through_slot().unwrap();
                    assert_eq!(ids_of(&bytes).0, [i + 10; 16], "round {round}");
                    assert_eq!(attrs_of(&bytes), vec![(0, name.clone())]);
                }
                let slot = tls_slot_address() as usize;
                drop(thread::detach());
                slot
            })
        })
        .collect();
    let mut slots: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    slots.push(tls_slot_address() as usize);
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 5, "every thread has its own slot address");
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "main")])
    );
    drop(thread::detach());
}

#[test]
fn a_detached_context_moves_between_threads() {
    let ctx = ThreadContext::new([4; 16], [4; 8], 1, &[(ROUTE, "task")]).unwrap();
    let addr = ctx.as_ptr() as usize;
    let ctx = std::thread::spawn(move || {
        ctx.attach();
        assert_eq!(attached_record_address() as usize, addr);
        thread::append(METHOD, "GET").unwrap();
        thread::detach().unwrap()
    })
    .join()
    .unwrap();
    let guard = ctx.attach_scoped();
    assert_eq!(
        attrs_of(&read_through_slot().unwrap()),
        pairs(&[(0, "task"), (1, "GET")])
    );
    drop(guard);
    assert!(read_through_slot().is_none());
}

/// OTEP 4947: if either id is set, both MUST be; trace flags are zero when no ids are set.
/// A record that breaks either rule is refused, whichever way it is written, and the
/// record is left as it was.
#[test]
fn records_that_break_a_must_are_refused() {
    let bad: [([u8; 16], [u8; 8], u8, &str); 4] = [
        ([1; 16], [0; 8], 1, "trace_id_without_span_id"),
        ([0; 16], [2; 8], 1, "span_id_without_trace_id"),
        ([0; 16], [0; 8], 1, "trace_flags_without_ids"),
        ([0; 16], [0; 8], 0x80, "trace_flags_without_ids"),
    ];
    for (trace_id, span_id, flags, kind) in bad {
        let error = ThreadContext::new(trace_id, span_id, flags, &[]).unwrap_err();
        assert_eq!(error.kind(), kind, "new: {error}");
        let error = ThreadContext::compact(trace_id, span_id, flags, &[]).unwrap_err();
        assert_eq!(error.kind(), kind, "compact: {error}");
    }

    // The messages say what to do.
    let message = |(t, s, f, _): ([u8; 16], [u8; 8], u8, &str)| {
        ThreadContext::new(t, s, f, &[]).unwrap_err().to_string()
    };
    assert!(message(bad[0]).contains("set both"), "{}", message(bad[0]));
    assert!(message(bad[1]).contains("set both"), "{}", message(bad[1]));
    assert!(message(bad[2]).contains("pass 0"), "{}", message(bad[2]));

    // A detached record keeps its bytes.
    let mut context = ThreadContext::new([1; 16], [1; 8], 1, &[(ROUTE, "a")]).unwrap();
    let before = context.as_bytes().to_vec();
    for (trace_id, span_id, flags, kind) in bad {
        let error = context
            .update(trace_id, span_id, flags, &[(ROUTE, "b")])
            .unwrap_err();
        assert_eq!(error.kind(), kind, "ThreadContext::update: {error}");
        assert_eq!(context.as_bytes(), before);
    }

    // The attached record keeps its bytes, and stays valid.
    context.attach();
    for (trace_id, span_id, flags, kind) in bad {
        let error = thread::update(trace_id, span_id, flags, &[(ROUTE, "b")]).unwrap_err();
        assert_eq!(error.kind(), kind, "thread::update: {error}");
        assert_eq!(read_through_slot().unwrap(), before);
    }

    // What the rules allow: both ids with any flags, or neither with zero flags.
    thread::update([3; 16], [4; 8], 0, &[]).unwrap();
    thread::update([3; 16], [4; 8], 0x03, &[]).unwrap();
    thread::update([0; 16], [0; 8], 0, &[(ROUTE, "no trace")]).unwrap();
    assert_eq!(ids_of(&read_through_slot().unwrap()), ([0; 16], [0; 8], 0));
    drop(thread::detach());
}

/// One way to remove a context (OTEP 4947 asks writers to pick one): the slot is set to
/// NULL. `valid` is cleared only while an in-place update is in progress, so every record
/// the slot points at after a call returns is valid, and so is every record a removal
/// hands back, ready to be attached again as it is.
#[test]
fn a_context_is_removed_by_unsetting_the_pointer_only() {
    let valid_in_slot = || {
        let bytes = read_through_slot().expect("a record is attached");
        assert_eq!(bytes[24], 1, "the attached record is valid");
    };
    let context = ThreadContext::compact([1; 16], [1; 8], 1, &[(ROUTE, "a")]).unwrap();
    let address = context.as_ptr();
    context.attach();
    valid_in_slot();
    thread::update([2; 16], [2; 8], 1, &[(ROUTE, "b")]).unwrap();
    valid_in_slot();
    thread::update([0; 16], [3; 8], 1, &[]).unwrap_err();
    valid_in_slot();
    thread::append(METHOD, &"x".repeat(100)).unwrap_err();
    thread::append(METHOD, "GET").unwrap();
    valid_in_slot();
    thread::truncate_attrs(0).unwrap();
    valid_in_slot();

    // detach: NULL in the slot, the record handed back valid.
    let context = thread::detach().expect("attached");
    assert!(read_through_slot().is_none());
    assert_eq!(context.as_ptr(), address);
    assert_eq!(context.as_bytes()[24], 1, "a detached record stays valid");

    // swap to none, and a scoped guard: the same.
    context.attach();
    let context = thread::swap(None)
        .and_then(thread::Attached::into_context)
        .expect("attached");
    assert!(read_through_slot().is_none());
    assert_eq!(context.as_bytes()[24], 1);
    let context = context.attach_scoped().detach().expect("attached");
    assert!(read_through_slot().is_none());
    assert_eq!(context.as_bytes()[24], 1);
}
