//! The eBPF sampler against the writers of the TLS matrix (C programs built by gcc and
//! musl-gcc in every access model, with the matrix's `writer.c`) and the Rust writer:
//! for every thread, each sample the BPF program takes must be the context the ptrace
//! reader reads of the same thread, threads without a context must sample as none, and
//! a thread that exits is no longer sampled. The targets' threads spin, since a CPU-clock
//! tick only samples a running thread. Needs root (or CAP_BPF and CAP_PERFMON), a kernel
//! with BTF, gcc and musl-tools.
#![cfg(all(feature = "ebpf", target_arch = "x86_64"))]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use otel_ctx_codec::record::RecordHeader;
use otel_ctx_reader::thread::tls::AccessModel;
use otel_ctx_reader::thread::tls::SlotLocation;
use otel_ctx_reader::thread::{OwnedThreadContext, ThreadReaderOptions, ThreadReport};
use otel_ctx_reader::{ThreadContextRef, ThreadReader};
use otel_ctx_sampler::ebpf::{EbpfOptions, EbpfSampler};
use otel_ctx_sampler::{Method, Sampler, SamplerOptions};

// Shared with `tls_matrix.rs`, which uses all of it (this test leaves `Printed::slot`).
#[allow(dead_code)]
#[path = "../../reader-linux/tests/fixtures/tls/matrix.rs"]
mod matrix;

use matrix::{bounded, start, Target};

const BUSY_MAIN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/ebpf_fixtures/busy_main.c"
);

/// A thread's context as either path read it, in comparable form.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Context {
    record_address: u64,
    header: RecordHeader,
    attrs_data: Vec<u8>,
    attributes: Vec<(String, String)>,
}

impl From<&OwnedThreadContext> for Context {
    fn from(c: &OwnedThreadContext) -> Self {
        Self {
            record_address: c.record_address,
            header: c.header,
            attrs_data: c.attrs_data.clone(),
            attributes: c.attributes.clone(),
        }
    }
}

impl From<&ThreadContextRef<'_>> for Context {
    fn from(c: &ThreadContextRef<'_>) -> Self {
        Self {
            record_address: c.record_address,
            header: c.header,
            attrs_data: c.attrs_data.to_vec(),
            attributes: c
                .attributes()
                .map(|(k, v)| (k.to_owned(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
        }
    }
}

/// Samples with the eBPF sampler for `window`; every sample per thread (`None`: no
/// context), named with the reader's key map.
fn sample(
    sampler: &mut EbpfSampler,
    reader: &mut ThreadReader,
    window: Duration,
    name: &str,
) -> HashMap<u32, Vec<Option<Context>>> {
    let mut seen: HashMap<u32, Vec<Option<Context>>> = HashMap::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        sampler
            .wait(Duration::from_millis(20))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        while let Some(sample) = sampler.next_sample(reader) {
            let tid = sample.tid;
            let context = sample
                .context
                .unwrap_or_else(|e| panic!("{name}: sample of thread {tid}: {e}"))
                .map(|c| Context::from(&c));
            seen.entry(tid).or_default().push(context);
        }
    }
    seen
}

/// Enough samples for every spinning thread at 999 Hz on every CPU.
const WINDOW: Duration = Duration::from_millis(600);

/// Checks one running fixture: the eBPF sampler and the ptrace reader agree on every
/// thread. Returns the reader and sampler for further checks.
fn check(
    name: &str,
    target: &Target,
    model: AccessModel,
    named: bool,
) -> (ThreadReader, EbpfSampler) {
    let pid = target.child.id();
    let options = ThreadReaderOptions::default().with_require_known_schema(named);
    let mut reader =
        ThreadReader::with_options(pid, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        reader.resolution().model,
        model,
        "{name}: {:?}",
        reader.resolution()
    );

    // What ptrace reads of each printed thread: the reference.
    let mut expected = HashMap::new();
    for t in &target.threads {
        let context = reader
            .read_thread(t.tid)
            .unwrap_or_else(|e| panic!("{name}: ptrace read of {}: {e}", t.tid));
        assert_eq!(
            context.as_ref().map_or(0, |c| c.record_address),
            t.record,
            "{name}: ptrace, thread {}",
            t.tid
        );
        expected.insert(t.tid, context.as_ref().map(Context::from));
    }

    let mut sampler = EbpfSampler::new(EbpfOptions::default().with_frequency_hz(999))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    sampler
        .add_process(&reader)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let seen = sample(&mut sampler, &mut reader, WINDOW, name);
    for t in &target.threads {
        let samples = seen.get(&t.tid).map_or(&[][..], Vec::as_slice);
        assert!(
            !samples.is_empty(),
            "{name}: no eBPF sample of spinning thread {} (samples: {:?})",
            t.tid,
            seen.iter().map(|(k, v)| (k, v.len())).collect::<Vec<_>>()
        );
        for s in samples {
            assert_eq!(
                s, &expected[&t.tid],
                "{name}: eBPF sample of thread {}",
                t.tid
            );
        }
    }
    // Any other thread sampled (the main thread, blocked in read, rarely is) has no
    // context.
    for (tid, samples) in &seen {
        if !expected.contains_key(tid) {
            assert!(
                samples.iter().all(Option::is_none),
                "{name}: thread {tid} is not a context thread: {samples:?}"
            );
        }
    }
    (reader, sampler)
}

/// The first context thread exits: after its `gone`, it is never sampled again, and
/// the others still are.
fn check_exit(
    name: &str,
    target: &mut Target,
    reader: &mut ThreadReader,
    sampler: &mut EbpfSampler,
) {
    let stdin = target.child.stdin.as_mut().expect("piped stdin");
    stdin.write_all(b"x").expect("ask a thread to exit");
    stdin.flush().expect("flush");
    let line = target.lines.line("a thread's `gone`", bounded::DEADLINE);
    let gone: u32 = line
        .strip_prefix("gone ")
        .unwrap_or_else(|| panic!("{name}: unexpected line {line:?}"))
        .parse()
        .expect("tid");
    // Samples taken before the exit are in the ring already: drain them.
    while sampler.next_sample(&mut *reader).is_some() {}
    let seen = sample(sampler, reader, WINDOW, name);
    assert!(
        !seen.contains_key(&gone),
        "{name}: exited thread {gone} was sampled"
    );
    for t in target.threads.iter().filter(|t| t.tid != gone) {
        assert!(
            seen.contains_key(&t.tid),
            "{name}: thread {} no longer sampled",
            t.tid
        );
    }
}

/// The thread pointer the BPF program reads (`task->thread.fsbase`) is the one the
/// thread itself sees.
fn check_thread_pointers(
    name: &str,
    target: &Target,
    sampler: &mut EbpfSampler,
    reader: &mut ThreadReader,
) {
    let want: HashMap<u32, u64> = target.threads.iter().map(|t| (t.tid, t.tp)).collect();
    let end = Instant::now() + WINDOW;
    let mut checked = 0;
    while Instant::now() < end && checked < 50 {
        sampler.wait(Duration::from_millis(20)).expect("wait");
        while let Some(s) = sampler.next_sample(&mut *reader) {
            if let Some(tp) = want.get(&s.tid) {
                assert_eq!(s.thread_pointer, *tp, "{name}: thread pointer of {}", s.tid);
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "{name}: no sample to check thread pointers on");
}

#[test]
fn every_access_model_on_glibc_and_musl() {
    let mut passed = Vec::new();
    for case in matrix::build("ebpf-matrix", BUSY_MAIN) {
        let mut target = case.start();
        let (mut reader, mut sampler) = check(&case.label, &target, case.model, false);
        // A thread that exits, under a constant-offset model and through the DTV (the one
        // case run without spare static TLS).
        let exits = case.label == "le-glibc" || !case.env.is_empty();
        if exits {
            check_thread_pointers(&case.label, &target, &mut sampler, &mut reader);
            check_exit(&case.label, &mut target, &mut reader, &mut sampler);
            passed.push(format!("{} (thread pointers, a thread exits)", case.label));
        } else {
            passed.push(case.label);
        }
    }
    eprintln!("eBPF matches ptrace on: {}", passed.join(", "));
}

#[test]
fn rust_writer_with_key_map() {
    let target = start(&matrix::busy_fixture(), &[], &[]);
    // Named attributes: the key map of the process context names both paths' samples.
    let (mut reader, mut sampler) = check("rust-writer", &target, AccessModel::LocalExec, true);
    check_thread_pointers("rust-writer", &target, &mut sampler, &mut reader);

    // A snapshot by the library's sampler: every spinning thread, as ptrace reads it,
    // under its own name.
    let reports = ebpf_snapshot(&[target.child.id()]);
    for t in &target.threads {
        let report = reports
            .iter()
            .find(|(_, r)| r.tid == t.tid)
            .map(|(_, r)| r)
            .unwrap_or_else(|| panic!("thread {} not in the snapshot", t.tid));
        let ebpf = report.context.as_ref().expect("a sampled context");
        let ptrace = reader.read_thread(t.tid).expect("a ptrace read");
        assert_eq!(ebpf, &ptrace, "snapshot of thread {}", t.tid);
        assert!(report.name.starts_with("busy-"), "{}", report.name);
    }

    // A new slot location reaches the program, and no sample computed with the old one
    // is handed out after the change: first a DTV entry no thread has (every thread
    // samples as having no TLS block), then the real location again.
    let good = reader.resolution().clone();
    let mut nowhere = good.clone();
    nowhere.location = SlotLocation::Dtv {
        module_id: 1 << 19,
        offset: 0,
    };
    sampler
        .set_process_resolution(reader.pid(), &nowhere)
        .expect("reconfigure");
    let seen = sample(&mut sampler, &mut reader, WINDOW, "nowhere");
    assert!(!seen.is_empty(), "no sample under the changed location");
    for (tid, samples) in &seen {
        assert!(
            samples.iter().all(Option::is_none),
            "thread {tid}: {samples:?}"
        );
    }
    sampler
        .set_process_resolution(reader.pid(), &good)
        .expect("reconfigure");
    let seen = sample(&mut sampler, &mut reader, WINDOW, "back");
    for t in target.threads.iter().filter(|t| t.record != 0) {
        let samples = seen.get(&t.tid).map_or(&[][..], Vec::as_slice);
        assert!(!samples.is_empty(), "thread {} not sampled", t.tid);
        assert!(
            samples
                .iter()
                .all(|s| s.as_ref().map(|c| c.record_address) == Some(t.record)),
            "thread {}: a sample of the old location was handed out: {samples:?}",
            t.tid
        );
    }
}

#[test]
fn stacks_and_registers_with_each_sample() {
    let target = start(&matrix::busy_fixture(), &[], &[]);
    let pid = target.child.id();
    let mut reader = ThreadReader::open(pid).expect("thread reader");
    let options = EbpfOptions::default()
        .with_frequency_hz(999)
        .with_stack_size(16 * 1024)
        .with_kernel_stack(true);
    let mut sampler = EbpfSampler::new(options).expect("the eBPF sampler");
    sampler.add_process(&reader).expect("follow the fixture");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let lines: Vec<_> = maps
        .lines()
        .filter_map(|l| otel_ctx_reader::maps::MapsLine::parse(l.as_bytes()))
        .collect();
    let inside = |addr: u64, executable: bool| {
        lines
            .iter()
            .any(|l| (l.start..l.end).contains(&addr) && (!executable || l.is_executable()))
    };
    let end = std::time::Instant::now() + WINDOW;
    let (mut samples, mut with_kernel_frames) = (0, 0);
    let tids: Vec<u32> = target.threads.iter().map(|t| t.tid).collect();
    while std::time::Instant::now() < end {
        sampler.wait(Duration::from_millis(50)).expect("wait");
        while let Some(stack) = sampler.next_sample(&mut reader) {
            if !tids.contains(&stack.tid) {
                continue;
            }
            samples += 1;
            let r = stack.registers;
            // The spinning threads run user code: their registers are user registers.
            assert!(inside(r.ip, true), "ip {:#x} outside executable code", r.ip);
            assert!(inside(r.sp, false), "sp {:#x} outside every mapping", r.sp);
            assert!(
                !stack.stack.is_empty() && stack.stack.len() <= 16 * 1024,
                "{} bytes of stack",
                stack.stack.len()
            );
            assert_eq!(stack.kernel_frame_count() * 8, stack.kernel_frames.len());
            for n in 0..stack.kernel_frame_count() {
                let addr = stack.kernel_frame(n).expect("a frame within the count");
                assert!(addr >= 0xffff_8000_0000_0000, "kernel frame {addr:#x}");
            }
            assert_eq!(stack.kernel_frame(stack.kernel_frame_count()), None);
            with_kernel_frames += usize::from(!stack.kernel_frames.is_empty());
            // The context still comes with it.
            let _ = stack.context.expect("a readable context");
        }
    }
    assert!(samples >= 20, "{samples} samples of the busy threads");
    println!("{samples} samples, {with_kernel_frames} with kernel frames");
}

/// What the library's sampler, by eBPF, reads of every thread of `pids` that ran in a
/// window: each process's threads with the context of their last sample.
fn ebpf_snapshot(pids: &[u32]) -> Vec<(u32, ThreadReport)> {
    let options = SamplerOptions::default()
        .with_method(Some(Method::Ebpf))
        .with_frequency_hz(999)
        .with_stack_size(0)
        .with_require_known_schema(true);
    let mut sampler = Sampler::new(options).expect("the library's eBPF sampler");
    for &pid in pids {
        let following = sampler.add_process(pid).expect("follow the fixture");
        assert!(following.has_contexts(), "{pid}: {following:?}");
    }
    sampler.snapshot(WINDOW).expect("an eBPF snapshot")
}

/// A reader of `target` that names attributes with its key map.
fn named_reader(target: &Target) -> ThreadReader {
    let options = ThreadReaderOptions::default().with_require_known_schema(true);
    ThreadReader::with_options(target.child.id(), options).expect("a thread reader")
}

/// Samples for `window` with one sampler of many processes; every sample per process
/// and thread, named with the reader of the sample's process.
fn sample_many(
    sampler: &mut EbpfSampler,
    readers: &mut HashMap<u32, ThreadReader>,
    window: Duration,
) -> HashMap<(u32, u32), Vec<Option<Context>>> {
    let mut seen: HashMap<(u32, u32), Vec<Option<Context>>> = HashMap::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        sampler.wait(Duration::from_millis(20)).expect("wait");
        while let Some(sample) = sampler.next_sample(readers) {
            let (pid, tid) = (sample.pid, sample.tid);
            let context = sample
                .context
                .unwrap_or_else(|e| panic!("sample of thread {tid} of {pid}: {e}"))
                .map(|c| Context::from(&c));
            seen.entry((pid, tid)).or_default().push(context);
        }
    }
    seen
}

/// What ptrace reads of every printed thread of `target`, by process and thread.
fn ptrace_contexts(
    target: &Target,
    reader: &mut ThreadReader,
    into: &mut HashMap<(u32, u32), Option<Context>>,
) {
    let pid = target.child.id();
    for t in &target.threads {
        let context = reader
            .read_thread(t.tid)
            .unwrap_or_else(|e| panic!("ptrace read of {} in {pid}: {e}", t.tid));
        into.insert((pid, t.tid), context.as_ref().map(Context::from));
    }
}

/// Every printed thread of `target` was sampled under its own process id, and each
/// sample is what ptrace reads of it.
fn check_sampled(
    target: &Target,
    seen: &HashMap<(u32, u32), Vec<Option<Context>>>,
    expected: &HashMap<(u32, u32), Option<Context>>,
    what: &str,
) {
    let pid = target.child.id();
    for t in &target.threads {
        let samples = seen.get(&(pid, t.tid)).map_or(&[][..], Vec::as_slice);
        assert!(
            !samples.is_empty(),
            "{what}: no sample of thread {} of {pid} (sampled: {:?})",
            t.tid,
            seen.iter().map(|(k, v)| (k, v.len())).collect::<Vec<_>>()
        );
        for s in samples {
            assert_eq!(
                s,
                &expected[&(pid, t.tid)],
                "{what}: thread {} of {pid}",
                t.tid
            );
        }
    }
}

#[test]
fn one_sampler_many_processes() {
    let exe = matrix::busy_fixture();
    // The second registers its keys in the other order: the same attributes under other
    // key indices, which only its own key map names right.
    let a = start(&exe, &[], &[]);
    let b = start(&exe, &["--reversed-keys"], &[]);
    let c = start(&exe, &[], &[]);
    let (pa, pb, pc) = (a.child.id(), b.child.id(), c.child.id());
    let mut readers: HashMap<u32, ThreadReader> = [&a, &b, &c]
        .into_iter()
        .map(|t| (t.child.id(), named_reader(t)))
        .collect();
    let mut expected = HashMap::new();
    for t in [&a, &b, &c] {
        ptrace_contexts(t, readers.get_mut(&t.child.id()).unwrap(), &mut expected);
    }
    // The encoded attributes and, sorted, the named ones of each context of `pid`.
    type Attributes = Vec<(String, String)>;
    let attrs_of = |pid: u32| -> (Vec<Vec<u8>>, Vec<Attributes>) {
        let mut contexts: Vec<&Context> = expected
            .iter()
            .filter(|((p, _), _)| *p == pid)
            .filter_map(|(_, c)| c.as_ref())
            .collect();
        contexts.sort_by_key(|c| c.header.trace_id);
        (
            contexts.iter().map(|c| c.attrs_data.clone()).collect(),
            contexts
                .iter()
                .map(|c| {
                    let mut names = c.attributes.clone();
                    names.sort();
                    names
                })
                .collect(),
        )
    };
    let ((data_a, names_a), (data_b, names_b)) = (attrs_of(pa), attrs_of(pb));
    assert_eq!(names_a, names_b, "the fixtures attach the same attributes");
    assert!(
        data_a.iter().all(|d| !data_b.contains(d)),
        "the key maps differ, so the encoded attributes do: {data_a:?} {data_b:?}"
    );

    let mut sampler =
        EbpfSampler::new(EbpfOptions::default().with_frequency_hz(999)).expect("the eBPF sampler");
    assert_eq!(sampler.pids().count(), 0);
    assert!(sampler.next_sample(&mut readers).is_none());
    sampler.add_process(&readers[&pa]).expect("add a");
    sampler.add_process(&readers[&pb]).expect("add b");
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [pa, pb]);
    assert_eq!(
        sampler.process_resolution(pb),
        Some(readers[&pb].resolution())
    );
    assert!(sampler.process_resolution(pc).is_none());

    // Raw samples carry their process id; each thread is one of its process's.
    let end = Instant::now() + WINDOW;
    let mut raw: HashMap<u32, usize> = HashMap::new();
    while Instant::now() < end {
        sampler.wait(Duration::from_millis(20)).expect("wait");
        while let Some(s) = sampler.next_sample(&mut readers) {
            let pid = s.pid;
            assert!(pid == pa || pid == pb, "a sample of process {pid}");
            assert!(
                Path::new(&format!("/proc/{pid}/task/{}", s.tid)).exists(),
                "thread {} is not one of process {pid}'s",
                s.tid
            );
            *raw.entry(pid).or_default() += 1;
        }
    }
    assert!(raw.contains_key(&pa) && raw.contains_key(&pb), "{raw:?}");

    // Both processes, each named with its own key map; nothing of the third.
    let seen = sample_many(&mut sampler, &mut readers, WINDOW);
    check_sampled(&a, &seen, &expected, "two processes");
    check_sampled(&b, &seen, &expected, "two processes");
    assert!(
        seen.keys().all(|(pid, _)| *pid != pc),
        "a process not added was sampled"
    );

    // A process added while the sampler runs.
    sampler.add_process(&readers[&pc]).expect("add c");
    let seen = sample_many(&mut sampler, &mut readers, WINDOW);
    for t in [&a, &b, &c] {
        check_sampled(t, &seen, &expected, "three processes");
    }

    // A removed process is sampled no more, even from samples already in the ring.
    assert!(sampler.remove_process(pa));
    assert!(!sampler.remove_process(pa));
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [pb, pc]);
    let seen = sample_many(&mut sampler, &mut readers, WINDOW);
    assert!(
        seen.keys().all(|(pid, _)| *pid != pa),
        "a removed process was sampled"
    );
    check_sampled(&b, &seen, &expected, "after a removal");
    check_sampled(&c, &seen, &expected, "after a removal");
    assert!(matches!(
        sampler.set_process_resolution(pa, readers[&pb].resolution()),
        Err(otel_ctx_sampler::ebpf::EbpfError::UnknownProcess { pid }) if pid == pa
    ));

    // Adding a process again replaces its entry.
    sampler.add_process(&readers[&pb]).expect("add b again");
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [pb, pc]);

    // One process's new resolution leaves the other's alone: b's slot is nowhere, c's
    // threads still sample their contexts.
    let mut nowhere = readers[&pb].resolution().clone();
    nowhere.location = SlotLocation::Dtv {
        module_id: 1 << 19,
        offset: 0,
    };
    sampler
        .set_process_resolution(pb, &nowhere)
        .expect("reconfigure b");
    let seen = sample_many(&mut sampler, &mut readers, WINDOW);
    for ((pid, tid), samples) in &seen {
        if *pid == pb {
            assert!(
                samples.iter().all(Option::is_none),
                "thread {tid} of b: {samples:?}"
            );
        }
    }
    check_sampled(&c, &seen, &expected, "after b's change");

    // A snapshot of the library's sampler across processes.
    let reports = ebpf_snapshot(&[pb, pc]);
    for t in &c.threads {
        let report = reports
            .iter()
            .find(|(pid, r)| *pid == pc && r.tid == t.tid)
            .map(|(_, r)| r)
            .unwrap_or_else(|| panic!("thread {} of c not in the snapshot", t.tid));
        let ebpf = report.context.as_ref().expect("a sampled context");
        let ptrace = readers
            .get_mut(&pc)
            .unwrap()
            .read_thread(t.tid)
            .expect("a ptrace read");
        assert_eq!(ebpf, &ptrace, "snapshot of thread {} of c", t.tid);
        assert!(report.name.starts_with("busy-"), "{}", report.name);
    }
}

#[test]
fn no_more_processes_than_room() {
    assert_eq!(
        EbpfOptions::default().max_processes,
        otel_ctx_sampler::ebpf::EBPF_MAX_PROCESSES
    );
    assert_eq!(
        EbpfOptions::default()
            .with_max_processes(usize::MAX)
            .max_processes,
        otel_ctx_sampler::ebpf::EBPF_MAX_PROCESSES
    );
    let exe = matrix::busy_fixture();
    let targets = [start(&exe, &[], &[]), start(&exe, &[], &[])];
    let readers: Vec<ThreadReader> = targets.iter().map(named_reader).collect();
    let mut sampler =
        EbpfSampler::new(EbpfOptions::default().with_max_processes(1)).expect("the eBPF sampler");
    sampler.add_process(&readers[0]).expect("room for one");
    // The same process again replaces its entry: no room needed.
    sampler.add_process(&readers[0]).expect("replace");
    match sampler.add_process(&readers[1]) {
        Err(otel_ctx_sampler::ebpf::EbpfError::TooManyProcesses { max: 1 }) => {}
        other => panic!("a second process: {other:?}"),
    }
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [readers[0].pid()]);
    // Room again once one is removed.
    assert!(sampler.remove_process(readers[0].pid()));
    sampler.add_process(&readers[1]).expect("room again");
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [readers[1].pid()]);
}

#[test]
fn a_process_followed_for_its_stacks_only() {
    let target = start(&matrix::busy_fixture(), &[], &[]);
    let pid = target.child.id();
    let tids: Vec<u32> = target.threads.iter().map(|t| t.tid).collect();
    let options = EbpfOptions::default()
        .with_frequency_hz(999)
        .with_stack_size(4096);
    let mut sampler = EbpfSampler::new(options).expect("the eBPF sampler");
    sampler.add_process_stacks(pid).expect("room for it");
    assert!(sampler.follows(pid));
    assert!(sampler.process_resolution(pid).is_none());
    // No reader for it: its samples still come, with their stacks and no context.
    let mut readers: HashMap<u32, ThreadReader> = HashMap::new();
    let (mut samples, end) = (0, Instant::now() + WINDOW);
    while Instant::now() < end {
        sampler.wait(Duration::from_millis(20)).expect("wait");
        while let Some(stack) = sampler.next_sample(&mut readers) {
            assert_eq!(stack.pid, pid);
            assert!(!stack.stack.is_empty() && stack.registers.sp != 0);
            assert!(matches!(stack.context, Ok(None)), "{:?}", stack.context);
            samples += usize::from(tids.contains(&stack.tid));
        }
    }
    assert!(samples >= 20, "{samples} samples of its busy threads");
    // Given a slot later, its contexts come with the samples, as ptrace reads them.
    let mut reader = named_reader(&target);
    let mut expected = HashMap::new();
    ptrace_contexts(&target, &mut reader, &mut expected);
    sampler
        .set_process_resolution(pid, reader.resolution())
        .expect("a slot now");
    readers.insert(pid, reader);
    let seen = sample_many(&mut sampler, &mut readers, WINDOW);
    check_sampled(&target, &seen, &expected, "after set_process_resolution");
}

/// `prctl_names.c`, built once.
fn prctl_names() -> std::path::PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ebpf-prctl-names");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/ebpf_fixtures/prctl_names.c"
    );
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", source, "-o"])
        .arg(&out)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc {source} failed");
    out
}

/// Runs `prctl_names` with `names` until it printed `done`; the running child.
fn name_mappings(exe: &Path, names: &[&str]) -> std::process::Child {
    let mut child = std::process::Command::new(exe)
        .args(names)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start prctl_names");
    let stdout = child.stdout.take().expect("piped");
    let line = bounded::Lines::new("prctl_names", stdout).line("its `done`", bounded::DEADLINE);
    assert_eq!(line.trim(), "done");
    child
}

/// The pids the hook reports within `window`.
fn reported(hook: &mut otel_ctx_sampler::ebpf::PublicationHook, window: Duration) -> Vec<u32> {
    let (mut pids, end) = (Vec::new(), Instant::now() + window);
    while Instant::now() < end {
        hook.wait(Duration::from_millis(20)).expect("wait");
        while let Some(pid) = hook.next_pid() {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn the_publication_hook_reports_who_names_otel_ctx() {
    let exe = prctl_names();
    let mut hook = otel_ctx_sampler::ebpf::PublicationHook::new().unwrap_or_else(|e| {
        panic!("the publication hook: {e} (this test needs root and tracefs mounted)")
    });
    // Other names, a longer one, a shorter one, and another option: not reported.
    let mut others = name_mappings(&exe, &["OTHER", "OTEL_CTX2", "OTEL_CT", "otel_ctx"]);
    // Then the spec's name, from a second process, and a writer publishing for real.
    let mut named = name_mappings(&exe, &["OTEL_CTX"]);
    let writer = start(&matrix::busy_fixture(), &[], &[]);
    let pids = reported(&mut hook, Duration::from_millis(300));
    let (other, named_pid) = (others.id(), named.id());
    assert!(!pids.contains(&other), "{other} reported: {pids:?}");
    assert!(pids.contains(&named_pid), "{named_pid} not in {pids:?}");
    assert!(
        pids.contains(&writer.child.id()),
        "the writer {} not in {pids:?}",
        writer.child.id()
    );
    let counters = hook.counters().expect("counters");
    assert!(counters.sent >= 2 && counters.lost == 0, "{counters:?}");
    for child in [&mut others, &mut named] {
        drop(child.stdin.take());
        bounded::wait(child, "prctl_names, its input closed", bounded::DEADLINE);
    }
}
