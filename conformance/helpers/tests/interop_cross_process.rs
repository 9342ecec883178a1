//! The reader against other processes: a real publisher that updates 10,000 times while
//! it is read, hand-made hostile contexts, and a publisher that exits mid-read.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_reader::memory::ReadMethod;
use otel_ctx_reader::process::{Malformed, OwnedValue, ReaderOptions};
use otel_ctx_reader::{Error, ProcessContextReader, Snapshot};

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

/// Records the largest allocation each thread makes.
struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; the bookkeeping touches only a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// A helper process that printed its `ready` line; killed and reaped on drop.
struct Helper {
    child: Child,
    stdout: Option<bounded::Lines>,
}

impl Helper {
    fn spawn(bin: &str, args: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let mut stdout =
            bounded::Lines::new(format!("{bin} {args:?}"), child.stdout.take().unwrap());
        let line = stdout.line("its `ready`", bounded::DEADLINE);
        assert!(line.starts_with("ready"), "{bin} {args:?} said {line:?}");
        Self {
            child,
            stdout: Some(stdout),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const FAKE: &str = env!("CARGO_BIN_EXE_otel-ctx-fake");
const PUBLISH: &str = env!("CARGO_BIN_EXE_otel-ctx-publish");

/// The version number of a stress snapshot, after checking that its copies agree.
fn stress_version(s: &Snapshot) -> u64 {
    let ctx = &s.context;
    assert_eq!(ctx.service_name(), Some("stress"));
    let Some(&OwnedValue::Int(n)) = ctx.resource_value("stress.counter") else {
        panic!("no stress.counter in {ctx:?}");
    };
    let n = n as u64;
    let decimal = ctx
        .resource_value("stress.counter.decimal")
        .and_then(OwnedValue::as_str);
    assert_eq!(
        decimal,
        Some(n.to_string().as_str()),
        "mixed versions: {ctx:?}"
    );
    let padding = ctx
        .resource_value("stress.padding")
        .and_then(OwnedValue::as_str);
    assert_eq!(
        padding.map(str::len),
        Some((n % 97) as usize),
        "mixed versions: {ctx:?}"
    );
    let hex = ctx
        .attribute_value("stress.counter.hex")
        .and_then(OwnedValue::as_str);
    assert_eq!(
        hex,
        Some(format!("{n:x}").as_str()),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(
        ctx.attribute_value("stress.counter.bytes"),
        Some(&OwnedValue::Bytes(n.to_le_bytes().to_vec())),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(s.payload_bytes.len(), s.payload_size as usize);
    n
}

#[test]
fn ten_thousand_updates_every_read_is_one_version() {
    const UPDATES: u64 = 10_000;
    let mut helper = Helper::spawn(PUBLISH, &["stress", &UPDATES.to_string()]);
    let mut reader = ProcessContextReader::open(helper.pid()).unwrap();
    let first = reader.read().unwrap();
    assert_eq!(stress_version(&first), 0);

    let done = Arc::new(AtomicBool::new(false));
    let mut stdout = helper.stdout.take().unwrap();
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            // The loop below gives up after 60 s without it.
            let line = stdout.next_line("its `done`", Duration::from_secs(90));
            done.store(true, Ordering::SeqCst);
            line.unwrap_or_default()
        })
    };
    helper
        .child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"go\n")
        .unwrap();

    let started = Instant::now();
    let (mut accepted, mut unchanged, mut still_updating) = (0u64, 0u64, 0u64);
    let mut versions = BTreeSet::new();
    let mut last_version = 0;
    let mut last_ts = first.monotonic_published_at_ns;
    for round in 0u64.. {
        let finished = done.load(Ordering::SeqCst);
        // Alternate full reads and cache-keyed reads.
        let result = if round % 2 == 0 {
            reader.read().map(Some)
        } else {
            reader.read_if_changed(last_ts)
        };
        match result {
            Ok(Some(s)) => {
                let n = stress_version(&s);
                assert!(
                    n >= last_version,
                    "version went back from {last_version} to {n}"
                );
                assert!(s.monotonic_published_at_ns >= last_ts);
                last_version = n;
                last_ts = s.monotonic_published_at_ns;
                versions.insert(n);
                accepted += 1;
            }
            Ok(None) => unchanged += 1,
            Err(Error::StillUpdating { .. }) => still_updating += 1,
            Err(e) => panic!("read failed during updates: {e}"),
        }
        if finished {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the publisher never finished"
        );
    }
    assert_eq!(watcher.join().unwrap().trim(), "done");
    let last = reader.read().unwrap();
    assert_eq!(stress_version(&last), UPDATES);
    println!(
        "{UPDATES} updates in {:?}: {accepted} accepted reads of {} distinct versions, \
         {unchanged} unchanged, {still_updating} gave up while updating",
        started.elapsed(),
        versions.len()
    );
    assert!(
        versions.len() >= 2,
        "the reads never overlapped the updates"
    );
}

#[test]
fn proc_mem_fallback_reads_another_process() {
    let helper = Helper::spawn(PUBLISH, &["serve"]);
    let options = ReaderOptions::default().with_read_method(ReadMethod::ProcMem);
    let mut reader = ProcessContextReader::with_options(helper.pid(), options).unwrap();
    let s = reader.read().unwrap();
    assert!(reader.uses_proc_mem());
    assert_eq!(s.context.service_name(), Some("cli-test-service"));
    assert_eq!(
        reader.read_if_changed(s.monotonic_published_at_ns).unwrap(),
        None
    );
}

/// Reads a hostile helper once: the error, checked for time and allocation size.
fn hostile(scenario: &str) -> Error {
    let helper = Helper::spawn(FAKE, &[scenario]);
    let mut reader = ProcessContextReader::open(helper.pid()).unwrap();
    LARGEST.with(|l| l.set(0));
    let started = Instant::now();
    let result = reader.read();
    let elapsed = started.elapsed();
    let largest = LARGEST.with(Cell::get);
    let e = result.expect_err("a hostile context must not read");
    println!(
        "{scenario}: {} in {elapsed:?}, largest allocation {largest} bytes: {e}",
        e.kind()
    );
    assert!(
        elapsed < Duration::from_secs(1),
        "{scenario} took {elapsed:?}"
    );
    assert!(
        largest <= 128 * 1024,
        "{scenario} allocated {largest} bytes"
    );
    assert_eq!(e.pid(), helper.pid());
    e
}

fn header_kind(e: &Error) -> Option<&'static str> {
    match e {
        Error::Malformed {
            problem: Malformed::Header(h),
            ..
        } => Some(h.kind()),
        _ => None,
    }
}

#[test]
fn hostile_bad_signature() {
    assert_eq!(
        header_kind(&hostile("bad-signature")),
        Some("bad_signature")
    );
}

#[test]
fn hostile_version_3() {
    assert_eq!(
        header_kind(&hostile("version-3")),
        Some("unsupported_version")
    );
}

#[test]
fn hostile_payload_size_4_gib() {
    let e = hostile("payload-4gib");
    assert_eq!(header_kind(&e), Some("payload_too_large"));
    assert!(e.to_string().contains("4294967295"), "{e}");
}

#[test]
fn hostile_empty_payload() {
    assert_eq!(
        header_kind(&hostile("empty-payload")),
        Some("empty_payload")
    );
}

#[test]
fn hostile_payload_pointer_unmapped() {
    let e = hostile("payload-unmapped");
    assert!(
        matches!(
            &e,
            Error::Malformed {
                problem: Malformed::PayloadUnmapped { .. },
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn hostile_timestamp_stuck_at_zero() {
    let e = hostile("timestamp-zero");
    assert!(matches!(e, Error::StillUpdating { .. }), "{e:?}");
}

#[test]
fn hostile_deeply_nested_payload() {
    let e = hostile("deep-nesting");
    assert!(
        matches!(&e, Error::Malformed { problem: Malformed::Payload(p), .. } if p.kind() == "too_deep"),
        "{e:?}"
    );
}

#[test]
fn hostile_garbage_payload() {
    let e = hostile("garbage-payload");
    assert!(
        matches!(&e, Error::Malformed { problem: Malformed::Payload(p), .. } if p.kind() == "invalid_wire_type"),
        "{e:?}"
    );
}

#[test]
fn target_exits_mid_read() {
    let helper = Helper::spawn(FAKE, &["exit-after", "300"]);
    let mut reader = ProcessContextReader::open(helper.pid()).unwrap();
    let started = Instant::now();
    let mut reads = 0u64;
    let e = loop {
        match reader.read() {
            Ok(s) => {
                assert_eq!(s.context.service_name(), Some("fake-service"));
                reads += 1;
            }
            Err(e) => break e,
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the helper never exited"
        );
    };
    println!("{reads} reads, then after {:?}: {e}", started.elapsed());
    assert!(reads > 0);
    assert!(matches!(e, Error::ProcessGone { .. }), "{e:?}");
    // Reading a gone process again is the same clean error.
    let again = reader.read().unwrap_err();
    assert!(matches!(again, Error::ProcessGone { .. }), "{again:?}");
    drop(helper);
    // Reaped, its id is free: as if it never was.
    let reaped = ProcessContextReader::open(reader.pid()).unwrap_err();
    assert!(
        matches!(
            reaped,
            Error::ProcessGone { .. } | Error::NoSuchProcess { .. }
        ),
        "{reaped:?}"
    );
}
