//! The names Python code gives its threads (`threading.Thread(name=...)`), read from the
//! target's `threading` registry, against real interpreters (Debian's 3.11, in its
//! executable and in libpython3.11.so, trixie's 3.13 and sid's 3.14 in a chroot): each
//! worker's samples carry `worker-N` as its Python name, and the kernel's name as its
//! thread name.

#[path = "python_support/mod.rs"]
mod python_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use otel_ctx_reader::ProcessMaps;
use otel_ctx_sampler::python::PythonProcess;
use otel_ctx_sampler::{Method, Sampler, SamplerOptions};
use python_support::{start, Publisher, Runtime};

fn comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .expect("the thread's comm")
        .trim_end()
        .to_owned()
}

/// Samples the service under `runtime` with ptrace until every worker was sampled, and
/// checks each worker's Python name and kernel name; reads the registry directly too.
fn names(runtime: Runtime) {
    let target = start(runtime, Publisher::Nothing);
    let options = SamplerOptions::default().with_method(Some(Method::Ptrace));
    let mut sampler = Sampler::new(options).expect("a sampler");
    sampler.add_process(target.pid).expect("follow the service");
    let mut seen: HashMap<u32, (String, Option<String>)> = HashMap::new();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end && !target.workers.iter().all(|t| seen.contains_key(t)) {
        sampler
            .step(Duration::from_millis(50), |s| {
                if s.pid == target.pid {
                    let python = s.python_thread_name.map(str::to_owned);
                    seen.insert(s.tid, (s.thread_name.to_owned(), python));
                }
                false
            })
            .expect("a step");
    }
    for (n, tid) in target.workers.iter().enumerate() {
        let (os, python) = seen
            .get(tid)
            .unwrap_or_else(|| panic!("{}: worker {n} never sampled", target.label));
        assert_eq!(
            python.as_deref(),
            Some(format!("worker-{n}").as_str()),
            "{}: worker {n}'s Python name",
            target.label
        );
        assert_eq!(*os, comm(target.pid, *tid), "{}: its OS name", target.label);
        // Before 3.14 the kernel's name is the interpreter's; 3.14 gives the kernel the
        // Python name too (cut to 15 bytes).
        if runtime.minor() < 14 {
            assert!(!os.starts_with("worker-"), "{}: {os}", target.label);
        }
    }
    // The registry read directly: the workers, and the main thread.
    let maps = ProcessMaps::read(target.pid).expect("maps");
    let python = PythonProcess::find(&maps)
        .expect("an interpreter")
        .expect("an interpreter");
    let read: HashMap<u32, String> = python
        .read_thread_names()
        .unwrap_or_else(|e| panic!("{}: {e}", target.label))
        .into_iter()
        .collect();
    assert_eq!(
        read.get(&target.pid).map(String::as_str),
        Some("MainThread"),
        "{}: {read:?}",
        target.label
    );
    // Read again from where the first reading found the registry, as the sampler does.
    let mut names = python.thread_names();
    python.refresh_thread_names(&mut names);
    assert_eq!(names.reads, 2, "{}", target.label);
    assert!(names.error.is_none(), "{}: {:?}", target.label, names.error);
    for (n, tid) in target.workers.iter().enumerate() {
        let name = format!("worker-{n}");
        assert_eq!(read.get(tid), Some(&name), "{}", target.label);
        assert_eq!(names.name(*tid), Some(name.as_str()), "{}", target.label);
    }
}

#[test]
fn python_311_thread_names() {
    names(Runtime::Bookworm311);
}

#[test]
fn python_311_in_libpython_thread_names() {
    names(Runtime::Embedded311);
}

#[test]
fn python_313_thread_names() {
    names(Runtime::Trixie313);
}

#[test]
fn python_314_thread_names() {
    names(Runtime::Sid314);
}
