//! `StackReader`: a process that publishes no thread contexts (a shell in a busy loop),
//! sampled by its registers and the top of its stack alone. Needs ptrace (root, or
//! `CAP_SYS_PTRACE`).

mod spinner;
use spinner::Spinner;

use otel_ctx_reader::thread::tls::PtraceError;
use otel_ctx_reader::{ProcessMaps, SampleError, ThreadError, ThreadReader};
use otel_ctx_sampler::stack::{StackBuffer, StackReader};

#[test]
fn a_process_without_thread_contexts_sampled_by_its_stacks() {
    let mut child = Spinner::start();
    let pid = child.id();
    // No thread reader for it: it exports no otel_thread_ctx_v1.
    assert!(matches!(
        ThreadReader::open(pid),
        Err(ThreadError::NotExported { .. })
    ));
    let reader = StackReader::new(pid);
    assert_eq!(reader.pid(), pid);
    assert_eq!(reader.tids().expect("its threads"), [pid]);
    let mut stack = StackBuffer::new(4096);
    for _ in 0..20 {
        let registers = reader.sample_stack_into(pid, &mut stack).expect("a sample");
        // The instruction pointer is in its code (the maps are read after the sample: a
        // shell just started may still be mapping its libraries), and the copy starts at
        // its stack pointer: at most the buffer, at least a word.
        let maps = ProcessMaps::read(pid).expect("its maps");
        assert!(
            maps.file_at(registers.ip)
                .is_some_and(|(_, r)| r.is_executable()),
            "{registers:x?}"
        );
        assert!(stack.bytes().len() >= 8 && stack.bytes().len() <= 4096);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(
        reader.sample_stack_into(pid, &mut stack),
        Err(SampleError::Ptrace(PtraceError::Gone))
    ));
}

/// A worker thread's copy ends at its thread control block (x86_64: its stack lies below
/// it, a few KiB deep), while the main thread's, whose TLS is elsewhere, takes what its
/// stack mapping holds.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_worker_thread_is_copied_up_to_its_thread_block() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let script = "import threading, time\n\
        t = threading.Thread(target=time.sleep, args=(600,))\n\
        t.start()\n\
        print('ready', t.native_id, flush=True)\n\
        t.join()\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python3");
    let target = KillOnDrop(&mut child);
    let mut line = String::new();
    BufReader::new(target.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("its ready line");
    let worker: u32 = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let reader = StackReader::new(target.0.id());
    let mut stack = StackBuffer::new(64 * 1024);
    reader
        .sample_stack_into(worker, &mut stack)
        .expect("a sample");
    let copied = stack.bytes().len();
    // Before the thread block was looked for, the copy ran on through the TLS to the
    // capacity: a thread's stack mapping holds its TLS and control block above the stack.
    assert!(
        (256..16 * 1024).contains(&copied),
        "{copied} bytes of a sleeping worker's stack"
    );
}

/// Kills and reaps the child when dropped.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
