//! A thread that exits with a context attached frees it, after setting its slot to NULL;
//! attach/detach cycles allocate nothing. Checked with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use otel_ctx_writer::thread::{self, attached_record_address, Key, ThreadContext};

/// Counts the heap blocks of records: 64-aligned blocks of a 64-byte prefix plus the
/// record capacity. No other allocation of this test binary is 64-aligned.
struct CountingAllocator;

static RECORD_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static RECORD_FREES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Allocations made by the current thread (const-initialised: no allocation itself).
    static THREAD_ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_thread_alloc() {
    let _ = THREAD_ALLOCS.try_with(|n| n.set(n.get() + 1));
}
/// Records freed while the freeing thread's slot still pointed at them.
static FREED_WHILE_ATTACHED: AtomicUsize = AtomicUsize::new(0);

const PREFIX: usize = 64;

fn is_record_block(layout: Layout) -> bool {
    layout.align() == 64 && layout.size() >= PREFIX + 28 && layout.size() <= PREFIX + 640
}

// SAFETY: forwards to the system allocator unchanged; the counters have no effect on it.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_thread_alloc();
        if is_record_block(layout) {
            RECORD_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_thread_alloc();
        if is_record_block(layout) {
            RECORD_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_record_block(layout) {
            RECORD_FREES.fetch_add(1, Ordering::Relaxed);
            if attached_record_address() == ptr.wrapping_add(PREFIX).cast_const() {
                FREED_WHILE_ATTACHED.fetch_add(1, Ordering::Relaxed);
            }
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The tests share the counters: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn live_records() -> usize {
    RECORD_ALLOCS.load(Ordering::SeqCst) - RECORD_FREES.load(Ordering::SeqCst)
}

#[test]
fn thread_exit_frees_the_attached_context_after_clearing_the_slot() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = live_records();
    let handles: Vec<_> = (0..8u8)
        .map(|i| {
            std::thread::spawn(move || {
                let ctx =
                    ThreadContext::new([i + 1; 16], [i + 1; 8], 1, &[(Key::from_index(0), "x")])
                        .unwrap();
                assert!(ctx.attach().is_none());
                if i % 2 == 0 {
                    // Detach and attach again: the exit hook stays armed.
                    let ctx = thread::detach().unwrap();
                    ctx.attach();
                }
                if i % 4 == 0 {
                    // Swap in a compact one: the exit hook frees whatever is attached last.
                    let compact = ThreadContext::compact([1; 16], [1; 8], 1, &[]).unwrap();
                    drop(compact.attach());
                }
                assert!(thread::is_attached());
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(live_records(), before, "every attached record was freed");
    assert_eq!(FREED_WHILE_ATTACHED.load(Ordering::SeqCst), 0);
}

#[test]
fn freeing_never_happens_while_attached() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = live_records();
    let ctx = ThreadContext::new([1; 16], [1; 8], 1, &[]).unwrap();
    drop(ctx.attach_scoped());
    let a = ThreadContext::new([1; 16], [1; 8], 1, &[]).unwrap();
    let b = ThreadContext::new([2; 16], [2; 8], 1, &[]).unwrap();
    a.attach();
    drop(b.attach());
    drop(thread::detach());
    assert_eq!(live_records(), before);
    assert_eq!(FREED_WHILE_ATTACHED.load(Ordering::SeqCst), 0);
}

#[test]
fn hot_path_does_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let key = Key::from_index(3);
    let mut ctx = Some(ThreadContext::new([1; 16], [1; 8], 1, &[(key, "a")]).unwrap());
    let mut spare = Some(ThreadContext::compact([2; 16], [2; 8], 1, &[]).unwrap());
    // The first attach arms the exit hook, which may allocate once: do it before counting.
    drop(ctx.take().unwrap().attach());
    ctx = thread::detach();
    let allocs = THREAD_ALLOCS.with(Cell::get);
    for i in 0..10_000u32 {
        assert!(ctx.take().unwrap().attach().is_none());
        thread::update(
            [i as u8 | 0x80; 16],
            [1; 8],
            1,
            &[(key, "route"), (key, "GET")],
        )
        .unwrap();
        thread::append(key, "more").unwrap();
        thread::truncate_attrs(1).unwrap();
        // Swap the spare in (ctx comes back), then ctx in again (the spare comes back).
        let back = spare.take().unwrap().attach();
        spare = thread::swap(back).and_then(thread::Attached::into_context);
        ctx = thread::detach();
        let guard = spare.take().unwrap().attach_scoped();
        spare = guard.detach();
        assert!(ctx.is_some() && spare.is_some());
    }
    assert_eq!(THREAD_ALLOCS.with(Cell::get), allocs, "no allocation");
}
