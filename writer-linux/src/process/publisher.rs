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

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::ManuallyDrop;

use otel_ctx_codec::header::ProcessContextHeader;

use super::encode::{encode_payload, Encoded};
use super::lock::Lock;
use super::mapping::{
    create_memfd, is_mapped, map_anonymous, map_memfd, mapping_len, name_mapping, next_timestamp,
    prevent_fork_inheritance, publish_header, size_memfd, update_header, withdraw_header, Backing,
    ForkMarker, Mapping, Syscalls,
};
use super::reference::ThreadReference;
use super::{Attributes, Error, Resource};

/// The process's one publication, and what every publication carries.
static PROCESS: Lock<Process> = Lock::new(Process::new());

struct Process {
    /// The publication, if any: this process's own, or after a fork the parent's, whose
    /// mapping the child does not have (see [`is_own`]).
    live: Option<Live>,
    /// The thread-context reference data, once set: part of every publication from then
    /// on.
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

/// A publication: the mapping and everything it shows.
struct Live {
    id: u64,
    /// The publishing process.
    pid: i32,
    mapping: Mapping,
    /// The encoded payload the header points to.
    payload: Box<[u8]>,
    resource: Resource,
    /// The published extra attributes, the thread reference data included.
    attributes: Attributes,
    monotonic_published_at_ns: u64,
    named: bool,
    syscalls: Syscalls,
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

/// The own publication `id`, for the handle of `publisher_pid` to change; any other
/// handle is one a forked child inherited.
fn own_live<'a>(
    live: &'a mut Option<Live>,
    marker: &Marker,
    id: u64,
    publisher_pid: i32,
) -> Result<&'a mut Live, Error> {
    match live {
        Some(live) if live.id == id && is_own(marker, live) => Ok(live),
        _ => Err(Error::InheritedAcrossFork {
            publisher_pid,
            current_pid: current_pid(),
        }),
    }
}

impl Process {
    const fn new() -> Self {
        Self {
            live: None,
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

    /// Makes `next` the reference data, updating the own publication (if any) with it
    /// first. On error nothing was changed.
    fn set_thread_reference(&mut self, next: ThreadReference) -> Result<(), Error> {
        let marker = &self.fork_marker;
        if let Some(live) = self.live.as_mut().filter(|live| is_own(marker, live)) {
            let resource = live.resource.clone();
            let attributes = live.attributes.clone();
            live.update(resource, attributes, Some(&next))?;
        }
        self.thread_reference = Some(next);
        Ok(())
    }
}

impl Live {
    /// The update protocol: replaces the resource and the extra attributes, with
    /// `reference` (if any) applied to them. On error nothing was changed.
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
        // Step 6's timestamp, strictly after the previous one.
        let monotonic_published_at_ns = next_timestamp(self.monotonic_published_at_ns);
        // Steps 2 to 6: timestamp 0, barrier, new pointer and size, barrier, new timestamp.
        update_header(
            &self.mapping,
            payload_size(&payload),
            payload.as_ptr() as u64,
            monotonic_published_at_ns,
        );
        // Step 7: name the mapping again, unconditionally.
        self.named = name_mapping(&self.mapping, &self.syscalls).is_ok();
        // Only now, after the new timestamp, the old payload may go.
        let old = core::mem::replace(&mut self.payload, payload);
        drop(old);
        self.monotonic_published_at_ns = monotonic_published_at_ns;
        self.resource = resource;
        self.attributes = attributes;
        Ok(())
    }

    /// Unpublish: timestamp 0, barrier, unmap, free the payload.
    fn withdraw(self) -> Result<(), Error> {
        let Self {
            mapping, payload, ..
        } = self;
        // Steps 1 and 2: timestamp 0, and a barrier that orders it before the unmap and
        // the payload's release.
        withdraw_header(&mapping);
        let unmapped = mapping.unmap();
        // Step 4: free the payload, which nothing points to any more.
        drop(payload);
        unmapped
    }

    /// Drops an inherited publication without touching its mapping.
    fn abandon(self) {
        self.mapping.abandon();
    }
}

/// Publish, steps 1 to 9; with `announce`, with [`ThreadReference::announced`] when the
/// process has no reference data yet.
fn publish(
    resource: Resource,
    attributes: Attributes,
    syscalls: Syscalls,
    announce: bool,
) -> Result<Publisher, Error> {
    let mut process = PROCESS.lock();
    let process = &mut *process;
    let pid = current_pid();
    // Step 1: the process context is a singleton. A publication inherited across a fork
    // is not this process's (it has no mapping), so it makes way.
    process.discard_inherited();
    if process.live.is_some() {
        return Err(Error::AlreadyPublished { pid });
    }
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
    let (mapping, monotonic_published_at_ns, named) =
        publish_mapping(&payload, payload_size(&payload), &syscalls)?;
    let id = process.last_id + 1;
    process.last_id = id;
    if let Some(marker) = process.fork_marker() {
        marker.set(id);
    }
    if announced.is_some() {
        process.thread_reference = announced;
    }
    let publisher = Publisher {
        id,
        pid,
        address: mapping.address(),
        mapping_len: mapping.len(),
        backing: mapping.backing(),
    };
    process.live = Some(Live {
        id,
        pid,
        mapping,
        payload,
        resource,
        attributes,
        monotonic_published_at_ns,
        named,
        syscalls,
    });
    Ok(publisher)
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
#[derive(Debug)]
pub struct Publisher {
    /// The publication this handle is for.
    id: u64,
    /// The publishing process, to report a forked child.
    pid: i32,
    address: usize,
    mapping_len: usize,
    backing: Backing,
}

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
        Self::publish_with_syscalls(resource, attributes, Syscalls::default())
    }

    /// [`publish`](Self::publish), with `memfd_create` and the naming `prctl` replaced:
    /// lets tests take the branches of kernels and sandboxes they do not run on.
    #[doc(hidden)]
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
        let live = own_live(&mut process.live, &process.fork_marker, self.id, self.pid)?;
        live.update(resource, attributes, process.thread_reference.as_ref())
    }

    /// [`update`](Self::update) with a copy of the current resource and extra attributes,
    /// as changed by `change`.
    pub fn update_with(
        &mut self,
        change: impl FnOnce(&mut Resource, &mut Attributes),
    ) -> Result<(), Error> {
        // `change` runs without the lock held: it may call into this crate (register a
        // key, read the context).
        let (mut resource, mut attributes) = {
            let mut process = PROCESS.lock();
            let process = &mut *process;
            let live = own_live(&mut process.live, &process.fork_marker, self.id, self.pid)?;
            (live.resource.clone(), live.attributes.clone())
        };
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

    /// Whether this publisher was inherited by a forked child (this process is not the
    /// one that published, and has no context mapping), even one with the publisher's pid
    /// in another PID namespace.
    pub fn is_inherited(&self) -> bool {
        let process = PROCESS.lock();
        match process.live.as_ref().filter(|live| live.id == self.id) {
            Some(live) => !is_own(&process.fork_marker, live),
            None => true,
        }
    }

    /// The process that published the context (its pid in its own PID namespace).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A copy of the published resource.
    pub fn resource(&self) -> Resource {
        self.with_live(|live| live.resource.clone())
            .unwrap_or_default()
    }

    /// A copy of the published extra attributes (field 2 of the payload), the thread
    /// reference data included.
    pub fn attributes(&self) -> Attributes {
        self.with_live(|live| live.attributes.clone())
            .unwrap_or_default()
    }

    /// The published `monotonic_published_at_ns`.
    pub fn monotonic_published_at_ns(&self) -> u64 {
        self.with_live(|live| live.monotonic_published_at_ns)
            .unwrap_or(0)
    }

    /// A copy of the encoded payload the header points to.
    pub fn payload(&self) -> Vec<u8> {
        self.with_live(|live| live.payload.to_vec())
            .unwrap_or_default()
    }

    /// Address of the mapping (and of the header at its start) in this process.
    pub fn address(&self) -> usize {
        self.address
    }

    /// Length of the mapping in bytes.
    pub fn mapping_len(&self) -> usize {
        self.mapping_len
    }

    /// What backs the mapping.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Whether the last naming `prctl` succeeded: the mapping then shows as
    /// `[anon:OTEL_CTX]` or `[anon_shmem:OTEL_CTX]` in `/proc/<pid>/maps`; otherwise a
    /// memfd-backed one shows as `/memfd:OTEL_CTX (deleted)`.
    pub fn is_named(&self) -> bool {
        self.with_live(|live| live.named).unwrap_or(false)
    }

    /// The header as it is in the mapping now, read with atomic loads; `None` in a forked
    /// child, which does not have the mapping.
    pub fn header(&self) -> Option<ProcessContextHeader> {
        let process = PROCESS.lock();
        process
            .live
            .as_ref()
            .filter(|live| live.id == self.id && is_own(&process.fork_marker, live))
            .map(|live| live.mapping.header())
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // Unpublishing is optional at shutdown, and a failed munmap leaves only a
        // withdrawn (timestamp 0) page behind.
        let _ = self.withdraw();
    }
}

/// `payload.len()` as the header's `u32`; [`encode_payload`] never returns more than
/// 65536 bytes.
fn payload_size(payload: &[u8]) -> u32 {
    u32::try_from(payload.len()).unwrap_or(u32::MAX)
}

/// Publish steps 2 to 9: create, fill and name the mapping. Returns it with its timestamp
/// and whether naming worked.
fn publish_mapping(
    payload: &[u8],
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
    publish_header(
        &mapping,
        payload_size,
        payload.as_ptr() as u64,
        monotonic_published_at_ns,
    );
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
