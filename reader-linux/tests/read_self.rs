//! The read protocol against a context this test process maps itself, right and wrong.
//!
//! One mapping is shared by every test and guarded by a mutex: a process holds one
//! context, and concurrent tests must not see each other's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use otel_ctx_codec::header::ProcessContextHeader;
use otel_ctx_codec::proto::{AnyValue, KeyValue, ProcessContext};
use otel_ctx_codec::threadlocal::{reference_data, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_reader::maps::MappingKind;
use otel_ctx_reader::memory::ReadMethod;
use otel_ctx_reader::process::{boottime_ns, Malformed, OwnedValue, ReaderOptions};
use otel_ctx_reader::{Error, ProcessContextReader};
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

/// Records the largest allocation each thread makes, to show that hostile headers never
/// make the reader allocate what they ask for.
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

const MAPPING_LEN: usize = 16 * 1024;
const PAYLOAD_OFFSET: usize = 64;
const SECOND_PAYLOAD_OFFSET: usize = 8 * 1024;

/// A memfd mapping named `OTEL_CTX` in this process.
struct Fixture {
    base: NonNull<u8>,
}

// SAFETY: the mapping is only touched while the mutex below is held.
unsafe impl Send for Fixture {}

static FIXTURE: Mutex<Option<Fixture>> = Mutex::new(None);

impl Fixture {
    fn map() -> Self {
        let fd = memfd_create("OTEL_CTX", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&fd, MAPPING_LEN as u64).unwrap();
        // SAFETY: a new mapping at an address the kernel picks.
        let base = unsafe {
            mmap(
                std::ptr::null_mut(),
                MAPPING_LEN,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
                &fd,
                0,
            )
        }
        .unwrap();
        Self {
            base: NonNull::new(base.cast()).unwrap(),
        }
    }

    fn addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is MAPPING_LEN bytes, writable, and only used under the lock.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), MAPPING_LEN) }
    }

    /// Writes a payload at `offset` and a header pointing to it; the timestamp last.
    fn publish(
        &mut self,
        offset: usize,
        service: &str,
        edit: impl FnOnce(&mut ProcessContextHeader),
    ) -> u64 {
        let resource = [
            KeyValue {
                key: "service.name",
                value: AnyValue::String(service),
            },
            KeyValue {
                key: "n",
                value: AnyValue::Int(7),
            },
        ];
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route"]);
        let ctx = ProcessContext {
            resource: &resource,
            attributes: &extra,
        };
        let len = ctx.encode(&mut self.bytes()[offset..]).unwrap();
        self.write_header(offset, len, edit)
    }

    fn write_header(
        &mut self,
        offset: usize,
        len: usize,
        edit: impl FnOnce(&mut ProcessContextHeader),
    ) -> u64 {
        let addr = self.addr();
        self.bytes()[16..24].fill(0);
        fence(Ordering::SeqCst);
        let mut header = ProcessContextHeader::new(len as u32, addr + offset as u64);
        header.monotonic_published_at_ns = boottime_ns();
        edit(&mut header);
        let bytes = self.bytes();
        bytes[0..8].copy_from_slice(&header.signature);
        bytes[8..12].copy_from_slice(&header.version.to_ne_bytes());
        bytes[12..16].copy_from_slice(&header.payload_size.to_ne_bytes());
        bytes[24..32].copy_from_slice(&header.payload.to_ne_bytes());
        fence(Ordering::SeqCst);
        bytes[16..24].copy_from_slice(&header.monotonic_published_at_ns.to_ne_bytes());
        header.monotonic_published_at_ns
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer referenced.
        unsafe { munmap(self.base.as_ptr().cast(), MAPPING_LEN) }.unwrap();
    }
}

fn fixture() -> MutexGuard<'static, Option<Fixture>> {
    let mut guard = FIXTURE.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        *guard = Some(Fixture::map());
    }
    guard
}

fn me() -> u32 {
    std::process::id()
}

fn reader(method: ReadMethod) -> ProcessContextReader {
    ProcessContextReader::with_options(me(), ReaderOptions::default().with_read_method(method))
        .unwrap()
}

#[test]
fn reads_with_both_methods_and_caches() {
    let mut guard = fixture();
    let fx = guard.as_mut().unwrap();
    let ts = fx.publish(PAYLOAD_OFFSET, "self-test", |_| {});
    for method in [
        ReadMethod::Auto,
        ReadMethod::ProcessVmReadv,
        ReadMethod::ProcMem,
    ] {
        let mut r = reader(method);
        assert!(r.mapping().is_none());
        let s = r.read().unwrap();
        assert_eq!(s.pid, me());
        assert_eq!(s.mapping.start, fx.addr());
        assert_eq!(s.mapping.name.kind, MappingKind::Memfd);
        assert_eq!(s.mapping.name.to_string(), "/memfd:OTEL_CTX (deleted)");
        assert_eq!(s.version, 2);
        assert_eq!(s.monotonic_published_at_ns, ts);
        assert_eq!(s.payload, fx.addr() + PAYLOAD_OFFSET as u64);
        assert_eq!(s.payload_bytes.len(), s.payload_size as usize);
        assert_eq!(s.context.service_name(), Some("self-test"));
        assert_eq!(s.context.resource_value("n"), Some(&OwnedValue::Int(7)));
        let tl = s.threadlocal().unwrap();
        assert_eq!(tl.schema_version.as_deref(), Some(SCHEMA_TLSDESC_V1_DEV));
        assert_eq!(tl.attribute_key_map, Some(vec!["http.route".to_owned()]));
        assert_eq!(r.mapping(), Some(&s.mapping));
        assert_eq!(r.uses_proc_mem(), method == ReadMethod::ProcMem);
        assert!(s.age_ns(boottime_ns()) < 60_000_000_000);
    }
}

#[test]
fn read_if_changed_uses_the_timestamp() {
    let mut guard = fixture();
    let fx = guard.as_mut().unwrap();
    fx.publish(PAYLOAD_OFFSET, "before", |_| {});
    let mut r = reader(ReadMethod::Auto);
    let first = r.read().unwrap();
    assert_eq!(
        r.read_if_changed(first.monotonic_published_at_ns).unwrap(),
        None
    );
    // Update: a new payload elsewhere, a later timestamp.
    let ts = fx.publish(SECOND_PAYLOAD_OFFSET, "after", |h| {
        h.monotonic_published_at_ns = h
            .monotonic_published_at_ns
            .max(first.monotonic_published_at_ns + 1);
    });
    let second = r
        .read_if_changed(first.monotonic_published_at_ns)
        .unwrap()
        .expect("a later timestamp is a change");
    assert_eq!(second.monotonic_published_at_ns, ts);
    assert_eq!(second.context.service_name(), Some("after"));
    assert_eq!(second.payload, fx.addr() + SECOND_PAYLOAD_OFFSET as u64);
    assert_eq!(r.read_if_changed(ts).unwrap(), None);
}

/// Reads once, checks the time and the largest allocation, returns the error.
fn read_error(method: ReadMethod) -> Error {
    let mut r = reader(method);
    LARGEST.with(|l| l.set(0));
    let started = Instant::now();
    let result = r.read();
    let elapsed = started.elapsed();
    let largest = LARGEST.with(Cell::get);
    let e = result.expect_err("a hostile header must not read");
    println!(
        "{method:?}: {} in {elapsed:?}, largest allocation {largest} bytes: {e}",
        e.kind()
    );
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert!(largest <= 128 * 1024, "allocated {largest} bytes");
    e
}

fn hostile(edit: impl Fn(&mut ProcessContextHeader), check: impl Fn(&Error) -> bool) {
    let mut guard = fixture();
    let fx = guard.as_mut().unwrap();
    fx.publish(PAYLOAD_OFFSET, "hostile", edit);
    for method in [ReadMethod::ProcessVmReadv, ReadMethod::ProcMem] {
        let e = read_error(method);
        assert!(check(&e), "{method:?}: unexpected {e:?}");
        assert_eq!(e.pid(), me());
    }
    fx.publish(PAYLOAD_OFFSET, "restored", |_| {});
}

fn header_problem(e: &Error, kind: &str) -> bool {
    matches!(e, Error::Malformed { problem: Malformed::Header(h), .. } if h.kind() == kind)
}

#[test]
fn bad_signature() {
    hostile(
        |h| h.signature = *b"OTEL_CTx",
        |e| header_problem(e, "bad_signature"),
    );
}

#[test]
fn version_3() {
    hostile(
        |h| h.version = 3,
        |e| header_problem(e, "unsupported_version"),
    );
}

#[test]
fn payload_size_4_gib() {
    hostile(
        |h| h.payload_size = u32::MAX,
        |e| header_problem(e, "payload_too_large"),
    );
}

#[test]
fn empty_payload() {
    hostile(
        |h| h.payload_size = 0,
        |e| header_problem(e, "empty_payload"),
    );
}

#[test]
fn payload_pointer_unmapped() {
    for payload in [0, 8, 1 << 63, u64::MAX - 4] {
        hostile(
            |h| h.payload = payload,
            |e| matches!(e, Error::Malformed { problem: Malformed::PayloadUnmapped { payload: p, .. }, .. } if *p == payload),
        );
    }
}

#[test]
fn timestamp_stuck_at_zero() {
    hostile(
        |h| h.monotonic_published_at_ns = 0,
        |e| matches!(e, Error::StillUpdating { attempts, .. } if *attempts == otel_ctx_reader::process::DEFAULT_MAX_ATTEMPTS),
    );
}

#[test]
fn deeply_nested_payload() {
    let mut guard = fixture();
    let fx = guard.as_mut().unwrap();
    // attributes: [{key: "k", value: 30 nested arrays}], built from the inside out (every
    // length fits one varint byte).
    let mut any = vec![0x2a, 0x00];
    for _ in 1..30 {
        let mut next = vec![0x2a, (any.len() + 2) as u8, 0x0a, any.len() as u8];
        next.extend_from_slice(&any);
        any = next;
    }
    let mut payload = vec![0x12, 0, 0x0a, 1, b'k', 0x12, any.len() as u8];
    payload.extend_from_slice(&any);
    payload[1] = (payload.len() - 2) as u8;
    fx.bytes()[PAYLOAD_OFFSET..PAYLOAD_OFFSET + payload.len()].copy_from_slice(&payload);
    fx.write_header(PAYLOAD_OFFSET, payload.len(), |_| {});
    for method in [ReadMethod::ProcessVmReadv, ReadMethod::ProcMem] {
        let e = read_error(method);
        assert!(
            matches!(&e, Error::Malformed { problem: Malformed::Payload(p), .. } if p.kind() == "too_deep"),
            "{e:?}"
        );
    }
    fx.publish(PAYLOAD_OFFSET, "restored", |_| {});
}

#[test]
fn unpublish_then_republish_elsewhere() {
    let mut guard = fixture();
    guard
        .as_mut()
        .unwrap()
        .publish(PAYLOAD_OFFSET, "first", |_| {});
    let mut r = reader(ReadMethod::Auto);
    let first = r.read().unwrap();
    // Unpublish: the mapping goes away, and the cached address with it.
    *guard = None;
    let e = r.read().unwrap_err();
    assert!(matches!(e, Error::NoContext { .. }), "{e:?}");
    assert!(
        e.to_string().contains("publishes no process context"),
        "{e}"
    );
    // Publish anew: the reader finds the new mapping by itself.
    let mut fx = Fixture::map();
    fx.publish(PAYLOAD_OFFSET, "second", |h| {
        h.monotonic_published_at_ns = h
            .monotonic_published_at_ns
            .max(first.monotonic_published_at_ns + 1);
    });
    let second = r.read().unwrap();
    assert_eq!(second.context.service_name(), Some("second"));
    assert_eq!(second.mapping.start, fx.addr());
    *guard = Some(fx);
}

#[test]
fn errors_say_what_to_do() {
    // A process that never existed is not one that "has exited".
    let never = ProcessContextReader::open(u32::MAX).unwrap_err();
    assert!(
        matches!(never, Error::NoSuchProcess { pid: u32::MAX }),
        "{never:?}"
    );
    assert_eq!(never.to_string(), format!("no process has id {}", u32::MAX));
    assert_eq!(never.kind(), "no_such_process");
    // A zombie has exited.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let zombie = child.id();
    let started = std::time::Instant::now();
    let gone = loop {
        match ProcessContextReader::open(zombie) {
            Err(e) => break e,
            Ok(_) => {
                assert!(started.elapsed().as_secs() < 10, "`true` never exited");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    };
    assert!(
        matches!(gone, Error::ProcessGone { pid } if pid == zombie),
        "{gone:?}"
    );
    assert_eq!(gone.to_string(), format!("process {zombie} has exited"));
    child.wait().unwrap();
    let updating = Error::StillUpdating {
        pid: 5,
        attempts: 8,
    };
    assert!(updating.to_string().contains("after 8 attempts"));
    let denied = Error::PermissionDenied {
        pid: 5,
        operation: "open /proc/5/maps".into(),
        source: std::io::Error::from_raw_os_error(13),
        refuser: otel_ctx_reader::procfs::Refuser::Yama(2),
    };
    let text = denied.to_string();
    assert!(
        text.contains("CAP_SYS_PTRACE") && text.contains("ptrace_scope is 2"),
        "{text}"
    );
    assert_eq!(denied.kind(), "permission_denied");
}

#[test]
fn seccomp_denied_process_vm_readv_falls_back_to_proc_mem() {
    let mut guard = fixture();
    let fx = guard.as_mut().unwrap();
    fx.publish(PAYLOAD_OFFSET, "behind-seccomp", |_| {});
    // A filter applies to the thread that installs it (no TSYNC): only this thread is
    // denied process_vm_readv, with EPERM as container runtimes' profiles do.
    let outcome = std::thread::spawn(|| {
        let rules = [(libc::SYS_process_vm_readv, vec![])].into_iter().collect();
        let arch = std::env::consts::ARCH.try_into().unwrap();
        let filter = seccompiler::SeccompFilter::new(
            rules,
            seccompiler::SeccompAction::Allow,
            seccompiler::SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .unwrap();
        let program: seccompiler::BpfProgram = filter.try_into().unwrap();
        seccompiler::apply_filter(&program).unwrap();

        let mut forced = reader(ReadMethod::ProcessVmReadv);
        let denied = forced.read().unwrap_err();
        let mut auto = reader(ReadMethod::Auto);
        let read = auto.read();
        (denied, read.map(|s| (s, auto.uses_proc_mem())))
    })
    .join()
    .unwrap();
    let (denied, read) = outcome;
    assert!(
        matches!(&denied, Error::PermissionDenied { operation, .. } if operation.starts_with("process_vm_readv")),
        "{denied:?}"
    );
    let (snapshot, uses_proc_mem) = read.unwrap();
    assert!(
        uses_proc_mem,
        "Auto should have switched to /proc/<pid>/mem"
    );
    assert_eq!(snapshot.context.service_name(), Some("behind-seccomp"));
}
