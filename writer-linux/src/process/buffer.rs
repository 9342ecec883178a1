//! Publishing without a heap: the payload is encoded into buffers the caller provides.

use otel_ctx_codec::header::ProcessContextHeader;
use otel_ctx_codec::proto::ProcessContext;

use super::encode::encode_into;
use super::mapping::Syscalls;
use super::publisher::{raw, Handle};
use super::{Backing, Error};

/// The publisher of this process's context from two caller-provided buffers, with no
/// allocation: for runtimes without a heap (or without libc), and for code that must not
/// allocate.
///
/// Each publish or update encodes the context (the codec's borrowed
/// [`ProcessContext`]) into the buffer the header does not point at, then switches the
/// header to it following the update protocol; the other buffer is then free for the next
/// update. So a reader never sees a payload change under it, just as with the heap
/// [`Publisher`](super::Publisher), which is built on the same publication core (the
/// mapping, the protocol steps, the singleton, the fork handling).
///
/// The payload is exactly what the caller encodes: a process that attaches thread contexts
/// puts the reference data in the extra attributes itself, for example with
/// [`KeyMap::reference_data`](crate::thread::KeyMap::reference_data). (The reference data
/// of `thread::register` and `set_thread_reference_data`, with `alloc`, reaches only a
/// heap [`Publisher`](super::Publisher).)
///
/// ```no_run
/// use otel_ctx_writer::process::{AnyValue, BufferPublisher, KeyValue, ProcessContext};
///
/// static mut FIRST: [u8; 1024] = [0; 1024];
/// static mut SECOND: [u8; 1024] = [0; 1024];
/// // SAFETY: the only references ever made to the two buffers.
/// let (first, second) = unsafe {
///     (
///         &mut *core::ptr::addr_of_mut!(FIRST),
///         &mut *core::ptr::addr_of_mut!(SECOND),
///     )
/// };
/// let mut publisher = BufferPublisher::new(first, second);
/// let resource = [KeyValue { key: "service.name", value: AnyValue::String("checkout") }];
/// publisher.publish(&ProcessContext { resource: &resource, attributes: &[] })?;
/// # Ok::<(), otel_ctx_writer::process::Error>(())
/// ```
///
/// The process context is a singleton: publishing fails with [`Error::AlreadyPublished`]
/// while another publisher of either kind holds it. Dropping the publisher unpublishes.
#[derive(Debug)]
pub struct BufferPublisher {
    buffers: [&'static mut [u8]; 2],
    /// The publication, the buffer its header points at, and the payload's size there.
    published: Option<(Handle, usize, u32)>,
    syscalls: Syscalls,
}

impl BufferPublisher {
    /// A publisher that encodes each payload into one of these two buffers (each must hold
    /// the largest payload it will publish, at most 64 KiB). Nothing is published yet.
    pub fn new(first: &'static mut [u8], second: &'static mut [u8]) -> Self {
        Self {
            buffers: [first, second],
            published: None,
            syscalls: Syscalls::default(),
        }
    }

    /// [`new`](Self::new), with `memfd_create` and the naming `prctl` replaced: lets tests
    /// take the branches of kernels and sandboxes they do not run on (feature `test-seams`,
    /// which only this crate's tests turn on).
    #[cfg(feature = "test-seams")]
    pub fn with_syscalls(
        first: &'static mut [u8],
        second: &'static mut [u8],
        syscalls: Syscalls,
    ) -> Self {
        let mut publisher = Self::new(first, second);
        publisher.syscalls = syscalls;
        publisher
    }

    /// Publishes `context` as this process's context (protocol steps 1 to 9).
    ///
    /// Fails with [`Error::AlreadyPublished`] while this or another publisher holds the
    /// context, with [`Error::Encode`] when the payload does not fit in a buffer, with
    /// [`Error::PayloadTooLarge`] or [`Error::Unreadable`] for a payload readers would
    /// refuse, and with the errors of the mapping's system calls. Nothing is published
    /// on error.
    pub fn publish(&mut self, context: &ProcessContext<'_>) -> Result<(), Error> {
        self.forget_inherited();
        if self.published.is_some() {
            return Err(Error::AlreadyPublished {
                pid: rustix::process::getpid().as_raw_nonzero().get(),
            });
        }
        let buffer = &mut *self.buffers[0];
        let mut size = 0;
        let handle = raw::publish(self.syscalls, || {
            size = encode_into(context, buffer)?;
            Ok((buffer.as_ptr() as u64, size))
        })?;
        self.published = Some((handle, 0, size));
        Ok(())
    }

    /// Replaces the published context with `context` (the update protocol). On error the
    /// published context is unchanged.
    ///
    /// Fails with [`Error::NotPublished`] when this publisher publishes nothing, with
    /// [`Error::InheritedAcrossFork`] in a forked child, and as
    /// [`publish`](Self::publish) for a payload that cannot be published.
    pub fn update(&mut self, context: &ProcessContext<'_>) -> Result<(), Error> {
        let Some((handle, current, _)) = self.published else {
            return Err(Error::NotPublished);
        };
        let next = 1 - current;
        // The buffer the header does not point at: no reader looks at it.
        let buffer = &mut *self.buffers[next];
        let mut size = 0;
        raw::switch(&handle, || {
            size = encode_into(context, buffer)?;
            Ok((buffer.as_ptr() as u64, size))
        })?;
        self.published = Some((handle, next, size));
        Ok(())
    }

    /// Withdraws the context (timestamp 0, barrier, unmap). Publishing again afterwards
    /// is allowed. Does nothing when nothing is published; in a forked child, which never
    /// had the mapping, it only forgets the publication.
    pub fn unpublish(&mut self) -> Result<(), Error> {
        match self.published.take() {
            Some((handle, _, _)) => raw::withdraw(&handle),
            None => Ok(()),
        }
    }

    /// Whether this publisher publishes this process's context now (a publication
    /// inherited across a fork does not count).
    pub fn is_published(&self) -> bool {
        self.published
            .as_ref()
            .is_some_and(|(handle, _, _)| !raw::is_inherited(handle))
    }

    /// The encoded payload the header points to, when published.
    pub fn payload(&self) -> Option<&[u8]> {
        let (_, current, size) = self.published.as_ref()?;
        self.buffers[*current].get(..*size as usize)
    }

    /// The header as it is in the mapping now, read with atomic loads; `None` when nothing
    /// is published, or in a forked child.
    pub fn header(&self) -> Option<ProcessContextHeader> {
        raw::header(&self.published.as_ref()?.0)
    }

    /// The address, length and backing of the mapping, when published.
    pub fn mapping(&self) -> Option<(usize, usize, Backing)> {
        Some(raw::mapping(&self.published.as_ref()?.0))
    }

    /// The published `monotonic_published_at_ns` (0 when nothing is published).
    pub fn monotonic_published_at_ns(&self) -> u64 {
        self.published
            .as_ref()
            .map_or(0, |(handle, _, _)| raw::monotonic_published_at_ns(handle))
    }

    /// Whether the last naming `prctl` of the mapping succeeded.
    pub fn is_named(&self) -> bool {
        self.published
            .as_ref()
            .is_some_and(|(handle, _, _)| raw::is_named(handle))
    }

    /// Forgets a publication inherited across a fork, so that the child may publish.
    fn forget_inherited(&mut self) {
        if self
            .published
            .as_ref()
            .is_some_and(|(handle, _, _)| raw::is_inherited(handle))
        {
            self.published = None;
        }
    }
}

impl Drop for BufferPublisher {
    fn drop(&mut self) {
        // Unpublishing is optional at shutdown, and a failed munmap leaves only a
        // withdrawn (timestamp 0) page behind.
        let _ = self.unpublish();
    }
}
