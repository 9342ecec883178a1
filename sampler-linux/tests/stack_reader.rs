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
