//! The publisher: the one writer of this process's context.
//!
//! The process context is a singleton (OTEP 4719), and so is its state here: one
//! publication per process, in [`PROCESS`] behind a lock, beside the thread-context
//! reference data that every publication carries once it is set. A [`Publisher`] is the
//! handle of that publication: only its holder updates or withdraws the resource and the
//! extra attributes. The reference data reaches the publication whoever holds the handle
//! ([`set_thread_reference_data`], which the attribute-key registry of the thread context
//! calls): that is how keys registered with `thread::register` get published both by a
//! standalone `Publisher` and by `process::global`.

#[cfg(feature = "alloc")]
use alloc::boxed::Box;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
#[cfg(feature = "alloc")]
use core::mem::ManuallyDrop;

use otel_ctx_codec::header::ProcessContextHeader;

#[cfg(feature = "alloc")]
use super::encode::{encode_payload, Encoded};
use super::lock::Lock;
use super::mapping::{
    create_memfd, is_mapped, map_anonymous, map_memfd, mapping_len, name_mapping, next_timestamp,
    prevent_fork_inheritance, publish_header, size_memfd, update_header, withdraw_header, Backing,
    ForkMarker, Mapping, Syscalls,
};
#[cfg(feature = "alloc")]
use super::reference::ThreadReference;
use super::Error;
#[cfg(feature = "alloc")]
use super::{Attributes, Resource};

/// The process's one publication, and what every publication carries.
static PROCESS: Lock<Process> = Lock::new(Process::new());

pub(crate) struct Process {
    /// The publication, if any: this process's own, or after a fork the parent's, whose
    /// mapping the child does not have (see [`is_own`]).
    live: Option<Live>,
    /// The thread-context reference data, once set: part of every publication of a
    /// [`Publisher`] from then on.
    #[cfg(feature = "alloc")]
    thread_reference: Option<ThreadReference>,
    /// The id of the last publication of this process: ids start at 1 and are never
    /// reused, so a handle never mistakes a later publication for its own.
    last_id: u64,
    /// What tells a forked child apart, made at the first publication.
    fork_marker: Marker,
}

enum Marker {
    /// Nothing was published yet.
    Untried,
    /// The kernel refused `MADV_WIPEONFORK`.
    Unavailable,
    /// The page that holds the id of this process's publication.
    Page(ForkMarker),
}

/// A publication: the mapping and its header's state. The payload it points at is its
/// publisher's: a heap payload of a [`Publisher`] (kept here, in `owned`), or a buffer of a
/// `BufferPublisher` (kept by that publisher).
pub(crate) struct Live {
    id: u64,
    /// The publishing process.
    pid: i32,
    mapping: Mapping,
    monotonic_published_at_ns: u64,
    named: bool,
    syscalls: Syscalls,
    /// What a [`Publisher`] publishes; `None` for a `BufferPublisher`.
    #[cfg(feature = "alloc")]
    owned: Option<Owned>,
}

/// The heap payload of a [`Publisher`], and the resource and extra attributes it encodes.
#[cfg(feature = "alloc")]
struct Owned {
    /// The encoded payload the header points to.
    payload: Box<[u8]>,
    resource: Resource,
    /// The published extra attributes, the thread reference data included.
    attributes: Attributes,
}

fn current_pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// Whether `live` is this process's own publication, rather than its parent's, inherited
/// across a fork without its mapping (`MADV_DONTFORK`).
///
/// The pid alone cannot tell: a child in a new PID namespace can have its parent's pid.
/// So the pid only rules out the ordinary child cheaply; the fork marker (one load) or,
/// without one, a probe of the mapping (one system call) decides.
fn is_own(marker: &Marker, live: &Live) -> bool {
    if live.pid != current_pid() {
        return false;
    }
    match marker {
        // Zero-filled in every forked child; the id only in the publishing process.
        Marker::Page(marker) => marker.get() == live.id,
        // A forked child did not inherit the mapping. (Another mapping at the same address
        // in a child with the same pid would pass: only kernels before 4.14 get here.)
        Marker::Untried | Marker::Unavailable => is_mapped(&live.mapping),
    }
}

impl Process {
    const fn new() -> Self {
        Self {
            live: None,
            #[cfg(feature = "alloc")]
            thread_reference: None,
            last_id: 0,
            fork_marker: Marker::Untried,
        }
    }

    /// Forgets a publication inherited across a fork: the mapping is not this process's,
    /// so it is neither written nor unmapped; the rest is this process's copy, freed.
    fn discard_inherited(&mut self) {
        if self
            .live
            .as_ref()
            .is_some_and(|live| !is_own(&self.fork_marker, live))
        {
            if let Some(live) = self.live.take() {
                live.abandon();
            }
        }
    }

    /// The fork marker, made on first use; `None` where the kernel has none.
    fn fork_marker(&mut self) -> Option<&ForkMarker> {
        if matches!(self.fork_marker, Marker::Untried) {
            self.fork_marker = ForkMarker::create().map_or(Marker::Unavailable, Marker::Page);
        }
        match &self.fork_marker {
            Marker::Page(marker) => Some(marker),
            Marker::Untried | Marker::Unavailable => None,
        }
    }

    /// Makes `next` the reference data, updating the own publication of a [`Publisher`]
    /// (if any) with it first. A `BufferPublisher` publishes exactly what its caller
    /// encodes, so its publication is left as it is. On error nothing was changed.
    #[cfg(feature = "alloc")]
    fn set_thread_reference(&mut self, next: ThreadReference) -> Result<(), Error> {
        let marker = &self.fork_marker;
        if let Some(live) = self.live.as_mut().filter(|live| is_own(marker, live)) {
            if let Some(owned) = &live.owned {
                let resource = owned.resource.clone();
                let attributes = owned.attributes.clone();
                live.update(resource, attributes, Some(&next))?;
            }
        }
        self.thread_reference = Some(next);
        Ok(())
    }

    /// Publish step 1: the process context is a singleton. A publication inherited across
    /// a fork is not this process's (it has no mapping), so it makes way. Returns this
    /// process's id.
    fn begin_publish(&mut self) -> Result<i32, Error> {
        let pid = current_pid();
        self.discard_inherited();
        if self.live.is_some() {
            return Err(Error::AlreadyPublished { pid });
        }
        Ok(pid)
    }

    /// Publish steps 2 to 9 for the encoded payload at `payload` (`payload_size` bytes,
    /// which stay where they are until the publication switches payload or is
    /// withdrawn), after [`begin_publish`](Self::begin_publish): makes it this process's
    /// publication and returns its handle.
    fn finish_publish(
        &mut self,
        pid: i32,
        payload: u64,
        payload_size: u32,
        syscalls: Syscalls,
        #[cfg(feature = "alloc")] owned: Option<Owned>,
    ) -> Result<Handle, Error> {
        let (mapping, monotonic_published_at_ns, named) =
            publish_mapping(payload, payload_size, &syscalls)?;
        let id = self.last_id + 1;
        self.last_id = id;
        if let Some(marker) = self.fork_marker() {
            marker.set(id);
        }
        let handle = Handle {
            id,
            pid,
            address: mapping.address(),
            mapping_len: mapping.len(),
            backing: mapping.backing(),
        };
        self.live = Some(Live {
            id,
            pid,
            mapping,
            monotonic_published_at_ns,
            named,
            syscalls,
            #[cfg(feature = "alloc")]
            owned,
        });
        Ok(handle)
    }
}

impl Live {
    /// Update steps 2 to 7: points the header at the encoded payload at `payload`
    /// (`payload_size` bytes, which stay where they are until the next switch or the
    /// withdrawal), with a timestamp strictly after the previous one. The previous payload
    /// may be released once this returns, not before.
    fn switch_payload(&mut self, payload: u64, payload_size: u32) {
        // Step 6's timestamp, strictly after the previous one.
        let monotonic_published_at_ns = next_timestamp(self.monotonic_published_at_ns);
        // Steps 2 to 6: timestamp 0, barrier, new pointer and size, barrier, new timestamp.
        update_header(
            &self.mapping,
            payload_size,
            payload,
            monotonic_published_at_ns,
        );
        // Step 7: name the mapping again, unconditionally.
        self.named = name_mapping(&self.mapping, &self.syscalls).is_ok();
        self.monotonic_published_at_ns = monotonic_published_at_ns;
    }

    /// The update protocol of a [`Publisher`]: replaces the resource and the extra
    /// attributes, with `reference` (if any) applied to them. On error nothing was changed.
    #[cfg(feature = "alloc")]
    fn update(
        &mut self,
        resource: Resource,
        attributes: Attributes,
        reference: Option<&ThreadReference>,
    ) -> Result<(), Error> {
        let attributes = match reference {
            Some(reference) => reference.apply(attributes),
            None => attributes,
        };
        // Step 1: encode the new payload.
        let Encoded {
            payload,
            resource,
            attributes,
        } = encode_payload(resource, attributes)?;
        self.switch_payload(payload.as_ptr() as u64, payload_size(&payload));
        // Only now, after the new timestamp, the old payload may go.
        let old = self.owned.replace(Owned {
            payload,
            resource,
            attributes,
        });
        drop(old);
        Ok(())
    }

    /// Unpublish: timestamp 0, barrier, unmap; the payload is released after (a heap
    /// payload freed here, a buffer given back by its publisher's caller).
    fn withdraw(self) -> Result<(), Error> {
        let Self { mapping, .. } = self;
        // Steps 1 and 2: timestamp 0, and a barrier that orders it before the unmap and
        // the payload's release.
        withdraw_header(&mapping);
        // Step 3: unmap. Step 4, the release of the payload, which nothing points to any
        // more, follows: a heap payload is dropped with the rest of `self` on return.
        mapping.unmap()
    }

    /// Drops an inherited publication without touching its mapping.
    fn abandon(self) {
        self.mapping.abandon();
    }
}

/// What a publisher holds of its publication: its id (publications are told apart by it,
/// see [`Process::last_id`]) and what does not change while it lives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handle {
    /// The publication this handle is for.
    id: u64,
    /// The publishing process, to report a forked child.
    pid: i32,
    address: usize,
    mapping_len: usize,
    backing: Backing,
}

impl Handle {
    /// Calls `f` with the lock held and the publication of this handle, if it is this
    /// process's own (fails with [`Error::InheritedAcrossFork`] in a forked child).
    fn with_own<R>(&self, f: impl FnOnce(&mut Live) -> Result<R, Error>) -> Result<R, Error> {
        let mut process = PROCESS.lock();
        let process = &mut *process;
        let marker = &process.fork_marker;
        match process.live.as_mut() {
            Some(live) if live.id == self.id && is_own(marker, live) => f(live),
            _ => Err(Error::InheritedAcrossFork {
                publisher_pid: self.pid,
                current_pid: current_pid(),
            }),
        }
    }

    /// Withdraws the publication of this handle: timestamp 0, barrier, unmap. In a forked
    /// child, which never had the mapping, it only forgets it.
    fn withdraw(&self) -> Result<(), Error> {
        let mut process = PROCESS.lock();
        let Some(live) = process.live.take_if(|live| live.id == self.id) else {
            // In a forked child that published its own context since: not this handle's.
            return Ok(());
        };
        if is_own(&process.fork_marker, &live) {
            live.withdraw()
        } else {
            live.abandon();
            Ok(())
        }
    }

    /// Calls `f` with the publication of this handle, if it is still in this process (in
    /// a forked child: until the child publishes its own).
    fn with_live<R>(&self, f: impl FnOnce(&Live) -> R) -> Option<R> {
        let process = PROCESS.lock();
        process
            .live
            .as_ref()
            .filter(|live| live.id == self.id)
            .map(f)
    }

    fn is_inherited(&self) -> bool {
        let process = PROCESS.lock();
        match process.live.as_ref().filter(|live| live.id == self.id) {
            Some(live) => !is_own(&process.fork_marker, live),
            None => true,
        }
    }

    fn is_named(&self) -> bool {
        self.with_live(|live| live.named).unwrap_or(false)
    }

    fn monotonic_published_at_ns(&self) -> u64 {
        self.with_live(|live| live.monotonic_published_at_ns)
            .unwrap_or(0)
    }

    fn header(&self) -> Option<ProcessContextHeader> {
        let process = PROCESS.lock();
        process
            .live
            .as_ref()
            .filter(|live| live.id == self.id && is_own(&process.fork_marker, live))
            .map(|live| live.mapping.header())
    }
}

/// The publication primitives without a heap, for `BufferPublisher`: the caller encodes
/// each payload into memory that stays put until the next switch or the withdrawal.
pub(crate) mod raw {
    use super::{Handle, Process, Syscalls, PROCESS};
    use crate::process::Error;
    use otel_ctx_codec::header::ProcessContextHeader;

    /// Publish steps 1 to 9 for the encoded payload at `payload`, made by `encode` once
    /// the singleton check passed.
    pub(crate) fn publish(
        syscalls: Syscalls,
        encode: impl FnOnce() -> Result<(u64, u32), Error>,
    ) -> Result<Handle, Error> {
        let mut process = PROCESS.lock();
        let process: &mut Process = &mut process;
        let pid = process.begin_publish()?;
        let (payload, payload_size) = encode()?;
        process.finish_publish(
            pid,
            payload,
            payload_size,
            syscalls,
            #[cfg(feature = "alloc")]
            None,
        )
    }

    /// Update steps 2 to 7 for the publication of `handle`, to the payload `encode` makes
    /// (called only once the publication is known to be this process's own).
    pub(crate) fn switch(
        handle: &Handle,
        encode: impl FnOnce() -> Result<(u64, u32), Error>,
    ) -> Result<(), Error> {
        handle.with_own(|live| {
            let (payload, payload_size) = encode()?;
            live.switch_payload(payload, payload_size);
            Ok(())
        })
    }

    /// Unpublish steps 1 to 3 for the publication of `handle`.
    pub(crate) fn withdraw(handle: &Handle) -> Result<(), Error> {
        handle.withdraw()
    }

    /// Whether `handle`'s publication is not this process's (inherited across a fork).
    pub(crate) fn is_inherited(handle: &Handle) -> bool {
        handle.is_inherited()
    }

    /// The header of `handle`'s publication, in this process.
    pub(crate) fn header(handle: &Handle) -> Option<ProcessContextHeader> {
        handle.header()
    }

    /// The timestamp of `handle`'s publication.
    pub(crate) fn monotonic_published_at_ns(handle: &Handle) -> u64 {
        handle.monotonic_published_at_ns()
    }

    /// Whether the last naming of `handle`'s mapping succeeded.
    pub(crate) fn is_named(handle: &Handle) -> bool {
        handle.is_named()
    }

    /// The mapping's address, length and backing.
    pub(crate) fn mapping(handle: &Handle) -> (usize, usize, crate::process::Backing) {
        (handle.address, handle.mapping_len, handle.backing)
    }
}

/// Publish, steps 1 to 9; with `announce`, with [`ThreadReference::announced`] when the
/// process has no reference data yet.
#[cfg(feature = "alloc")]
fn publish(
    resource: Resource,
    attributes: Attributes,
    syscalls: Syscalls,
    announce: bool,
) -> Result<Publisher, Error> {
    let mut process = PROCESS.lock();
    let process = &mut *process;
    let pid = process.begin_publish()?;
    let announced = match (&process.thread_reference, announce) {
        (None, true) => Some(ThreadReference::announced()),
        _ => None,
    };
    let attributes = match process.thread_reference.as_ref().or(announced.as_ref()) {
        Some(reference) => reference.apply(attributes),
        None => attributes,
    };
    // Step 6 (encode) comes first: a payload readers would refuse leaves nothing
    // behind, and the encoding is not visible to anyone before the header is written.
    let Encoded {
        payload,
        resource,
        attributes,
    } = encode_payload(resource, attributes)?;
    // The heap block does not move when the box does.
    let (address, size) = (payload.as_ptr() as u64, payload_size(&payload));
    let handle = process.finish_publish(
        pid,
        address,
        size,
        syscalls,
        Some(Owned {
            payload,
            resource,
            attributes,
        }),
    )?;
    if announced.is_some() {
        process.thread_reference = announced;
    }
    Ok(Publisher { handle })
}

/// Sets the thread-context reference data (OTEP 4947) of this process:
/// `threadlocal.schema_version = schema_version` and `threadlocal.attribute_key_map =
/// key_map` (position `i` names key index `i`), in the extra attributes (field 2) of every
/// publication from now on, replacing any value the caller gave these two keys.
///
/// Whichever publisher the process uses: the context published now, by a standalone
/// [`Publisher`] or through `process::global`, is updated at once; otherwise the data is
/// published with the next publish. `thread::register` calls this with the whole key map
/// each time it registers new names.
///
/// The key map is append-only: fails with [`Error::KeyMapNotAppendOnly`] if a name
/// already set changes or disappears, and with [`Error::KeyMapTooLong`] beyond 256 names;
/// and with the errors of [`Publisher::update`] when the new payload cannot be published.
/// On error nothing was changed.
#[cfg(feature = "alloc")]
pub fn set_thread_reference_data(schema_version: &str, key_map: &[&str]) -> Result<(), Error> {
    let mut process = PROCESS.lock();
    let next =
        ThreadReference::replacing(process.thread_reference.as_ref(), schema_version, key_map)?;
    process.set_thread_reference(next)
}

/// Announces the thread contexts of this process to readers: unless reference data is
/// already set, sets `threadlocal.schema_version = "tlsdesc_v1_dev"` with an empty
/// `threadlocal.attribute_key_map`, as [`set_thread_reference_data`] does (now, or with
/// the next publish).
///
/// A reader that follows OTEP 4947 looks for the `otel_thread_ctx_v1` slot only once the
/// process context has `threadlocal.schema_version`. `process::global::publish` announces
/// the thread contexts itself, and registering an attribute key announces them too; a
/// process that publishes with a standalone [`Publisher`] and attaches thread contexts
/// without registering any key calls this (before or after publishing).
#[cfg(feature = "alloc")]
pub fn announce_thread_contexts() -> Result<(), Error> {
    let mut process = PROCESS.lock();
    if process.thread_reference.is_some() {
        return Ok(());
    }
    process.set_thread_reference(ThreadReference::announced())
}

/// The handle of this process's context, returned by [`Publisher::publish`]: the right to
/// update and withdraw it.
///
/// Not `Clone`: holding the publisher is holding the right to write. Dropping it
/// unpublishes (errors ignored); [`Publisher::unpublish`] reports them.
///
/// The publication itself is process-wide (the context is a singleton), so that the thread
/// reference data ([`set_thread_reference_data`], `thread::register`) reaches it too;
/// the accessors return copies of it.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct Publisher {
    handle: Handle,
}

#[cfg(feature = "alloc")]
impl Publisher {
    /// Publishes `resource` and the extra `attributes` (field 2 of the payload) as this
    /// process's context, with the thread reference data if the process has set any
    /// ([`set_thread_reference_data`]).
    ///
    /// Fails with [`Error::AlreadyPublished`] while another publisher is alive in this
    /// process, with [`Error::PayloadTooLarge`] or [`Error::Unreadable`] for a payload
    /// readers would refuse, and with [`Error::Undiscoverable`] when neither a memfd nor a
    /// named anonymous mapping is available. Nothing is left behind on error.
    pub fn publish(resource: Resource, attributes: Attributes) -> Result<Self, Error> {
        publish(resource, attributes, Syscalls::default(), false)
    }

    /// [`publish`](Self::publish), with `memfd_create` and the naming `prctl` replaced:
    /// lets tests take the branches of kernels and sandboxes they do not run on (feature
    /// `test-seams`, which only this crate's tests turn on).
    #[cfg(feature = "test-seams")]
    pub fn publish_with_syscalls(
        resource: Resource,
        attributes: Attributes,
        syscalls: Syscalls,
    ) -> Result<Self, Error> {
        publish(resource, attributes, syscalls, false)
    }

    /// [`publish`](Self::publish), announcing the thread contexts
    /// ([`announce_thread_contexts`]) in the same publication.
    #[cfg(feature = "std")]
    pub(crate) fn publish_announcing(
        resource: Resource,
        attributes: Attributes,
    ) -> Result<Self, Error> {
        publish(resource, attributes, Syscalls::default(), true)
    }

    /// Replaces the published resource and extra attributes, following the update
    /// protocol; the thread reference data, if set, is published with them. On error
    /// nothing was changed.
    ///
    /// Fails with [`Error::InheritedAcrossFork`] in a forked child.
    pub fn update(&mut self, resource: Resource, attributes: Attributes) -> Result<(), Error> {
        let mut process = PROCESS.lock();
        let process = &mut *process;
        let reference = process.thread_reference.as_ref();
        let marker = &process.fork_marker;
        match process.live.as_mut() {
            Some(live) if live.id == self.handle.id && is_own(marker, live) => {
                live.update(resource, attributes, reference)
            }
            _ => Err(self.inherited()),
        }
    }

    /// [`update`](Self::update) with a copy of the current resource and extra attributes,
    /// as changed by `change`.
    pub fn update_with(
        &mut self,
        change: impl FnOnce(&mut Resource, &mut Attributes),
    ) -> Result<(), Error> {
        // `change` runs without the lock held: it may call into this crate (register a
        // key, read the context).
        let (mut resource, mut attributes) = self.handle.with_own(|live| {
            let owned = live.owned.as_ref().ok_or(Error::NotPublished)?;
            Ok((owned.resource.clone(), owned.attributes.clone()))
        })?;
        change(&mut resource, &mut attributes);
        self.update(resource, attributes)
    }

    /// Withdraws the context: timestamp 0, barrier, unmap, free the payload.
    ///
    /// In a forked child, which never had the mapping, this only frees the child's copy
    /// of the payload and succeeds.
    pub fn unpublish(self) -> Result<(), Error> {
        // Withdrawn here: the drop would only find nothing left to withdraw.
        let mut this = ManuallyDrop::new(self);
        this.withdraw()
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        self.handle.withdraw()
    }

    fn inherited(&self) -> Error {
        Error::InheritedAcrossFork {
            publisher_pid: self.handle.pid,
            current_pid: current_pid(),
        }
    }

    /// Calls `f` with what this handle published, if it is still in this process (in a
    /// forked child: until the child publishes its own).
    fn with_owned<R>(&self, f: impl FnOnce(&Owned) -> R) -> Option<R> {
        self.handle
            .with_live(|live| live.owned.as_ref().map(f))
            .flatten()
    }

    /// Whether this publisher was inherited by a forked child (this process is not the
    /// one that published, and has no context mapping), even one with the publisher's pid
    /// in another PID namespace.
    pub fn is_inherited(&self) -> bool {
        self.handle.is_inherited()
    }

    /// The process that published the context (its pid in its own PID namespace).
    pub fn pid(&self) -> i32 {
        self.handle.pid
    }

    /// A copy of the published resource.
    pub fn resource(&self) -> Resource {
        self.with_owned(|owned| owned.resource.clone())
            .unwrap_or_default()
    }

    /// A copy of the published extra attributes (field 2 of the payload), the thread
    /// reference data included.
    pub fn attributes(&self) -> Attributes {
        self.with_owned(|owned| owned.attributes.clone())
            .unwrap_or_default()
    }

    /// The published `monotonic_published_at_ns`.
    pub fn monotonic_published_at_ns(&self) -> u64 {
        self.handle.monotonic_published_at_ns()
    }

    /// A copy of the encoded payload the header points to.
    pub fn payload(&self) -> Vec<u8> {
        self.with_owned(|owned| owned.payload.to_vec())
            .unwrap_or_default()
    }

    /// Address of the mapping (and of the header at its start) in this process.
    pub fn address(&self) -> usize {
        self.handle.address
    }

    /// Length of the mapping in bytes.
    pub fn mapping_len(&self) -> usize {
        self.handle.mapping_len
    }

    /// What backs the mapping.
    pub fn backing(&self) -> Backing {
        self.handle.backing
    }

    /// Whether the last naming `prctl` succeeded: the mapping then shows as
    /// `[anon:OTEL_CTX]` or `[anon_shmem:OTEL_CTX]` in `/proc/<pid>/maps`; otherwise a
    /// memfd-backed one shows as `/memfd:OTEL_CTX (deleted)`.
    pub fn is_named(&self) -> bool {
        self.handle.is_named()
    }

    /// The header as it is in the mapping now, read with atomic loads; `None` in a forked
    /// child, which does not have the mapping.
    pub fn header(&self) -> Option<ProcessContextHeader> {
        self.handle.header()
    }
}

#[cfg(feature = "alloc")]
impl Drop for Publisher {
    fn drop(&mut self) {
        // Unpublishing is optional at shutdown, and a failed munmap leaves only a
        // withdrawn (timestamp 0) page behind.
        let _ = self.withdraw();
    }
}

#[cfg(feature = "alloc")]
/// `payload.len()` as the header's `u32`; [`encode_payload`] never returns more than
/// 65536 bytes.
fn payload_size(payload: &[u8]) -> u32 {
    u32::try_from(payload.len()).unwrap_or(u32::MAX)
}

/// Publish steps 2 to 9: create, fill and name the mapping. Returns it with its timestamp
/// and whether naming worked.
fn publish_mapping(
    payload: u64,
    payload_size: u32,
    syscalls: &Syscalls,
) -> Result<(Mapping, u64, bool), Error> {
    let len = mapping_len();
    let mapping = match create_memfd(syscalls) {
        Ok(fd) => {
            size_memfd(&fd, len)?;
            let mapping = map_memfd(&fd, len)?;
            // Step 3: close the fd; the mapping keeps the memory.
            drop(fd);
            mapping
        }
        // Step 4: memfd unavailable (seccomp, old kernel, vm.memfd_noexec).
        Err(memfd_error) => map_anonymous(len, memfd_error)?,
    };
    // From here on, an error drops `mapping`, which unmaps it.
    prevent_fork_inheritance(&mapping)?;
    // Steps 6 to 8: the header fields, a barrier, the timestamp last.
    let monotonic_published_at_ns = next_timestamp(0);
    publish_header(&mapping, payload_size, payload, monotonic_published_at_ns);
    let named = name_mapping(&mapping, syscalls);
    match (mapping.backing(), named) {
        (Backing::Anonymous { memfd_error }, Err(naming)) => {
            // Nobody can find it: withdraw it before unmapping, as unpublish does.
            withdraw_header(&mapping);
            // The unmap's own error is secondary to the one reported.
            let _ = mapping.unmap();
            Err(Error::Undiscoverable {
                memfd: memfd_error,
                naming,
            })
        }
        (_, named) => Ok((mapping, monotonic_published_at_ns, named.is_ok())),
    }
}
