//! Helpers shared by the process-context tests: finding the mapping in
//! `/proc/self/maps`, reading it back through the codec, probing the platform, and
//! running code in a forked child.
#![allow(dead_code)]

use std::io::Read;
use std::os::fd::FromRawFd;
use std::sync::{Mutex, MutexGuard};

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE, MAX_PAYLOAD_SIZE};
use otel_ctx_codec::proto::{Limits, ProcessContextView};
use otel_ctx_codec::threadlocal::ThreadlocalView;

/// The names a process-context mapping has in `/proc/<pid>/maps`.
pub const CONTEXT_NAMES: [&str; 4] = [
    "[anon_shmem:OTEL_CTX]",
    "[anon:OTEL_CTX]",
    "/memfd:OTEL_CTX",
    "/memfd:OTEL_CTX (deleted)",
];

/// One line of `/proc/<pid>/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsEntry {
    pub start: usize,
    pub end: usize,
    pub perms: String,
    pub name: String,
}

/// Parses `/proc/<pid>/maps` text; lines that do not parse are skipped.
pub fn parse_maps(maps: &str) -> Vec<MapsEntry> {
    maps.lines()
        .filter_map(|line| {
            let mut rest = line;
            let mut fields = [""; 5];
            for field in &mut fields {
                rest = rest.trim_start();
                let end = rest.find(' ').unwrap_or(rest.len());
                *field = &rest[..end];
                rest = &rest[end..];
            }
            let (start, end) = fields[0].split_once('-')?;
            Some(MapsEntry {
                start: usize::from_str_radix(start, 16).ok()?,
                end: usize::from_str_radix(end, 16).ok()?,
                perms: fields[1].to_string(),
                name: rest.trim_start().to_string(),
            })
        })
        .collect()
}

/// The process-context mappings in `maps`: an exact name match, not executable.
pub fn context_mappings_in(maps: &str) -> Vec<MapsEntry> {
    parse_maps(maps)
        .into_iter()
        .filter(|m| CONTEXT_NAMES.contains(&m.name.as_str()) && !m.perms.contains('x'))
        .collect()
}

pub fn self_maps() -> String {
    std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps")
}

/// The process-context mappings of this process.
pub fn context_mappings() -> Vec<MapsEntry> {
    context_mappings_in(&self_maps())
}

/// Whether any mapping of this process starts at `address`.
pub fn mapped_at(address: usize) -> bool {
    parse_maps(&self_maps()).iter().any(|m| m.start == address)
}

/// Whether any mapping of this process covers `address`: mappings that lie side by side
/// with the same permissions may show as one line (qemu-user shows the host's lines, where
/// the kernel merged them), so a page need not start a line of its own.
pub fn mapping_covers(address: usize) -> bool {
    parse_maps(&self_maps())
        .iter()
        .any(|m| m.start <= address && address < m.end)
}

/// A header and payload as a reader gets them.
pub struct ReadBack {
    pub header: ProcessContextHeader,
    pub payload: Vec<u8>,
}

impl ReadBack {
    /// The payload, decoded with the readers' default limits.
    pub fn view(&self) -> ProcessContextView<'_> {
        ProcessContextView::decode(&self.payload, &Limits::default()).expect("payload decodes")
    }

    /// The thread reference data of the payload, by name: `threadlocal.schema_version`
    /// and the key map (empty when there is none).
    pub fn key_map(&self) -> (Option<String>, Vec<String>) {
        let view = self.view();
        let threadlocal = ThreadlocalView::from_context(&view).expect("well-formed reference data");
        (
            threadlocal.schema_version.map(str::to_owned),
            threadlocal
                .key_map
                .map(|map| map.iter().map(str::to_owned).collect())
                .unwrap_or_default(),
        )
    }
}

/// Reads the header at `address` and the payload it points to, checking the header as a
/// reader does.
///
/// # Safety
/// `address` must be the address of a live publisher's mapping in this process, and the
/// publisher must stay alive and unchanged during the call.
pub unsafe fn read_context(address: usize) -> Result<ReadBack, String> {
    // SAFETY: the caller guarantees a live mapping of at least HEADER_SIZE bytes there.
    let bytes = unsafe { std::ptr::read_volatile(address as *const [u8; HEADER_SIZE]) };
    let header = ProcessContextHeader::parse(&bytes, MAX_PAYLOAD_SIZE)
        .map_err(|e| format!("header at {address:#x}: {e}"))?;
    let mut payload = vec![0u8; header.payload_size as usize];
    // SAFETY: a valid header points to the publisher's live payload of that size.
    unsafe {
        std::ptr::copy_nonoverlapping(
            header.payload as usize as *const u8,
            payload.as_mut_ptr(),
            payload.len(),
        )
    };
    Ok(ReadBack { header, payload })
}

/// Finds the one context mapping of this process, checks it starts at `address`, and
/// reads it back.
///
/// # Safety
/// As [`read_context`].
pub unsafe fn read_back_published(address: usize) -> Result<ReadBack, String> {
    let found = context_mappings();
    match found.as_slice() {
        [one] if one.start == address => {
            // SAFETY: forwarded from the caller.
            unsafe { read_context(address) }
        }
        _ => Err(format!(
            "expected one OTEL_CTX mapping at {address:#x}, found {found:?}"
        )),
    }
}

/// Serialises the tests of one binary: the process context is a singleton.
pub fn lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether this kernel names anonymous mappings (`CONFIG_ANON_VMA_NAME`): tried on a
/// scratch mapping.
pub fn naming_supported() -> bool {
    with_scratch_page(|page, len| {
        // SAFETY: the page is mapped, zero-filled and `len` bytes long.
        let region = unsafe { std::slice::from_raw_parts(page.cast::<u8>(), len) };
        rustix::process::set_virtual_memory_region_name(region, Some(c"OTEL_PROBE")).is_ok()
    })
}

/// `probe` of a new private anonymous page (its address and length), unmapped afterwards.
fn with_scratch_page<R>(probe: impl FnOnce(*mut std::ffi::c_void, usize) -> R) -> R {
    let len = rustix::param::page_size();
    // SAFETY: a new private anonymous page, unmapped below; nothing else refers to it.
    let page = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE,
        )
    }
    .expect("mmap a scratch page");
    let result = probe(page, len);
    // SAFETY: the page mapped above, no longer referred to.
    unsafe { rustix::mm::munmap(page, len) }.expect("munmap the scratch page");
    result
}

/// `Ok` if `condition` holds, else the error `message()`: a check in a child, whose
/// failure is reported to the parent ([`ChildResult`]).
pub fn check(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(message())
    }
}

/// What a child reported.
#[derive(Debug, PartialEq, Eq)]
pub enum ChildOutcome {
    Passed,
    /// The child skipped its check, for this reason.
    Skipped(String),
}

/// What a child returns: `Err` fails the test with its message.
pub type ChildResult = Result<ChildOutcome, String>;

/// Runs `f` in a forked child and reports its outcome. The child exits without running
/// destructors or atexit handlers.
pub fn in_child(f: impl FnOnce() -> ChildResult) -> ChildResult {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read_fd, write_fd] = fds;
    // SAFETY: the child runs only `f` and then `_exit`s; the tests of this binary are
    // serialised, so no other test thread holds a lock the child could need.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let (code, message) = match outcome {
            Ok(Ok(ChildOutcome::Passed)) => (0, String::new()),
            Ok(Ok(ChildOutcome::Skipped(reason))) => (2, reason),
            Ok(Err(message)) => (1, message),
            Err(panic) => (
                1,
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "child panicked".to_string()),
            ),
        };
        // SAFETY: plain syscalls on descriptors this process owns, then exit.
        unsafe {
            libc::write(write_fd, message.as_ptr().cast(), message.len());
            libc::_exit(code);
        }
    }
    // SAFETY: `write_fd` is ours and closed once, here.
    unsafe { libc::close(write_fd) };
    let mut message = String::new();
    // SAFETY: `read_fd` is ours; the File owns and closes it.
    let mut reader = unsafe { std::fs::File::from_raw_fd(read_fd) };
    reader
        .read_to_string(&mut message)
        .expect("read the child's report");
    let mut status = 0;
    assert_eq!(
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) },
        pid,
        "waitpid"
    );
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Ok(ChildOutcome::Passed),
            2 => Ok(ChildOutcome::Skipped(message)),
            code => Err(format!("child exited with {code}: {message}")),
        }
    } else {
        Err(format!(
            "child ended abnormally (status {status:#x}): {message}"
        ))
    }
}

/// Prints a skipped check's reason, so it is never silent: straight to the standard
/// error stream, which the test harness does not capture.
pub fn report(name: &str, outcome: ChildOutcome) {
    use std::io::Write;
    if let ChildOutcome::Skipped(reason) = outcome {
        let _ = writeln!(std::io::stderr(), "SKIPPED {name}: {reason}");
    }
}

/// Whether `madvise(MADV_DONTFORK)` keeps a mapping out of a forked child here: tried on
/// a scratch page. qemu-user accepts the advice but ignores it.
pub fn dontfork_honoured() -> bool {
    with_scratch_page(|page, len| {
        // SAFETY: the page mapped by `with_scratch_page`, which nothing else refers to.
        unsafe { rustix::mm::madvise(page, len, rustix::mm::Advice::LinuxDontFork) }
            .expect("madvise a scratch page");
        let address = page as usize;
        let outcome = in_child(move || {
            if mapping_covers(address) {
                Err("inherited".to_string())
            } else {
                Ok(ChildOutcome::Passed)
            }
        });
        outcome == Ok(ChildOutcome::Passed)
    })
}
