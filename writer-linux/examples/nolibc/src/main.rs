//! A program with no C library, no allocator and no start files that publishes a process
//! context and two threads' contexts through `otel-ctx-writer` without `alloc`.
//!
//! It starts at its own `_start`, lays out its threads' TLS itself from the executable's
//! `PT_TLS` image (x86_64: `arch_prctl(ARCH_SET_FS)`, variant II; aarch64: `TPIDR_EL0`,
//! variant I), publishes its process context from two static buffers, attaches a context
//! in static storage on its main thread and on a second thread it starts with a raw
//! `clone` (its own stack, its own TLS block through `CLONE_SETTLS`), checks on each
//! thread that the slot is where a reader computes it and reads back what it published,
//! prints `READY <pid>`, then updates both threads' contexts every 100 ms until SIGTERM
//! (or for `--seconds N`).
//!
//! Built by `scripts/build-nolibc.sh`.
#![no_std]
#![no_main]

mod check;
mod mem;
mod sys;
mod tls;

use core::fmt::Write;
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use otel_ctx_codec::proto::{AnyValueView, Limits, ProcessContextView};
use otel_ctx_codec::record::MAX_RECORD_SIZE;
use otel_ctx_codec::threadlocal::ThreadlocalView;
use otel_ctx_writer::process::{AnyValue, BufferPublisher, KeyValue, ProcessContext};
use otel_ctx_writer::thread::{self, Key, KeyMap, RecordPool, ThreadContext};

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl _start",
    ".type _start, @function",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl _start",
    ".type _start, @function",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {start}",
    "brk #0",
    start = sym start,
);

/// A line of output, formatted on the stack and written with one `write`.
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Self {
            buf: [0; 512],
            len: 0,
        }
    }

    fn emit(mut self, fd: usize) {
        if self.len < self.buf.len() {
            self.buf[self.len] = b'\n';
            self.len += 1;
        }
        sys::write_all(fd, &self.buf[..self.len]);
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len() - 1 - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Prints one line to stdout.
macro_rules! say {
    ($($arg:tt)*) => {{
        let mut line = Line::new();
        let _ = write!(line, $($arg)*);
        line.emit(1);
    }};
}

/// Prints one line to stderr and exits with `code`.
macro_rules! fail {
    ($code:expr, $($arg:tt)*) => {{
        let mut line = Line::new();
        let _ = write!(line, "otel-ctx-nolibc: ");
        let _ = write!(line, $($arg)*);
        line.emit(2);
        sys::exit_group($code)
    }};
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    fail!(101, "panic: {}", info.message())
}

const ROLE: Key = Key::from_index(0);
const TICK: Key = Key::from_index(1);
const KEY_NAMES: [&str; 2] = ["thread.role", "tick"];

static RECORDS: RecordPool<2> = RecordPool::new();
static mut PAYLOADS: [[u8; 1024]; 2] = [[0; 1024]; 2];
static mut AREAS: [tls::ThreadArea; 2] = [tls::ThreadArea::new(), tls::ThreadArea::new()];
static mut WORKER_STACK: Stack = Stack([0; 256 * 1024]);
static mut EXE: [u8; 8 << 20] = [0; 8 << 20];
static mut UUID: [u8; 36] = [0; 36];

#[repr(C, align(16))]
struct Stack([u8; 256 * 1024]);

/// The slot's offset from the thread pointer as the reader computes it.
static SLOT_OFFSET: AtomicI64 = AtomicI64::new(0);
/// 0 until the worker has attached and checked its context, then 1; 2 if its check failed.
static WORKER_STATE: AtomicU32 = AtomicU32::new(0);

/// The ids of thread `role` (1 main, 2 worker) at `tick`: never zero.
fn ids(role: u8, tick: u64) -> ([u8; 16], [u8; 8]) {
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&0x6e6f_6c69_6263_0000_u64.to_be_bytes());
    trace_id[8..].copy_from_slice(&(tick + 1).to_be_bytes());
    let mut span_id = (tick + 1).to_be_bytes();
    span_id[0] = role;
    (trace_id, span_id)
}

/// `value` in decimal, in `buf`.
fn decimal(value: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    let mut v = value;
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// Updates the calling thread's attached context for `tick`.
fn tick_update(role: u8, name: &str, tick: u64) {
    let (trace_id, span_id) = ids(role, tick);
    let mut digits = [0u8; 20];
    let tick_text = decimal(tick, &mut digits);
    if let Err(e) = thread::update(trace_id, span_id, 0x01, &[(ROLE, name), (TICK, tick_text)]) {
        fail!(1, "update of the {name} thread's context: {e}");
    }
}

/// Attaches a context from the pool on the calling thread, with `tick` 0.
fn attach(role: u8, name: &str) {
    let Some(storage) = RECORDS.take() else {
        fail!(1, "no record storage left for the {name} thread");
    };
    let context = match ThreadContext::in_storage(storage, ThreadContext::CAPACITY) {
        Ok(context) => context,
        Err(e) => fail!(1, "{e}"),
    };
    if context.attach().is_some() {
        fail!(1, "the {name} thread's slot was not empty");
    }
    tick_update(role, name, 0);
}

/// Checks on the calling thread that the slot is where a reader computes it (thread
/// pointer plus the offset from the symbol table) and that the record there reads back as
/// attached. `key_map` names the attributes.
fn check_slot(name: &str, key_map: &[&str]) -> Result<(), &'static str> {
    let tp = sys::thread_pointer();
    let computed = tp.wrapping_add_signed(SLOT_OFFSET.load(Ordering::Relaxed) as isize);
    let actual = thread::tls_slot_address() as usize;
    if computed != actual {
        say!(
            "TLS-SLOT thread={name} tp={tp:#x} computed={computed:#x} actual={actual:#x} MISMATCH"
        );
        return Err("the slot is not where a reader computes it");
    }
    // SAFETY: `computed` is this thread's slot (just checked), an 8-byte pointer.
    let record = unsafe { (computed as *const *const u8).read() };
    if record.is_null() || record != thread::attached_record_address() {
        return Err("the slot does not point at the attached record");
    }
    let mut buf = [0u8; MAX_RECORD_SIZE];
    // SAFETY: the record this thread attached, which only this thread writes (not now).
    let view = unsafe { check::read_record(record, &mut buf)? };
    if !view.header.is_valid() {
        return Err("the attached record is not valid");
    }
    let mut line = Line::new();
    let _ = write!(
        line,
        "TLS-SLOT thread={name} tid={} tp={tp:#x} slot={computed:#x} record={:#x} valid=1 \
         trace_id=",
        sys::gettid(),
        record as usize
    );
    for byte in view.header.trace_id {
        let _ = write!(line, "{byte:02x}");
    }
    for (key, value) in view.entries() {
        let key_name = key_map.get(usize::from(key)).copied().unwrap_or("?");
        let value = core::str::from_utf8(value).unwrap_or("?");
        let _ = write!(line, " {key_name}={value}");
    }
    line.emit(1);
    Ok(())
}

/// The second thread: attaches its context, checks it, then updates it every 100 ms for
/// the rest of the process's life.
extern "C" fn worker(_arg: usize) {
    attach(2, "worker");
    let state = match check_slot("worker", &KEY_NAMES) {
        Ok(()) => 1,
        Err(e) => {
            say!("SELF-CHECK FAILED worker: {e}");
            2
        }
    };
    WORKER_STATE.store(state, Ordering::Release);
    let mut tick = 0;
    loop {
        sys::sleep_ns(100_000_000);
        tick += 1;
        tick_update(2, "worker", tick);
    }
}

/// `--seconds N`, if given.
fn parse_args(argv: &[*const u8]) -> Option<u64> {
    let arg = |i: usize| -> &[u8] {
        // SAFETY: argv entries are NUL-terminated strings the kernel copied.
        unsafe { core::ffi::CStr::from_ptr(argv[i].cast()).to_bytes() }
    };
    let mut seconds = None;
    let mut i = 1;
    while i < argv.len() {
        match arg(i) {
            b"--seconds" if i + 1 < argv.len() => {
                let text = core::str::from_utf8(arg(i + 1)).unwrap_or("");
                match text.parse::<u64>() {
                    Ok(n) => seconds = Some(n),
                    Err(_) => fail!(2, "--seconds takes a whole number of seconds, not {text:?}"),
                }
                i += 2;
            }
            _ => fail!(2, "usage: otel-ctx-nolibc [--seconds N]"),
        }
    }
    seconds
}

/// A random UUID v4 in `UUID`, from the `getrandom` system call.
fn random_uuid() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    const GETRANDOM: usize = 318;
    #[cfg(target_arch = "aarch64")]
    const GETRANDOM: usize = 278;
    let mut bytes = [0u8; 16];
    // SAFETY: `bytes` is writable for 16 bytes.
    let n = unsafe { sys::syscall(GETRANDOM, [bytes.as_mut_ptr() as usize, 16, 0, 0, 0, 0]) };
    if n != 16 {
        fail!(1, "getrandom failed ({n})");
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    // SAFETY: only the main thread touches `UUID`, once, before any other thread starts.
    let out = unsafe { &mut *addr_of_mut!(UUID) };
    let hex = b"0123456789abcdef";
    let mut at = 0;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out[at] = b'-';
            at += 1;
        }
        out[at] = hex[usize::from(byte >> 4)];
        out[at + 1] = hex[usize::from(byte & 0xf)];
        at += 2;
    }
    core::str::from_utf8(out).unwrap_or("")
}

/// Decodes the published payload the way a reader does and prints what it says.
fn check_process_context(publisher: &BufferPublisher) -> Result<(), &'static str> {
    let header = publisher.header().ok_or("nothing is published")?;
    if header.monotonic_published_at_ns == 0 {
        return Err("the header's timestamp is 0");
    }
    // SAFETY: the header points at the payload buffer this publisher encoded, which stays
    // as it is until the next update (made by this thread, later).
    let payload = unsafe {
        core::slice::from_raw_parts(header.payload as *const u8, header.payload_size as usize)
    };
    let view = ProcessContextView::decode(payload, &Limits::default())
        .map_err(|_| "the published payload does not decode")?;
    let Some(AnyValueView::String(service)) = view.resource_value("service.name") else {
        return Err("the payload has no service.name");
    };
    let threadlocal =
        ThreadlocalView::from_context(&view).map_err(|_| "the reference data is unusable")?;
    let key_map = threadlocal.key_map.ok_or("no attribute key map")?;
    let mut line = Line::new();
    let _ = write!(
        line,
        "PROCESS-CONTEXT payload={:#x} size={} service.name={service} schema={} key_map=",
        header.payload,
        header.payload_size,
        threadlocal.schema_version.unwrap_or("")
    );
    for (i, name) in key_map.iter().enumerate() {
        let _ = write!(line, "{}{name}", if i == 0 { "" } else { "," });
    }
    line.emit(1);
    if key_map.iter().ne(KEY_NAMES) {
        return Err("the published key map is not the one registered");
    }
    Ok(())
}

/// Entered from `_start` with the initial stack pointer.
extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: `sp` is the kernel's initial stack pointer, passed on by `_start`.
    let start = unsafe { tls::read_start(sp) };
    // SAFETY: from `read_start`.
    let Some(image) = (unsafe { tls::tls_image(&start) }) else {
        fail!(1, "the executable has no PT_TLS segment");
    };
    // SAFETY: each area is taken once here, for one thread, for the process's life.
    let (main_area, worker_area) = unsafe {
        let [a, b] = &mut *addr_of_mut!(AREAS);
        (a, b)
    };
    let Some(main_tp) = tls::set_up(&image, main_area) else {
        fail!(1, "the TLS image does not fit the thread area");
    };
    if let Err(e) = sys::set_thread_pointer(main_tp) {
        fail!(1, "setting the thread pointer failed ({e})");
    }
    // From here on thread-local storage works on this thread.
    let seconds = parse_args(start.argv);

    // The slot's offset, as a reader computes it from the file.
    // SAFETY: only this thread uses `EXE`, here, before any other thread starts.
    let exe = match sys::read_file(b"/proc/self/exe\0", unsafe { &mut *addr_of_mut!(EXE) }) {
        Ok(exe) => exe,
        Err(e) => fail!(1, "reading /proc/self/exe failed ({e})"),
    };
    let offset = match check::slot_offset(exe) {
        Ok(offset) => offset,
        Err(e) => fail!(1, "{e}"),
    };
    say!(
        "TLS-SYMBOL table={} st_value={} tls_align={} offset={}",
        offset.table,
        offset.st_value,
        image.align,
        offset.offset
    );
    SLOT_OFFSET.store(offset.offset, Ordering::Relaxed);

    // The process context, from two static buffers, with the key map.
    let mut keys = KeyMap::new();
    for name in KEY_NAMES {
        if let Err(e) = keys.register(name) {
            fail!(1, "{e}");
        }
    }
    // SAFETY: the only references ever made to the two buffers.
    let [first, second] = unsafe { &mut *addr_of_mut!(PAYLOADS) };
    let mut publisher = BufferPublisher::new(first, second);
    let pid = sys::getpid();
    let resource = [
        KeyValue {
            key: "service.name",
            value: AnyValue::String("otel-ctx-nolibc"),
        },
        KeyValue {
            key: "service.instance.id",
            value: AnyValue::String(random_uuid()),
        },
        KeyValue {
            key: "telemetry.sdk.language",
            value: AnyValue::String("rust"),
        },
        KeyValue {
            key: "telemetry.sdk.name",
            value: AnyValue::String("otel-ctx-writer"),
        },
        KeyValue {
            key: "process.pid",
            value: AnyValue::Int(i64::from(pid)),
        },
    ];
    let reference = keys.reference_data();
    let context = ProcessContext {
        resource: &resource,
        attributes: &reference,
    };
    if let Err(e) = publisher.publish(&context) {
        fail!(1, "publishing the process context failed: {e}");
    }
    if let Err(e) = check_process_context(&publisher) {
        say!("SELF-CHECK FAILED process context: {e}");
        sys::exit_group(1);
    }

    // SIGTERM is taken synchronously (sigtimedwait) by the main thread: blocked here, and
    // so in the worker, which inherits the mask.
    if let Err(e) = sys::block_signal(sys::SIGTERM) {
        fail!(1, "blocking SIGTERM failed ({e})");
    }
    attach(1, "main");
    if let Err(e) = check_slot("main", keys.names()) {
        say!("SELF-CHECK FAILED main: {e}");
        sys::exit_group(1);
    }
    let Some(worker_tp) = tls::set_up(&image, worker_area) else {
        fail!(1, "the TLS image does not fit the thread area");
    };
    // SAFETY: the worker's stack is used by it alone, for the process's life; its end is
    // 16-aligned (the array is, and its size is a multiple of 16).
    let stack_top = unsafe {
        let stack = &mut *addr_of_mut!(WORKER_STACK);
        stack.0.as_mut_ptr().add(stack.0.len()) as usize
    };
    // SAFETY: the stack and the thread pointer set up above, the worker's alone.
    let tid = unsafe { sys::spawn(worker, 0, stack_top, worker_tp) };
    if tid < 0 {
        fail!(1, "clone failed ({tid})");
    }
    // The worker attaches and checks its context; READY only once both threads have one.
    let deadline = sys::monotonic_ns() + 5_000_000_000;
    let state = loop {
        match WORKER_STATE.load(Ordering::Acquire) {
            0 if sys::monotonic_ns() < deadline => sys::sleep_ns(1_000_000),
            0 => fail!(1, "the worker thread did not report in 5 s"),
            state => break state,
        }
    };
    if state != 1 {
        sys::exit_group(1);
    }
    say!("SELF-CHECK ok");
    say!("READY {pid}");

    let end = seconds.map(|s| sys::monotonic_ns() + s * 1_000_000_000);
    let mut tick = 0;
    loop {
        if sys::wait_signal(sys::SIGTERM, 100_000_000) {
            break;
        }
        if end.is_some_and(|end| sys::monotonic_ns() >= end) {
            break;
        }
        tick += 1;
        tick_update(1, "main", tick);
    }
    // Withdraw the context before exiting (optional at exit, but tidy).
    let _ = thread::detach();
    if let Err(e) = publisher.unpublish() {
        fail!(1, "unpublishing failed: {e}");
    }
    say!("EXIT after {tick} ticks");
    sys::exit_group(0)
}
