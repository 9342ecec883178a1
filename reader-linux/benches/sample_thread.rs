//! Sampling one stopped thread's record in another process: the allocation-free
//! `ThreadReader::sample_into` (the caller's buffer reused, names borrowed from the cached
//! key map) beside the allocating `ThreadReader::read_thread`.
//!
//! The bench runs itself a second time as the target (`OTEL_CTX_BENCH_TARGET` set): a
//! process that publishes a process context with a key map and keeps one thread with a
//! 3-attribute record attached. It needs ptrace rights over that child (root, or
//! `kernel.yama.ptrace_scope` at 0). Before measuring, it counts the allocations of 1,000
//! samples through `sample_into` with a counting global allocator, prints the figure, and
//! fails if it is not 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use otel_ctx_reader::{RecordBuffer, ThreadReader};

/// The system allocator, counting every allocation and reallocation.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout, as the caller promised it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc`/`realloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TARGET_ENV: &str = "OTEL_CTX_BENCH_TARGET";

/// The target: a process context with a key map, one thread with a record attached,
/// `READY <pid> <tid>` on stdout, then nothing until stdin closes.
fn target() {
    use otel_ctx_writer::process::{global, Resource};
    use otel_ctx_writer::thread::{register_all, ThreadContext};

    let resource = Resource::builder()
        .service_name("sample-bench")
        .build()
        .expect("resource");
    global::publish(resource).expect("publish");
    let [route, method, user] =
        register_all(["http.route", "http.request.method", "enduser.id"]).expect("keys");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let context = ThreadContext::new(
            [0x11; 16],
            [0x22; 8],
            0x01,
            &[(route, "/cart/:id"), (method, "POST"), (user, "u-12345")],
        )
        .expect("context");
        let _guard = context.attach_scoped();
        tx.send(rustix::thread::gettid().as_raw_nonzero().get())
            .expect("send tid");
        loop {
            std::thread::park();
        }
    });
    let tid = rx.recv().expect("tid");
    println!("READY {} {tid}", std::process::id());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

fn main() {
    if std::env::var_os(TARGET_ENV).is_some() {
        target();
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .env(TARGET_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the target");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("READY line");
    let mut words = line.split_whitespace().skip(1);
    let pid: u32 = words.next().and_then(|w| w.parse().ok()).expect("pid");
    let tid: u32 = words.next().and_then(|w| w.parse().ok()).expect("tid");

    let mut reader = ThreadReader::open(pid).expect("open the target's threads");
    let mut buffer = RecordBuffer::new();
    {
        let first = reader
            .sample_into(tid, &mut buffer)
            .expect("sample")
            .expect("a record is attached");
        assert_eq!(first.attribute("http.route"), Some(&b"/cart/:id"[..]));
    }

    const SAMPLES: u64 = 1000;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut attributes = 0;
    for _ in 0..SAMPLES {
        let context = reader.sample_into(tid, &mut buffer).expect("sample");
        attributes += context.map_or(0, |c| c.attributes().count());
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(attributes, 3 * SAMPLES as usize);
    println!(
        "sample_into: {allocations} allocations in {SAMPLES} samples after the first \
         ({} per sample)",
        allocations as f64 / SAMPLES as f64
    );
    assert_eq!(allocations, 0, "sample_into allocated");
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..SAMPLES {
        let context = reader.read_thread(tid).expect("sample");
        assert_eq!(context.map_or(0, |c| c.attributes.len()), 3);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    println!(
        "read_thread: {allocations} allocations in {SAMPLES} samples ({} per sample)",
        allocations as f64 / SAMPLES as f64
    );

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("sample_thread");
    group.bench_function("sample_into", |b| {
        b.iter(|| {
            let context = reader.sample_into(tid, &mut buffer).expect("sample");
            context.map_or(0, |c| c.attributes().count())
        })
    });
    group.bench_function("read_thread", |b| {
        b.iter(|| {
            let context = reader.read_thread(tid).expect("sample");
            context.map_or(0, |c| c.attributes.len())
        })
    });
    group.finish();
    c.final_summary();
    drop(child.stdin.take());
    let _ = child.wait();
}
