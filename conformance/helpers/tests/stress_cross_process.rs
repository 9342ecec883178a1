//! The reader against a writer process that changes its process context and its threads'
//! records as fast as it can (`otel-ctx-stress-target`): a million reads, and not one
//! accepted result that mixes two versions.
//!
//! One reader thread reads the process context (full reads and cache-keyed reads, in
//! turn) and one reads the writer threads' records through ptrace, at the same time,
//! until they have made [`TOTAL_READS`] reads between them and at least
//! [`MIN_THREAD_READS`] of them are thread reads (counts, not time: a thread read stops a
//! busy thread and waits for the scheduler twice, so its rate depends on the load of the
//! machine far more than a process-context read does). The test fails if that takes
//! longer than a generous cap. Every accepted result is checked against
//! the self-checking format of the target (described in its source), and versions must
//! never go back.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_codec::attrs::AttrsIter;
use otel_ctx_codec::record::RecordHeader;
use otel_ctx_conformance_helpers::open_thread_reader;
use otel_ctx_reader::process::OwnedValue;
use otel_ctx_reader::thread::tls::PtraceError;
use otel_ctx_reader::thread::tls::SlotState;
use otel_ctx_reader::SampleError;
use otel_ctx_reader::{Error, ProcessContextReader, Snapshot};

#[path = "../../../reader-linux/tests/support/bounded.rs"]
mod bounded;

const TARGET: &str = env!("CARGO_BIN_EXE_otel-ctx-stress-target");

/// Reads to make in all: process-context reads (calls of `read` or `read_if_changed`)
/// and thread reads (each stops one thread, reads its record, lets it go).
const TOTAL_READS: u64 = 1_000_000;
/// Thread reads among them, at least.
const MIN_THREAD_READS: u64 = 20_000;
/// The run fails if the reads take longer than this: a bound against a reader that
/// stalls, not a speed goal. A debug build on two busy cores makes the reads in about
/// 140 s (each thread read stops and resumes a thread with ptrace).
const CAP: Duration = Duration::from_secs(360);

/// The goal, shared by both readers.
struct Progress {
    total: AtomicU64,
    thread_reads: AtomicU64,
    /// Set when the cap is reached.
    stop: AtomicBool,
}

impl Progress {
    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || (self.total.load(Ordering::Relaxed) >= TOTAL_READS
                && self.thread_reads.load(Ordering::Relaxed) >= MIN_THREAD_READS)
    }
}

/// The target process, killed and reaped on drop.
struct Target {
    child: Child,
    /// `(writer index, tid)` of every writer thread.
    writers: Vec<(u64, u32)>,
}

impl Target {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(TARGET)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {TARGET}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut printed = bounded::Lines::new(TARGET, stdout).until(
            "its writer threads and `ready`",
            bounded::DEADLINE,
            |l| l == "ready",
        );
        printed.pop();
        let mut writers = Vec::new();
        for line in printed {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["thread", index, tid] => writers.push((
                    index.parse().expect("writer index"),
                    tid.parse().expect("writer tid"),
                )),
                _ => panic!("unexpected target line {line:?}"),
            }
        }
        assert!(!writers.is_empty(), "the target started no writer thread");
        Self { child, writers }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(b"exit\n");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The version of a process-context snapshot, after checking that every copy of it in
/// the payload agrees.
fn process_version(s: &Snapshot) -> u64 {
    let ctx = &s.context;
    assert_eq!(ctx.service_name(), Some("stress-target"), "{ctx:?}");
    let Some(&OwnedValue::Int(v)) = ctx.resource_value("stress.counter") else {
        panic!("no stress.counter in {ctx:?}");
    };
    let v = v as u64;
    let text = |value: Option<&OwnedValue>| value.and_then(OwnedValue::as_str).map(str::to_owned);
    assert_eq!(
        text(ctx.resource_value("stress.counter.decimal")),
        Some(v.to_string()),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(
        text(ctx.resource_value("stress.padding")).map(|p| p.len()),
        Some((v % 97) as usize),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(
        text(ctx.attribute_value("stress.counter.hex")),
        Some(format!("{v:x}")),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(
        ctx.attribute_value("stress.counter.bytes"),
        Some(&OwnedValue::Bytes(v.to_le_bytes().to_vec())),
        "mixed versions: {ctx:?}"
    );
    assert_eq!(s.payload_bytes.len(), s.payload_size as usize);
    v
}

/// The counter `n` of a record of writer `index`, after checking that every copy of it
/// in the record agrees (the format of `otel-ctx-stress-target`). `attributes` are the
/// entries as the reader names them.
fn record_counter(
    index: u64,
    header: &RecordHeader,
    attrs_data: &[u8],
    attributes: &[(String, String)],
) -> u64 {
    let trace_id = header.trace_id;
    let n = u64::from_be_bytes(trace_id[..8].try_into().expect("8 bytes"));
    let mixed = || format!("writer {index}: mixed record {header:?} {attributes:?}");
    assert_eq!(trace_id[8..], (!n).to_be_bytes(), "{}", mixed());
    assert_eq!(
        header.span_id,
        (n ^ ((index + 1) << 56)).to_be_bytes(),
        "{}",
        mixed()
    );
    assert_eq!(header.trace_flags, n as u8, "{}", mixed());
    let entries: Vec<(u8, &[u8])> = AttrsIter::new(attrs_data).collect();
    let (decimal, thread, hex) = (n.to_string(), index.to_string(), format!("{n:x}"));
    let mut expected: Vec<(u8, &[u8])> = vec![(0, decimal.as_bytes()), (1, thread.as_bytes())];
    if entries.len() == 3 {
        expected.push((2, hex.as_bytes()));
    }
    assert_eq!(entries, expected, "{}", mixed());
    let mut named = vec![
        ("stress.n".to_owned(), decimal.clone()),
        ("stress.thread".to_owned(), thread.clone()),
    ];
    if entries.len() == 3 {
        named.push(("stress.hex".to_owned(), hex.clone()));
    }
    assert_eq!(attributes, named, "{}", mixed());
    n
}

/// Thread states of `pid` (the third field of `/proc/<pid>/task/<tid>/stat`).
fn thread_states(pid: u32) -> Vec<(u32, char)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let tid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
        Some((tid, state))
    })
    .collect()
}

#[derive(Default)]
struct ProcessCounts {
    elapsed: Duration,
    reads: u64,
    accepted: u64,
    unchanged: u64,
    still_updating: u64,
    versions: u64,
    last_version: u64,
}

#[derive(Default)]
struct ThreadCounts {
    elapsed: Duration,
    reads: u64,
    records: u64,
    /// The slot was NULL: between a detach and the next attach.
    null: u64,
    /// `valid` was 0: inside an in-place update.
    invalid: u64,
    /// The highest counter read of each writer.
    last: Vec<u64>,
}

#[test]
fn a_million_reads_of_a_writer_changing_both_contexts() {
    let target = Target::start(&["--threads", "2", "--nice", "10"]);
    let pid = target.pid();
    let writers = target.writers.clone();
    let started = Instant::now();
    let progress = Arc::new(Progress {
        total: AtomicU64::new(0),
        thread_reads: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });

    let process = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            let mut reader = ProcessContextReader::open(pid).expect("open the process context");
            let mut counts = ProcessCounts::default();
            let mut last_ts = 0;
            while !progress.done() {
                let result = if counts.reads % 2 == 0 {
                    reader.read().map(Some)
                } else {
                    reader.read_if_changed(last_ts)
                };
                counts.reads += 1;
                progress.total.fetch_add(1, Ordering::Relaxed);
                match result {
                    Ok(Some(snapshot)) => {
                        let v = process_version(&snapshot);
                        assert!(
                            v >= counts.last_version
                                && snapshot.monotonic_published_at_ns >= last_ts,
                            "went back from version {} to {v}",
                            counts.last_version
                        );
                        if v != counts.last_version {
                            counts.versions += 1;
                        }
                        counts.last_version = v;
                        last_ts = snapshot.monotonic_published_at_ns;
                        counts.accepted += 1;
                    }
                    Ok(None) => counts.unchanged += 1,
                    Err(Error::StillUpdating { .. }) => counts.still_updating += 1,
                    Err(e) => panic!("process-context read failed: {e}"),
                }
            }
            counts.elapsed = started.elapsed();
            counts
        })
    };

    let threads = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            let mut reader =
                open_thread_reader(pid, Duration::from_secs(20)).expect("open the thread reader");
            let resolution = format!("{:?}", reader.resolution());
            let mut counts = ThreadCounts {
                last: vec![0; writers.len()],
                ..ThreadCounts::default()
            };
            while !progress.done() {
                let (index, tid) = writers[(counts.reads % writers.len() as u64) as usize];
                // What `read_thread` does, keeping NULL and invalid apart.
                let result = reader.sample_thread(tid);
                counts.reads += 1;
                progress.total.fetch_add(1, Ordering::Relaxed);
                progress.thread_reads.fetch_add(1, Ordering::Relaxed);
                match result {
                    Ok(sample) => match sample.state {
                        SlotState::Record(record) => {
                            let names = reader.attribute_names(&record.attrs_data);
                            let n =
                                record_counter(index, &record.header, &record.attrs_data, &names);
                            let last = &mut counts.last[index as usize];
                            assert!(n >= *last, "writer {index} went back from {last} to {n}");
                            *last = n;
                            counts.records += 1;
                        }
                        SlotState::Null => counts.null += 1,
                        SlotState::Invalid { valid: 0, .. } => counts.invalid += 1,
                        other => panic!("thread {tid}: unexpected slot state {other:?}"),
                    },
                    Err(SampleError::Ptrace(PtraceError::Gone)) => {
                        panic!("writer thread {tid} exited")
                    }
                    Err(e) => panic!("thread read of {tid} failed: {e}"),
                }
            }
            counts.elapsed = started.elapsed();
            (counts, resolution)
        })
    };

    // The cap: stop both readers if they are far slower than expected.
    while !(process.is_finished() && threads.is_finished()) {
        if started.elapsed() > CAP {
            progress.stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let process = process.join().expect("the process-context reader panicked");
    let (threads, resolution) = threads.join().expect("the thread reader panicked");
    let elapsed = started.elapsed();
    let states = thread_states(pid);
    let total = progress.total.load(Ordering::Relaxed);

    println!(
        "{total} reads in {elapsed:.1?} ({:.0}/s) against pid {pid}",
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "process context: {} reads in {:.1?}, {} accepted ({} distinct versions, last {}), {} unchanged, \
         {} gave up while updating",
        process.reads,
        process.elapsed,
        process.accepted,
        process.versions,
        process.last_version,
        process.unchanged,
        process.still_updating
    );
    println!(
        "threads: {} reads in {:.1?}, {} records accepted, {} NULL (detached), {} with valid = 0 \
         (inside an update), writer counters reached {:?}; slot found by {resolution}",
        threads.reads,
        threads.elapsed,
        threads.records,
        threads.null,
        threads.invalid,
        threads.last
    );

    assert!(
        total >= TOTAL_READS && threads.reads >= MIN_THREAD_READS,
        "only {total} reads ({} of threads) in {elapsed:?}: the cap of {CAP:?} was reached",
        threads.reads
    );
    // The reads met the writers' changes: many versions and records, not one.
    assert!(process.versions >= 100, "{} versions", process.versions);
    assert!(process.accepted >= 1000, "{} accepted", process.accepted);
    assert!(
        threads.records >= threads.reads * 3 / 4,
        "{} records in {} thread reads",
        threads.records,
        threads.reads
    );
    assert!(
        threads.last.iter().all(|&n| n > 1000),
        "writers barely moved: {:?}",
        threads.last
    );
    // No thread is left stopped once the reads are done.
    assert!(
        states.iter().all(|&(_, state)| state != 't'),
        "threads left in tracing stop: {states:?}"
    );
}
