//! The Python frame walk against real interpreters (Debian's 3.11, in its executable and
//! in libpython3.11.so, trixie's 3.13 and sid's 3.14 in a chroot), with thread contexts published through the C ABI and by
//! ddtrace: every worker, stopped with ptrace, shows its chain of Python functions with
//! its route.

#[path = "python_support/mod.rs"]
mod python_support;

use otel_ctx_reader::{ProcessMaps, RecordBuffer, ThreadReader};
use otel_ctx_sampler::python::{PythonProcess, PythonStack};
use otel_ctx_sampler::stack::{sample_with_python_into, StackBuffer};
use otel_ctx_sampler::{Method, Sampler, SamplerOptions};
use python_support::{shows_chain, start, Publisher, Runtime, CHAIN};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether worker `n`'s sample, its Python frames `frames` and its context, shows the
/// chain, in order (to `serve` at least, with `partly`: a worker that waits for the GIL
/// waits where the loop of `serve` or a call may let it go), with the worker's route
/// (said on stderr when not).
fn labelled(
    target: &python_support::PythonTarget,
    n: usize,
    python: &mut PythonProcess,
    frames: &PythonStack,
    context: Option<&otel_ctx_reader::ThreadContextRef<'_>>,
    partly: bool,
) -> bool {
    let route = context.and_then(|c| {
        c.attribute("http.route")
            .map(|r| String::from_utf8_lossy(r).into_owned())
    });
    let trace = context.map(|c| hex(&c.trace_id()));
    let table = python.name_frames(frames.frames());
    let names: Vec<String> = frames
        .frames()
        .iter()
        .rev()
        .filter_map(|f| match table.frame_info(f) {
            Ok(info) => Some(Ok(info.code.qualname.to_string())),
            Err(otel_ctx_sampler::python::PythonError::Incomplete) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: a name: {e}", target.label));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let chain = if partly {
        (3..=CHAIN.len()).any(|k| names.ends_with(&CHAIN[..k]))
    } else {
        shows_chain(&names)
    };
    let good = chain && target.labels_match(n, trace.as_deref(), route.as_deref());
    if !good {
        eprintln!("{}: worker {n}: {names:?} {route:?}", target.label);
    }
    good
}

/// Samples each worker `rounds` times with ptrace and checks that at least 80% of the
/// samples show the chain, in order, with the worker's route.
fn walks(runtime: Runtime, publisher: Publisher) {
    let target = start(runtime, publisher);
    let maps = ProcessMaps::read(target.pid).expect("maps");
    let mut python = PythonProcess::find(&maps)
        .unwrap_or_else(|e| panic!("{}: {e}", target.label))
        .unwrap_or_else(|| panic!("{}: no interpreter found", target.label));
    assert_eq!(python.version().minor, runtime.minor(), "{}", target.label);
    // These builds strip their symbol tables: no _Py_tss_tstate to resolve, the thread
    // states come from the interpreter's list (the debug build's test below reads it).
    assert!(
        python.thread_state_tls().is_none(),
        "{}: {:?}",
        target.label,
        python.thread_state_tls()
    );
    let mut reader = ThreadReader::open(target.pid).expect("the thread contexts");
    let (mut record, mut stack, mut frames) = (
        RecordBuffer::new(),
        StackBuffer::default(),
        PythonStack::new(),
    );
    let rounds = 40;
    let mut good = 0;
    for _ in 0..rounds {
        for (n, &tid) in target.workers.iter().enumerate() {
            let (_, context, walked) = sample_with_python_into(
                &mut reader,
                tid,
                &mut record,
                &mut stack,
                &python,
                &mut frames,
            )
            .expect("a sample");
            walked.unwrap_or_else(|e| panic!("{}: the walk: {e}", target.label));
            if labelled(&target, n, &mut python, &frames, context.as_ref(), false) {
                good += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let total = rounds * target.workers.len();
    assert!(
        good * 100 >= total * 80,
        "{}: {good} of {total} samples show the chain with the route",
        target.label
    );
    // Lines come from the location tables: the leaf's line is inside its function.
    let cache = python.code_cache();
    assert!(cache.len() >= 4 && cache.bytes() > 0, "{}", target.label);
}

/// The sampler walks a Python process's frames with its samples unless told not to
/// (`SamplerOptions::with_python(false)`: the native stacks alone, at less cost).
#[test]
fn the_sampler_walks_python_frames_unless_told_not_to() {
    let target = start(Runtime::Bookworm311, Publisher::Ffi);
    for python in [true, false] {
        let options = SamplerOptions::default()
            .with_method(Some(Method::Ptrace))
            .with_python(python);
        let mut sampler = Sampler::new(options).expect("a sampler");
        sampler.add_process(target.pid).expect("follow the service");
        let (mut samples, mut walked) = (0, 0);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < end {
            sampler
                .step(std::time::Duration::from_millis(50), |s| {
                    samples += 1;
                    walked += usize::from(s.python.is_some());
                    false
                })
                .expect("a step");
        }
        assert!(samples > 0, "{}: no sample", target.label);
        // Two workers of three wait for the GIL at any time: on x86_64, the rounds find
        // some of them blocked where a stop found them before, and read them without
        // one.
        if cfg!(target_arch = "x86_64") {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while sampler.stats().unstopped == 0 && std::time::Instant::now() < end {
                sampler
                    .step(std::time::Duration::from_millis(50), |_| false)
                    .expect("a step");
            }
            assert!(sampler.stats().unstopped > 0, "{}", target.label);
        }
        match python {
            true => assert!(walked > 0, "{}: no Python frames", target.label),
            false => assert_eq!(walked, 0, "{}: frames walked", target.label),
        }
    }
}

/// A thread blocked in a system call, read without a stop where a stop found it before,
/// reads as the stop did while it does not run: the main thread, blocked for good in its
/// read of stdin, gives the same registers, stack, Python frames and context both ways.
/// The workers, which wait for the GIL and run by turns, are read without a stop when
/// they did not run meanwhile, and then show their chain and their own route; when one
/// ran, the read says so and keeps nothing.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_blocked_thread_reads_without_a_stop_as_with_one() {
    use otel_ctx_sampler::stack::sample_blocked_with_python_into;
    use otel_ctx_sampler::tasks::TaskFiles;
    use std::time::{Duration, Instant};

    let target = start(Runtime::Bookworm311, Publisher::Ffi);
    let maps = ProcessMaps::read(target.pid).expect("maps");
    let mut python = PythonProcess::find(&maps)
        .expect("the interpreter")
        .expect("an interpreter");
    let mut reader = ThreadReader::open(target.pid).expect("the thread contexts");
    let mut files = TaskFiles::new(target.pid);
    let (mut record, mut stack, mut frames) = (
        RecordBuffer::new(),
        StackBuffer::default(),
        PythonStack::new(),
    );
    // The main thread: a stop, then reads without one.
    let main = target.pid;
    let (held, context, walked) = sample_with_python_into(
        &mut reader,
        main,
        &mut record,
        &mut stack,
        &python,
        &mut frames,
    )
    .expect("a stop of the main thread");
    walked.expect("the main thread's walk");
    let trace = context.map(|c| c.trace_id());
    let (stopped_stack, stopped_frames) = (stack.bytes().to_vec(), frames.frames().to_vec());
    assert!(!stopped_frames.is_empty(), "{}", target.label);
    for _ in 0..5 {
        // Resumed by the stop's end, it goes back to its read (a loaded host may take a
        // while to run it).
        let resumed = Instant::now();
        let point = loop {
            std::thread::sleep(Duration::from_millis(20));
            match files.blocked_in_syscall(main) {
                Some(point) => break point,
                None => assert!(resumed.elapsed() < Duration::from_secs(10), "never back"),
            }
        };
        assert_eq!(point.number, libc::SYS_read as u64);
        assert_eq!((point.sp, point.pc), (held.registers.sp, held.registers.ip));
        let (_, runs) = files.cpu_runs(main).expect("schedstat");
        let unmoved = || files.cpu_runs(main).is_some_and(|(_, now)| now == runs);
        let (unstopped, context, walked) = sample_blocked_with_python_into(
            &mut reader,
            main,
            &mut record,
            &mut stack,
            &python,
            &mut frames,
            held,
            unmoved,
        )
        .expect("a read without a stop")
        .expect("the main thread stays in its read");
        walked.expect("the walk without a stop");
        assert_eq!(unstopped, held);
        assert!(
            stack.bytes() == &stopped_stack[..],
            "{}: the stacks differ",
            target.label
        );
        assert_eq!(frames.frames(), &stopped_frames[..], "{}", target.label);
        assert_eq!(context.map(|c| c.trace_id()), trace, "{}", target.label);
    }
    // The workers: where each waits for the GIL, a stop, then reads without one.
    let mut stops: Vec<Option<otel_ctx_sampler::stack::Held>> = vec![None; target.workers.len()];
    let (mut good, mut read, mut moved) = (0, 0, 0);
    let end = Instant::now() + Duration::from_secs(20);
    while read < 30 && Instant::now() < end {
        for (n, &tid) in target.workers.iter().enumerate() {
            let Some((_, runs)) = files.cpu_runs(tid) else {
                continue;
            };
            let Some(point) = files.blocked_in_syscall(tid) else {
                continue;
            };
            let at = |held: &otel_ctx_sampler::stack::Held| {
                (held.registers.sp, held.registers.ip) == (point.sp, point.pc)
            };
            let Some(held) = stops[n].filter(at) else {
                if let Ok((held, _, _)) = sample_with_python_into(
                    &mut reader,
                    tid,
                    &mut record,
                    &mut stack,
                    &python,
                    &mut frames,
                ) {
                    stops[n] = Some(held).filter(at).or(stops[n]);
                }
                continue;
            };
            let unmoved = || files.cpu_runs(tid).is_some_and(|(_, now)| now == runs);
            let Some((_, context, walked)) = sample_blocked_with_python_into(
                &mut reader,
                tid,
                &mut record,
                &mut stack,
                &python,
                &mut frames,
                held,
                unmoved,
            )
            .expect("a read without a stop") else {
                moved += 1;
                continue;
            };
            read += 1;
            walked.unwrap_or_else(|e| panic!("{}: the walk: {e}", target.label));
            if labelled(&target, n, &mut python, &frames, context.as_ref(), true) {
                good += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(read >= 30, "{read} reads without a stop ({moved} moved)");
    assert!(
        good * 100 >= read * 95,
        "{good} of {read} show the chain with the route"
    );
}

#[test]
fn python_311_with_the_c_abi() {
    walks(Runtime::Bookworm311, Publisher::Ffi);
}

#[test]
fn python_311_in_libpython() {
    walks(Runtime::Embedded311, Publisher::Ffi);
}

#[test]
fn python_311_with_ddtrace() {
    walks(Runtime::Bookworm311, Publisher::Ddtrace);
}

#[test]
fn python_313_in_a_chroot() {
    walks(Runtime::Trixie313, Publisher::Ffi);
}

#[test]
fn python_314_in_a_chroot() {
    walks(Runtime::Sid314, Publisher::Ffi);
}

/// Trixie's debug build keeps its symbol table: each thread's state is read through its
/// thread-local `_Py_tss_tstate`, resolved by the same TLS code as `otel_thread_ctx_v1`
/// (here without thread contexts: the stacks-only sample).
#[test]
fn python_313_debug_build_through_its_thread_local() {
    let target = start(Runtime::Trixie313Debug, Publisher::Nothing);
    let maps = ProcessMaps::read(target.pid).expect("maps");
    let mut python = PythonProcess::find(&maps)
        .unwrap_or_else(|e| panic!("{}: {e}", target.label))
        .unwrap_or_else(|| panic!("{}: no interpreter found", target.label));
    let tls = python.thread_state_tls().expect("_Py_tss_tstate resolved");
    assert_eq!(
        tls.model,
        otel_ctx_reader::thread::tls::AccessModel::LocalExec,
        "{tls:?}"
    );
    let (mut stack, mut frames) = (StackBuffer::default(), PythonStack::new());
    let stacks = otel_ctx_sampler::stack::StackReader::new(target.pid);
    let (mut good, mut total) = (0, 0);
    for _ in 0..40 {
        for &tid in &target.workers {
            let (_, walked) = stacks
                .sample_with_python_into(tid, &mut stack, &python, &mut frames)
                .expect("a sample");
            walked.unwrap_or_else(|e| panic!("{}: the walk: {e}", target.label));
            let table = python.name_frames(frames.frames());
            let names: Vec<String> = frames
                .frames()
                .iter()
                .rev()
                .filter_map(|f| table.frame_info(f).ok())
                .map(|info| info.code.qualname.to_string())
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            total += 1;
            good += usize::from(shows_chain(&names));
        }
    }
    assert!(good * 100 >= total * 80, "{good} of {total} show the chain");
}
