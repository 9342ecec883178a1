//! The publisher: the one writer of this process's context.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicI32, Ordering};

use otel_ctx_codec::header::ProcessContextHeader;

use super::encode::{encode_payload, Encoded};
use super::mapping::{
    create_memfd, map_anonymous, map_memfd, mapping_len, name_mapping, next_timestamp,
    prevent_fork_inheritance, publish_header, size_memfd, update_header, withdraw_header, Backing,
    Mapping, Syscalls,
};
use super::{Attributes, Error, Resource};

/// The process that holds the live publisher (0: none). After a fork the child sees the
/// parent's id here, which is not its own, so the child may publish.
static PUBLISHED_BY: AtomicI32 = AtomicI32::new(0);

fn current_pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// Publish step 1: the process context is a singleton, so claim it for this process.
fn claim_singleton(pid: i32) -> Result<(), Error> {
    // The counter only arbitrates between publishers; it guards no other memory, so
    // relaxed ordering is enough.
    let mut holder = PUBLISHED_BY.load(Ordering::Relaxed);
    loop {
        if holder == pid {
            return Err(Error::AlreadyPublished { pid });
        }
        match PUBLISHED_BY.compare_exchange_weak(holder, pid, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return Ok(()),
            Err(now) => holder = now,
        }
    }
}

fn release_singleton(pid: i32) {
    // Only this process's own claim is released; ordering as in `claim_singleton`.
    let _ = PUBLISHED_BY.compare_exchange(pid, 0, Ordering::Relaxed, Ordering::Relaxed);
}

/// The one writer of this process's context, returned by [`Publisher::publish`].
///
/// Not `Clone`: holding the publisher is holding the right to write. Dropping it
/// unpublishes (errors ignored); [`Publisher::unpublish`] reports them.
#[derive(Debug)]
pub struct Publisher {
    /// `None` once unpublished.
    mapping: Option<Mapping>,
    /// The encoded payload the header points to.
    payload: Box<[u8]>,
    resource: Resource,
    attributes: Attributes,
    monotonic_published_at_ns: u64,
    named: bool,
    /// The publishing process, to recognise a forked child.
    pid: i32,
    syscalls: Syscalls,
}

impl Publisher {
    /// Publishes `resource` and the extra `attributes` (field 2 of the payload) as this
    /// process's context.
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
        // Step 6 (encode) comes first: a payload readers would refuse leaves nothing
        // behind, and the encoding is not visible to anyone before the header is written.
        let Encoded {
            payload,
            resource,
            attributes,
        } = encode_payload(resource, attributes)?;
        let payload_size = payload_size(&payload);
        let pid = current_pid();
        claim_singleton(pid)?;
        match publish_mapping(&payload, payload_size, &syscalls) {
            Ok((mapping, monotonic_published_at_ns, named)) => Ok(Self {
                mapping: Some(mapping),
                payload,
                resource,
                attributes,
                monotonic_published_at_ns,
                named,
                pid,
                syscalls,
            }),
            Err(e) => {
                release_singleton(pid);
                Err(e)
            }
        }
    }

    /// Replaces the published resource and extra attributes, following the update
    /// protocol. On error nothing was changed.
    pub fn update(&mut self, resource: Resource, attributes: Attributes) -> Result<(), Error> {
        self.check_owner()?;
        let Some(mapping) = &self.mapping else {
            return Err(Error::NotPublished);
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
            mapping,
            payload_size(&payload),
            payload.as_ptr() as u64,
            monotonic_published_at_ns,
        );
        // Step 7: name the mapping again, unconditionally.
        self.named = name_mapping(mapping, &self.syscalls).is_ok();
        // Only now, after the new timestamp, the old payload may go.
        let old = core::mem::replace(&mut self.payload, payload);
        drop(old);
        self.monotonic_published_at_ns = monotonic_published_at_ns;
        self.resource = resource;
        self.attributes = attributes;
        Ok(())
    }

    /// [`update`](Self::update) with a copy of the current resource and extra attributes,
    /// as changed by `change`.
    pub fn update_with(
        &mut self,
        change: impl FnOnce(&mut Resource, &mut Attributes),
    ) -> Result<(), Error> {
        let mut resource = self.resource.clone();
        let mut attributes = self.attributes.clone();
        change(&mut resource, &mut attributes);
        self.update(resource, attributes)
    }

    /// Withdraws the context: timestamp 0, barrier, unmap, free the payload.
    ///
    /// In a forked child, which never had the mapping, this only frees the child's copy
    /// of the payload and succeeds.
    pub fn unpublish(mut self) -> Result<(), Error> {
        self.withdraw()
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        let Some(mapping) = self.mapping.take() else {
            return Ok(());
        };
        if self.is_inherited() {
            mapping.abandon();
            return Ok(());
        }
        // Steps 1 and 2: timestamp 0, and a barrier that orders it before the unmap and
        // the payload's release.
        withdraw_header(&mapping);
        let unmapped = mapping.unmap();
        // Step 4: free the payload, which nothing points to any more.
        self.payload = Box::default();
        release_singleton(self.pid);
        unmapped
    }

    fn check_owner(&self) -> Result<(), Error> {
        let current_pid = current_pid();
        if current_pid == self.pid {
            Ok(())
        } else {
            Err(Error::InheritedAcrossFork {
                publisher_pid: self.pid,
                current_pid,
            })
        }
    }

    /// Whether this publisher was inherited by a forked child (this process is not the
    /// one that published, and has no context mapping).
    pub fn is_inherited(&self) -> bool {
        current_pid() != self.pid
    }

    /// The process that published the context.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The published resource.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The published extra attributes (field 2 of the payload).
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    /// The published `monotonic_published_at_ns`.
    pub fn monotonic_published_at_ns(&self) -> u64 {
        self.monotonic_published_at_ns
    }

    /// The encoded payload the header points to.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Address of the mapping (and of the header at its start) in this process.
    pub fn address(&self) -> usize {
        self.mapping.as_ref().map_or(0, Mapping::address)
    }

    /// Length of the mapping in bytes.
    pub fn mapping_len(&self) -> usize {
        self.mapping.as_ref().map_or(0, Mapping::len)
    }

    /// What backs the mapping.
    pub fn backing(&self) -> Backing {
        self.mapping
            .as_ref()
            .map_or(Backing::Memfd, Mapping::backing)
    }

    /// Whether the last naming `prctl` succeeded: the mapping then shows as
    /// `[anon:OTEL_CTX]` or `[anon_shmem:OTEL_CTX]` in `/proc/<pid>/maps`; otherwise a
    /// memfd-backed one shows as `/memfd:OTEL_CTX (deleted)`.
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// The header as it is in the mapping now, read with atomic loads; `None` in a forked
    /// child, which does not have the mapping.
    pub fn header(&self) -> Option<ProcessContextHeader> {
        if self.is_inherited() {
            return None;
        }
        self.mapping.as_ref().map(Mapping::header)
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
