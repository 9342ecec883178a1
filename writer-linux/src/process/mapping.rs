//! The syscalls of the protocol, one function per step, and the header in the mapping;
//! and the two ways a process tells whether it is a forked child of the publisher
//! ([`ForkMarker`], [`is_mapped`]).
//!
//! Readers in other processes read the header while this process writes it, so every
//! header field is stored with an atomic store of its own width, and the protocol's full
//! barriers (`fence(SeqCst)`) sit between the steps: [`publish_header`],
//! [`update_header`] and [`withdraw_header`] are the header writes of publish, update
//! and unpublish, in the specification's order. They write through [`HeaderCells`], so
//! that the loom model (`loom.rs`, under `--cfg loom`) runs these very functions on a
//! header it keeps in ordinary memory.

use core::ffi::CStr;
use core::mem::offset_of;
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE, SIGNATURE, VERSION};
use rustix::fd::OwnedFd;
use rustix::fs::MemfdFlags;
use rustix::io::Errno;
use rustix::mm::{Advice, MapFlags, MsyncFlags, ProtFlags};
use rustix::time::ClockId;

use super::error::{Error, Step};

/// The name given to the memfd and to the mapping.
const NAME: &CStr = c"OTEL_CTX";

/// What backs the context mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A memfd named `OTEL_CTX`: readers find `/memfd:OTEL_CTX (deleted)` even when the
    /// kernel cannot name mappings.
    Memfd,
    /// An anonymous mapping, because `memfd_create` failed: readers find it only through
    /// its `[anon:OTEL_CTX]` name.
    Anonymous {
        /// What `memfd_create` returned.
        memfd_error: Errno,
    },
}

/// The two syscalls whose failure the protocol tolerates, replaceable so tests can
/// simulate a kernel or sandbox other than the one they run on (public with the feature
/// `test-seams`, which only this crate's tests turn on).
#[derive(Clone, Copy, Debug)]
pub struct Syscalls {
    /// `memfd_create(name, flags)`.
    pub memfd_create: fn(&CStr, MemfdFlags) -> Result<OwnedFd, Errno>,
    /// `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, region, name)`.
    pub name_region: fn(&[u8], &CStr) -> Result<(), Errno>,
}

impl Default for Syscalls {
    fn default() -> Self {
        Self {
            memfd_create: |name, flags| rustix::fs::memfd_create(name, flags),
            name_region: |region, name| {
                rustix::process::set_virtual_memory_region_name(region, Some(name))
            },
        }
    }
}

/// The context mapping: one page holding the header. Dropping it unmaps it.
#[derive(Debug)]
pub(crate) struct Mapping {
    address: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: the mapping is owned by exactly one `Mapping`, which only a `&mut` holder writes
// to; nothing about it is tied to the thread that created it.
unsafe impl Send for Mapping {}

impl Mapping {
    pub(crate) fn address(&self) -> usize {
        self.address.as_ptr() as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn backing(&self) -> Backing {
        self.backing
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= HEADER_SIZE);
        // SAFETY: `offset` is a 4-aligned field offset inside the header, which lies at the
        // page-aligned start of a live mapping of at least `HEADER_SIZE` bytes; the memory
        // is only ever accessed atomically by this process.
        unsafe { AtomicU32::from_ptr(self.address.as_ptr().add(offset).cast()) }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= HEADER_SIZE);
        // SAFETY: as in `u32_at`, for an 8-aligned field.
        unsafe { AtomicU64::from_ptr(self.address.as_ptr().add(offset).cast()) }
    }

    /// The header as it is now, field by field.
    pub(crate) fn header(&self) -> ProcessContextHeader {
        ProcessContextHeader {
            signature: self
                .u64_at(offset_of!(ProcessContextHeader, signature))
                .load(Ordering::Relaxed)
                .to_ne_bytes(),
            version: self
                .u32_at(offset_of!(ProcessContextHeader, version))
                .load(Ordering::Relaxed),
            payload_size: self
                .u32_at(offset_of!(ProcessContextHeader, payload_size))
                .load(Ordering::Relaxed),
            monotonic_published_at_ns: self
                .u64_at(offset_of!(ProcessContextHeader, monotonic_published_at_ns))
                .load(Ordering::Relaxed),
            payload: self
                .u64_at(offset_of!(ProcessContextHeader, payload))
                .load(Ordering::Relaxed),
        }
    }

    /// Leaves the mapping alone: in a forked child the address is not ours (the mapping
    /// was not inherited), so it must be neither written nor unmapped.
    pub(crate) fn abandon(self) {
        core::mem::forget(self);
    }

    /// Unpublish step: unmap.
    pub(crate) fn unmap(self) -> Result<(), Error> {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `address..address + len` is exactly the mapping created by
        // `map_memfd`/`map_anonymous`, owned by this value and unmapped only here or in
        // `drop`, never both (`ManuallyDrop`); no reference into it outlives `self`.
        unsafe { rustix::mm::munmap(this.address.as_ptr().cast(), this.len) }.map_err(|errno| {
            Error::Syscall {
                step: Step::Munmap,
                errno,
            }
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: as in `unmap`. An error would leave one page mapped; nothing to do then.
        let _ = unsafe { rustix::mm::munmap(self.address.as_ptr().cast(), self.len) };
    }
}

/// The size of the mapping: one page, which holds the header.
pub(crate) fn mapping_len() -> usize {
    rustix::param::page_size().max(HEADER_SIZE)
}

/// Publish step 2: a memfd named `OTEL_CTX`, sealable and not executable; without
/// `MFD_NOEXEC_SEAL` (Linux 6.3) if the kernel refuses it.
pub(crate) fn create_memfd(syscalls: &Syscalls) -> Result<OwnedFd, Errno> {
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    (syscalls.memfd_create)(NAME, flags | MemfdFlags::NOEXEC_SEAL)
        .or_else(|_| (syscalls.memfd_create)(NAME, flags))
}

/// Publish step 2: size the memfd to the mapping.
pub(crate) fn size_memfd(fd: &OwnedFd, len: usize) -> Result<(), Error> {
    rustix::fs::ftruncate(fd, len as u64).map_err(|errno| Error::Syscall {
        step: Step::Ftruncate,
        errno,
    })
}

/// Publish step 3: map the memfd privately, readable and writable. The caller closes the
/// fd afterwards by dropping it; the mapping stays.
pub(crate) fn map_memfd(fd: &OwnedFd, len: usize) -> Result<Mapping, Error> {
    // SAFETY: a new mapping at an address the kernel picks: no existing memory is
    // affected. It is owned by the returned `Mapping`.
    let address = unsafe {
        rustix::mm::mmap(
            null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
            fd,
            0,
        )
    };
    mapping(address, len, Backing::Memfd)
}

/// Publish step 4: the anonymous fallback when memfd is unavailable.
pub(crate) fn map_anonymous(len: usize, memfd_error: Errno) -> Result<Mapping, Error> {
    // SAFETY: as in `map_memfd`.
    let address = unsafe {
        rustix::mm::mmap_anonymous(
            null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    };
    mapping(address, len, Backing::Anonymous { memfd_error })
}

fn mapping(
    address: Result<*mut core::ffi::c_void, Errno>,
    len: usize,
    backing: Backing,
) -> Result<Mapping, Error> {
    let address = address.map_err(|errno| Error::Syscall {
        step: Step::Mmap,
        errno,
    })?;
    match NonNull::new(address.cast::<u8>()) {
        Some(address) => Ok(Mapping {
            address,
            len,
            backing,
        }),
        // mmap never returns address 0 for a mapping it picked the place of.
        None => Err(Error::Syscall {
            step: Step::Mmap,
            errno: Errno::FAULT,
        }),
    }
}

/// Publish step 5: keep the mapping out of forked children.
pub(crate) fn prevent_fork_inheritance(mapping: &Mapping) -> Result<(), Error> {
    // SAFETY: the range is exactly our live mapping; MADV_DONTFORK changes only what
    // fork() does with it, not its contents.
    unsafe {
        rustix::mm::madvise(
            mapping.address.as_ptr().cast(),
            mapping.len,
            Advice::LinuxDontFork,
        )
    }
    .map_err(|errno| Error::Syscall {
        step: Step::Madvise,
        errno,
    })
}

/// Whether the whole of `mapping` is still mapped in this process, asked of the kernel
/// without touching the memory: `msync(MS_ASYNC)` fails with `ENOMEM` on a range that is
/// not (wholly) mapped, and otherwise does nothing (Linux since 2.6.19).
///
/// What tells a forked child apart where there is no [`ForkMarker`]: the child did not
/// inherit the mapping (`MADV_DONTFORK`), whatever its pid.
pub(crate) fn is_mapped(mapping: &Mapping) -> bool {
    // SAFETY: msync neither reads nor writes the range; on memory that is not mapped it
    // only fails.
    unsafe {
        rustix::mm::msync(
            mapping.address.as_ptr().cast(),
            mapping.len,
            MsyncFlags::ASYNC,
        )
    }
    .is_ok()
}

/// A page that `fork` gives a child zero-filled (`MADV_WIPEONFORK`, Linux 4.14): the
/// publisher writes the id of its publication there, and a process that finds any other
/// value there is a forked child, whatever its pid (a child in a new PID namespace can have
/// its parent's pid). One load, no system call.
///
/// The page stays mapped for the rest of the process's life: a forked child keeps it too
/// (zero-filled), so it is always safe to read.
#[derive(Debug)]
pub(crate) struct ForkMarker {
    page: NonNull<u8>,
}

// SAFETY: the page is mapped for the rest of the process's life and only ever accessed
// through an atomic, from whichever thread.
unsafe impl Send for ForkMarker {}

impl ForkMarker {
    /// Maps the page. `None` where the kernel refuses `MADV_WIPEONFORK` (before Linux
    /// 4.14) or the page cannot be mapped: then only the pid and [`is_mapped`] tell a
    /// forked child apart.
    pub(crate) fn create() -> Option<Self> {
        let len = rustix::param::page_size();
        // SAFETY: a new mapping at an address the kernel picks: no existing memory is
        // affected.
        let page = unsafe {
            rustix::mm::mmap_anonymous(
                null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .ok()?;
        // SAFETY: the range is exactly the page mapped above; the advice changes only what
        // fork() does with it.
        match unsafe { rustix::mm::madvise(page, len, Advice::LinuxWipeOnFork) } {
            Ok(()) => NonNull::new(page.cast::<u8>()).map(|page| Self { page }),
            Err(_) => {
                // SAFETY: the page mapped above, which nothing refers to.
                let _ = unsafe { rustix::mm::munmap(page, len) };
                None
            }
        }
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the page is mapped (never unmapped, and kept by forked children),
        // page-aligned so 8-aligned, and only ever accessed through this atomic.
        unsafe { AtomicU64::from_ptr(self.page.as_ptr().cast()) }
    }

    /// Records `id`, the publication this process now holds (never 0).
    pub(crate) fn set(&self, id: u64) {
        // Relaxed: only this process reads the word, under the lock that orders its
        // publications; a forked child's copy is zero-filled by the kernel, not stored to.
        self.word().store(id, Ordering::Relaxed);
    }

    /// The publication recorded by [`set`](Self::set) in this very process; 0 in a
    /// forked child that recorded none.
    pub(crate) fn get(&self) -> u64 {
        // Relaxed, as in `set`.
        self.word().load(Ordering::Relaxed)
    }
}

/// Where the protocol writes a header: the context mapping, or a model's header in the
/// loom tests, whose atomics cannot live in a mapping.
pub(crate) trait HeaderCells {
    /// Stores the 4-byte field at `offset` with one aligned atomic store.
    fn store_u32(&self, offset: usize, value: u32);
    /// Stores the 8-byte field at `offset` with one aligned atomic store.
    fn store_u64(&self, offset: usize, value: u64);
    /// The protocol's full memory barrier, `fence(SeqCst)`.
    fn barrier(&self);
}

impl HeaderCells for Mapping {
    fn store_u32(&self, offset: usize, value: u32) {
        // Relaxed: what orders the header's stores for readers is the protocol's barriers.
        self.u32_at(offset).store(value, Ordering::Relaxed);
    }

    fn store_u64(&self, offset: usize, value: u64) {
        // Relaxed, as in `store_u32`.
        self.u64_at(offset).store(value, Ordering::Relaxed);
    }

    fn barrier(&self) {
        // Orders every store before it before every store after it, for readers on other
        // CPUs; the callers say which steps it separates.
        fence(Ordering::SeqCst);
    }
}

/// Publish step 6: signature, version, `payload_size` and `payload`; not the timestamp.
pub(crate) fn write_header<H: HeaderCells + ?Sized>(header: &H, payload_size: u32, payload: u64) {
    // The barrier after this step orders all of these stores before the timestamp that
    // makes them valid.
    header.store_u64(
        offset_of!(ProcessContextHeader, signature),
        u64::from_ne_bytes(SIGNATURE),
    );
    header.store_u32(offset_of!(ProcessContextHeader, version), VERSION);
    swap_payload(header, payload_size, payload);
}

/// Update step 4: point the header at the new payload.
pub(crate) fn swap_payload<H: HeaderCells + ?Sized>(header: &H, payload_size: u32, payload: u64) {
    // Stores between two barriers of the update: the one before orders them after the
    // timestamp's 0, the one after orders them before the new timestamp.
    header.store_u32(offset_of!(ProcessContextHeader, payload_size), payload_size);
    header.store_u64(offset_of!(ProcessContextHeader, payload), payload);
}

/// Publish step 8, update steps 2 and 6, unpublish step 1: write
/// `monotonic_published_at_ns` (0 = being changed).
pub(crate) fn write_timestamp<H: HeaderCells + ?Sized>(header: &H, monotonic_published_at_ns: u64) {
    // One aligned 64-bit atomic store, so a reader never sees half a timestamp; its order
    // relative to the other fields comes from the barriers around it.
    header.store_u64(
        offset_of!(ProcessContextHeader, monotonic_published_at_ns),
        monotonic_published_at_ns,
    );
}

/// Publish steps 6 to 8 on a header nobody could read yet: the fields, a barrier, then
/// `monotonic_published_at_ns`, non-zero, last.
pub(crate) fn publish_header<H: HeaderCells + ?Sized>(
    header: &H,
    payload_size: u32,
    payload: u64,
    monotonic_published_at_ns: u64,
) {
    // Step 6.
    write_header(header, payload_size, payload);
    // Step 7: every header field above is ordered before the timestamp that makes it valid.
    header.barrier();
    // Step 8.
    write_timestamp(header, monotonic_published_at_ns);
}

/// Update steps 2 to 6: timestamp 0, barrier, new `payload_size` and `payload`, barrier,
/// the new `monotonic_published_at_ns` (strictly greater than the old one: the caller's
/// [`next_timestamp`]). The old payload may be freed only after this returns.
pub(crate) fn update_header<H: HeaderCells + ?Sized>(
    header: &H,
    payload_size: u32,
    payload: u64,
    monotonic_published_at_ns: u64,
) {
    // Step 2: timestamp 0 tells readers the context is being changed.
    write_timestamp(header, 0);
    // Step 3: the 0 is ordered before the payload fields change, so a reader that sees a
    // new pointer or size also sees the 0 (or a later timestamp).
    header.barrier();
    // Step 4: point the header at the new payload.
    swap_payload(header, payload_size, payload);
    // Step 5: the new pointer and size are ordered before the new timestamp.
    header.barrier();
    // Step 6.
    write_timestamp(header, monotonic_published_at_ns);
}

/// Unpublish steps 1 and 2: timestamp 0, then a barrier that orders it before whatever
/// the caller does next (unmap the header, free the payload).
pub(crate) fn withdraw_header<H: HeaderCells + ?Sized>(header: &H) {
    // Step 1: readers that still find the mapping see "being changed".
    write_timestamp(header, 0);
    // Step 2: the 0 is ordered before the unmap and the payload's release.
    header.barrier();
}

/// Publish step 9, update step 7: name the mapping `OTEL_CTX`. Always called, even where
/// the kernel cannot name mappings: readers may hook this call to learn of new contexts.
pub(crate) fn name_mapping(mapping: &Mapping, syscalls: &Syscalls) -> Result<(), Errno> {
    // SAFETY: the mapping is live, `len` bytes long and initialised (zero-filled by mmap,
    // then written); it is written only through `&mut` owners of the publisher, none of
    // which runs while this shared view exists.
    let region = unsafe { core::slice::from_raw_parts(mapping.address.as_ptr(), mapping.len) };
    (syscalls.name_region)(region, NAME)
}

/// `CLOCK_BOOTTIME` now, in nanoseconds.
// Defined again as the reader's `boottime_ns` (`reader-linux/src/reader.rs`): the writer and
// the reader may not depend on each other (ARCHITECTURE.md), and the codec, which both
// use, knows bytes and no clock. The two must read the same clock, `CLOCK_BOOTTIME`, which
// `monotonic_published_at_ns` is taken from.
pub(crate) fn boottime_ns() -> u64 {
    let now = rustix::time::clock_gettime(ClockId::Boottime);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A timestamp for the next publication: now, unless that is not strictly after `last`
/// (the clock's resolution, or updates in quick succession), and never 0.
pub(crate) fn next_timestamp(last: u64) -> u64 {
    boottime_ns().max(last.saturating_add(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_mapped_asks_the_kernel() {
        let len = mapping_len();
        let mapping = map_anonymous(len, Errno::NOSYS).expect("map a page");
        assert!(is_mapped(&mapping));
        mapping.unmap().expect("unmap");
        // The first pages of the address space are never mapped (`vm.mmap_min_addr`), so
        // this stands for a mapping a forked child did not inherit, with no race against
        // other tests' mappings.
        let absent = Mapping {
            address: NonNull::new(len as *mut u8).expect("not null"),
            len,
            backing: Backing::Memfd,
        };
        assert!(!is_mapped(&absent));
        absent.abandon();
    }

    #[test]
    fn fork_marker_holds_the_id() {
        // Every kernel this crate is tested on has MADV_WIPEONFORK (Linux 4.14).
        let marker = ForkMarker::create().expect("MADV_WIPEONFORK");
        assert_eq!(marker.get(), 0, "a new page is zero-filled");
        marker.set(7);
        assert_eq!(marker.get(), 7);
    }
}
