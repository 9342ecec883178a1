//! The thread reader against writers built in every TLS access model: C programs (gcc
//! and musl-gcc; executable, shared library at startup, dlopen, static, static-pie) and a
//! Rust program using `otel-ctx-writer`. Each runs three threads with distinct records and
//! one thread without a context; the reader, through ptrace, must find exactly each
//! thread's record. (ptrace and the host compilers: x86_64 only; aarch64 is checked in
//! `tls_selfcheck.rs` and `tls_elf.rs`.)
#![cfg(target_arch = "x86_64")]

use std::path::Path;

use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::thread::tls::{
    loaded_modules, read_stopped, resolve, ElfCache, SlotState, StoppedThread,
};
use otel_ctx_reader::thread::tls::{AccessModel, Libc};
use otel_ctx_reader::thread::ThreadReaderOptions;
use otel_ctx_reader::ProcessMaps;
use otel_ctx_reader::{RecordBuffer, SampleError, ThreadReader};

// Shared with `ebpf_matrix.rs`, which uses all of it (this test leaves `Target::lines`).
#[allow(dead_code)]
#[path = "fixtures/tls/matrix.rs"]
mod matrix;

use matrix::{start, Target, FIXTURES};

/// Checks one running fixture: the access model, every slot address, every record.
fn check(name: &str, target: &Target, model: AccessModel, named: bool) {
    let pid = target.child.id();
    let maps = ProcessMaps::read(pid).expect("maps");
    let modules = loaded_modules(&maps, &mut ElfCache::new()).loaded;
    let libc = Libc::of_modules(&modules);
    let memory = ProcessMemory::new(pid, ReadMethod::Auto);
    let resolution = resolve(&modules, libc, &memory).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(resolution.model, model, "{name}: {resolution:?}");

    // The C fixtures publish no process context, so no schema: read the slot regardless
    // (the Rust writer announces one, and must be read with the default options too).
    let options = ThreadReaderOptions::default().with_require_known_schema(named);
    let mut reader =
        ThreadReader::with_options(pid, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut with_context = 0;
    for t in &target.threads {
        // The slot, as the low-level pieces compute it.
        let stopped = StoppedThread::stop(t.tid).expect("stop the thread");
        let sample = read_stopped(&stopped, &resolution, &memory, 640).expect("sample");
        drop(stopped);
        assert_eq!(
            sample.thread_pointer, t.tp,
            "{name}: thread pointer of {}",
            t.tid
        );
        match t.slot {
            Some(slot) => assert_eq!(sample.slot, Some(slot), "{name}: slot of {}", t.tid),
            // Started before the library was loaded: no TLS block, or a NULL slot.
            None => assert!(
                matches!(sample.state, SlotState::NoTlsBlock | SlotState::Null),
                "{name}: {:?}",
                sample.state
            ),
        }
        // The context, as the thread reader returns it.
        let context = reader
            .read_thread(t.tid)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        match context {
            None => assert_eq!(t.record, 0, "{name}: thread {} lost its context", t.tid),
            Some(c) => {
                with_context += 1;
                assert_eq!(c.record_address, t.record, "{name}");
                let n = c.trace_id()[0] / 16;
                assert!(
                    (1..=3).contains(&n),
                    "{name}: trace id {:02x?}",
                    c.trace_id()
                );
                assert_eq!(c.span_id()[0], 0x80 + n * 8, "{name}");
                let route = ["/checkout", "/cart", "/search"][usize::from(n % 3)];
                if named {
                    assert_eq!(
                        c.attributes.first(),
                        Some(&("http.route".into(), route.into())),
                        "{name}"
                    );
                } else {
                    // No key map: OTEP 4947 has the reader ignore every entry; the
                    // record still holds it.
                    assert!(c.attributes.is_empty(), "{name}: {:?}", c.attributes);
                    let entries: Vec<(u8, &[u8])> =
                        otel_ctx_codec::attrs::AttrsIter::new(&c.attrs_data).collect();
                    assert_eq!(entries, [(0, route.as_bytes())], "{name}");
                }
            }
        }
    }
    assert_eq!(with_context, 3, "{name}: contexts found");
    check_stacks(name, target, &mut reader, &memory);
}

/// The registers and stack copy a profiler unwinds: the stack pointer inside the
/// thread's stack mapping, the copy equal to the target's memory there, the instruction
/// pointer inside an executable mapping, and the same record as without the stack.
fn check_stacks(name: &str, target: &Target, reader: &mut ThreadReader, memory: &ProcessMemory) {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", target.child.id())).unwrap();
    let lines: Vec<_> = maps
        .lines()
        .filter_map(|line| otel_ctx_reader::maps::MapsLine::parse(line.as_bytes()))
        .collect();
    // Only readable memory can be copied (guard pages are mapped `---p`), and not the
    // kernel's `[vvar]` pages, which can lie right above a musl thread's stack.
    let readable: Vec<(u64, u64)> = lines
        .iter()
        .filter(|l| l.perms[0] == b'r' && !l.name.starts_with(b"[vvar"))
        .map(|l| (l.start, l.end))
        .collect();
    let mut records = RecordBuffer::new();
    let mut copy = vec![0; 4096];
    for t in &target.threads {
        // While the thread is stopped: its registers, and the top of its stack copied
        // as a sampler copies it.
        let ((registers, copied), context) = reader
            .sample_stopped_into(t.tid, &mut records, |stopped, memory| {
                let (registers, thread_pointer) = stopped.registers()?;
                let copied = memory.read_prefix(registers.sp, &mut copy).map_err(|e| {
                    SampleError::Memory {
                        what: "the stack",
                        address: registers.sp,
                        source: e.into(),
                    }
                })?;
                Ok(((registers, copied), thread_pointer))
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let stack = &copy[..copied];
        assert_eq!(
            context.map(|c| c.record_address).unwrap_or(0),
            t.record,
            "{name}: thread {}",
            t.tid
        );
        let (_, mut mapped_end) = *readable
            .iter()
            .find(|(s, e)| (*s..*e).contains(&registers.sp))
            .unwrap_or_else(|| panic!("{name}: sp {:#x} outside every mapping", registers.sp));
        // The copy runs on through adjacent readable mappings (musl puts a thread's TLS area
        // right above its stack), up to the first unmapped page.
        while let Some((_, end)) = readable.iter().find(|(s, _)| *s == mapped_end) {
            mapped_end = *end;
        }
        let expected = (mapped_end - registers.sp).min(4096) as usize;
        assert_eq!(stack.len(), expected, "{name}: stack copy of {}", t.tid);
        let mut again = vec![0; expected];
        memory.read_exact(registers.sp, &mut again).unwrap();
        // Stopped again since the copy: the thread may have moved only below its sp.
        assert_eq!(&again[..64], &stack[..64], "{name}: stack bytes");
        assert!(
            lines
                .iter()
                .any(|l| l.is_executable() && (l.start..l.end).contains(&registers.ip)),
            "{name}: ip {:#x} not in an executable mapping",
            registers.ip
        );
    }
}

#[test]
fn every_access_model_on_glibc_and_musl() {
    for case in matrix::build("tls-matrix", &format!("{FIXTURES}/main.c")) {
        check(&case.label, &case.start(), case.model, false);
    }
}

#[test]
fn rust_writer_with_key_map() {
    // Examples are built next to the test binaries' directory.
    let exe = std::env::current_exe()
        .expect("test binary path")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("examples/thread_fixture");
    let target = start(&exe, &[], &[]);
    check("rust-writer", &target, AccessModel::LocalExec, true);
}
