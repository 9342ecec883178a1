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
use python_support::{shows_chain, start, Publisher, Runtime};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
            let route = context.as_ref().and_then(|c| {
                c.attribute("http.route")
                    .map(|r| String::from_utf8_lossy(r).into_owned())
            });
            let trace = context.as_ref().map(|c| hex(&c.trace_id()));
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
            if shows_chain(&names) && target.labels_match(n, trace.as_deref(), route.as_deref()) {
                good += 1;
            } else {
                eprintln!("{}: worker {n}: {names:?} {route:?}", target.label);
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
        match python {
            true => assert!(walked > 0, "{}: no Python frames", target.label),
            false => assert_eq!(walked, 0, "{}: frames walked", target.label),
        }
    }
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
