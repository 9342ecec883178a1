//! The library's one sampler, across process boundaries: the Rust writer's busy fixture
//! (three threads with contexts, one without, all spinning) and a process that publishes
//! nothing, sampled by ptrace rounds and (feature `ebpf`) by the BPF program, in the same
//! shape: thread, name, registers, stack copy, named context. Root only (ptrace, BPF).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use otel_ctx_reader::thread::ThreadError;
use otel_ctx_sampler::{Following, Method, Sampler, SamplerOptions, Step, Threads};

mod spinner;
use spinner::Spinner;

// Shared with the TLS matrix tests, which use all of it.
#[allow(dead_code)]
#[path = "../../reader-linux/tests/fixtures/tls/matrix.rs"]
mod matrix;

/// What a run of the sampler saw, per thread: samples, with a context, with registers
/// and a stack, and the thread's name and routes.
#[derive(Debug, Default)]
struct Seen {
    samples: usize,
    with_context: usize,
    with_stack: usize,
    names: Vec<String>,
    routes: Vec<String>,
}

/// Samples for `window`. Every sample with registers has a stack copy, except those of
/// `dying`: a process being killed is sampled while its exit tears its memory down, when
/// its registers are still there but its stack can no longer be read.
fn sample_for(
    sampler: &mut Sampler,
    window: Duration,
    dying: Option<u32>,
) -> (HashMap<(u32, u32), Seen>, Vec<Step>) {
    let mut seen: HashMap<(u32, u32), Seen> = HashMap::new();
    let mut steps = Vec::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let step = sampler
            .step(Duration::from_millis(50), |s| {
                let entry = seen.entry((s.pid, s.tid)).or_default();
                entry.samples += 1;
                if let Some(context) = s.context() {
                    entry.with_context += 1;
                    if let Some(route) = context.attribute("http.route") {
                        entry
                            .routes
                            .push(String::from_utf8_lossy(route).into_owned());
                    }
                }
                if let Some(registers) = s.registers {
                    assert!(registers.sp != 0 && registers.ip != 0, "{registers:?}");
                    assert!(s.stack.len() <= 4096);
                    assert!(
                        !s.stack.is_empty() || dying == Some(s.pid),
                        "no stack for {}/{} at {registers:?}",
                        s.pid,
                        s.tid
                    );
                    entry.with_stack += usize::from(!s.stack.is_empty());
                }
                if !entry.names.iter().any(|n| n == s.thread_name) {
                    entry.names.push(s.thread_name.to_owned());
                }
                false
            })
            .expect("a step");
        steps.push(step);
    }
    (seen, steps)
}

fn options(method: Method) -> SamplerOptions {
    SamplerOptions::default()
        .with_method(Some(method))
        .with_frequency_hz(199)
        .with_stack_size(4096)
}

fn the_same_samples_whichever_way(method: Method) {
    let target = matrix::start(&matrix::busy_fixture(), &[], &[]);
    let pid = target.child.id();
    let mut bare = Spinner::start();
    let mut sampler = Sampler::new(options(method)).expect("the sampler");
    assert_eq!(sampler.method(), method);
    assert!(matches!(
        sampler.add_process(pid).expect("follow the fixture"),
        Following::Contexts
    ));
    // A process without otel_thread_ctx_v1 is followed for its stacks.
    match sampler.add_process(bare.id()).expect("follow the spinner") {
        Following::StacksOnly(ThreadError::NotExported { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(sampler.pids().collect::<Vec<_>>(), [pid, bare.id()]);
    assert!(sampler.reader(pid).is_some() && sampler.reader(bare.id()).is_none());

    let (seen, _) = sample_for(&mut sampler, Duration::from_millis(1500), None);
    for t in &target.threads {
        let s = seen
            .get(&(pid, t.tid))
            .unwrap_or_else(|| panic!("{method:?}: thread {} not sampled: {seen:?}", t.tid));
        assert_eq!(s.with_stack, s.samples, "{method:?}: thread {}", t.tid);
        assert!(s.names.iter().all(|n| n.starts_with("busy-")), "{s:?}");
        if t.record == 0 {
            assert_eq!(s.with_context, 0, "{method:?}: thread {}: {s:?}", t.tid);
        } else {
            assert_eq!(
                s.with_context, s.samples,
                "{method:?}: thread {}: {s:?}",
                t.tid
            );
            // Each thread keeps its one route.
            assert!(!s.routes.is_empty() && s.routes.iter().all(|r| *r == s.routes[0]));
        }
    }
    let bare_samples: Vec<&Seen> = seen
        .iter()
        .filter(|((p, _), _)| *p == bare.id())
        .map(|(_, s)| s)
        .collect();
    assert!(
        !bare_samples.is_empty(),
        "{method:?}: the spinner was not sampled"
    );
    assert!(bare_samples
        .iter()
        .all(|s| s.with_context == 0 && s.with_stack == s.samples));
    let stats = sampler.stats();
    assert_eq!(stats.unreadable_samples(), 0, "{stats:?}");
    assert_eq!(
        stats.samples as usize,
        seen.values().map(|s| s.samples).sum::<usize>()
    );

    // The spinner exits: a step within a second or two says so, and it is followed no
    // more.
    bare.kill().expect("kill the spinner");
    bare.wait().expect("reap the spinner");
    let (_, steps) = sample_for(&mut sampler, Duration::from_millis(2500), Some(bare.id()));
    assert!(
        steps.iter().any(|s| s.exited.contains(&bare.id())),
        "{method:?}: the spinner's exit was not seen"
    );
    assert!(!sampler.follows(bare.id()) && sampler.follows(pid));
}

#[test]
fn the_same_samples_by_ptrace() {
    the_same_samples_whichever_way(Method::Ptrace);
}

#[cfg(feature = "ebpf")]
#[test]
fn the_same_samples_by_ebpf() {
    the_same_samples_whichever_way(Method::Ebpf);
}

#[test]
fn every_thread_and_a_snapshot_by_ptrace() {
    let target = matrix::start(&matrix::busy_fixture(), &[], &[]);
    let pid = target.child.id();
    let options = options(Method::Ptrace)
        .with_stack_size(0)
        .with_threads(Threads::All)
        .with_require_known_schema(true);
    let mut sampler = Sampler::new(options).expect("the sampler");
    sampler.add_process(pid).expect("follow the fixture");
    // Without stacks, no registers are taken.
    let (seen, _) = sample_for(&mut sampler, Duration::from_millis(300), None);
    assert!(seen.values().all(|s| s.with_stack == 0 && s.samples > 0));
    // Every thread: the main thread, which waits on its stdin, too.
    assert!(seen.contains_key(&(pid, pid)), "{seen:?}");
    let reports = sampler.snapshot(Duration::ZERO).expect("a snapshot");
    for t in &target.threads {
        let (_, report) = reports
            .iter()
            .find(|(p, r)| *p == pid && r.tid == t.tid)
            .unwrap_or_else(|| panic!("thread {} not in the snapshot", t.tid));
        let address = report
            .context
            .as_ref()
            .expect("readable")
            .as_ref()
            .map_or(0, |c| c.record_address);
        assert_eq!(address, t.record, "thread {}", t.tid);
    }
}

#[test]
fn a_rate_outside_the_range_is_refused() {
    for hz in [0, 10_001] {
        let e = Sampler::new(SamplerOptions::default().with_frequency_hz(hz)).expect_err("refused");
        assert!(e.to_string().contains("between 1 and 10000"), "{e}");
    }
}
