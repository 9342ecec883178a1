//! The one error type of the process-context writer.

#[cfg(feature = "alloc")]
use alloc::string::String;
use core::fmt;

use otel_ctx_codec::proto::{DecodeError, EncodeError};
use otel_ctx_codec::threadlocal::MAX_KEY_MAP_LEN;
use rustix::io::Errno;

/// A protocol step whose failure means no context is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ftruncate` of the new memfd to the mapping's size.
    Ftruncate,
    /// `mmap` of the memfd, or of the anonymous fallback.
    Mmap,
    /// `madvise(MADV_DONTFORK)`, which keeps forked children from inheriting the context.
    Madvise,
    /// `munmap` when unpublishing.
    Munmap,
    /// `getrandom`, for a random `service.instance.id`.
    Getrandom,
}

impl Step {
    /// The syscall of the step.
    pub const fn syscall(self) -> &'static str {
        match self {
            Self::Ftruncate => "ftruncate",
            Self::Mmap => "mmap",
            Self::Madvise => "madvise(MADV_DONTFORK)",
            Self::Munmap => "munmap",
            Self::Getrandom => "getrandom",
        }
    }
}

/// Why publishing, updating or unpublishing the process context failed.
///
/// Every message says what happened and what to do about it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The encoded payload is larger than readers accept; nothing was changed.
    PayloadTooLarge {
        /// Size of the encoded payload in bytes.
        size: usize,
        /// The readers' limit
        /// ([`MAX_PAYLOAD_SIZE`](otel_ctx_codec::header::MAX_PAYLOAD_SIZE)).
        limit: u32,
    },
    /// Readers would refuse the encoded payload (values nested too deep, or too many
    /// attributes); nothing was changed.
    Unreadable(DecodeError),
    /// The payload could not be encoded; nothing was changed.
    Encode(EncodeError),
    /// This process already has a live [`Publisher`](super::Publisher): the process context
    /// is a singleton.
    AlreadyPublished {
        /// This process's id.
        pid: i32,
    },
    /// A syscall of a protocol step failed; nothing is published.
    Syscall {
        /// The step that failed.
        step: Step,
        /// The error it returned.
        errno: Errno,
    },
    /// `memfd_create` failed, so the context went into an anonymous mapping, and naming
    /// that mapping failed too: no reader could find it, so it was unmapped.
    Undiscoverable {
        /// What `memfd_create` returned.
        memfd: Errno,
        /// What `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME)` returned.
        naming: Errno,
    },
    /// The publisher was inherited by a forked child, which does not have the context
    /// mapping (`MADV_DONTFORK`). The two pids are equal for a child in a new PID
    /// namespace that got its parent's pid.
    InheritedAcrossFork {
        /// The process that published the context.
        publisher_pid: i32,
        /// This process.
        current_pid: i32,
    },
    /// No context is published by this process.
    NotPublished,
    /// The attribute key map has more names than a `u8` key index can reach.
    KeyMapTooLong {
        /// Number of names given.
        len: usize,
    },
    /// The attribute key map changed or dropped a name already published; it may only
    /// grow at its end.
    #[cfg(feature = "alloc")]
    KeyMapNotAppendOnly {
        /// The first key index that differs.
        index: usize,
        /// The name published at that index.
        published: String,
        /// The name given now, or `None` if the new map is shorter.
        given: Option<String>,
    },
}

impl Error {
    /// A snake_case name of the error, stable across versions.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::Unreadable(_) => "unreadable",
            Self::Encode(_) => "encode",
            Self::AlreadyPublished { .. } => "already_published",
            Self::Syscall { .. } => "syscall",
            Self::Undiscoverable { .. } => "undiscoverable",
            Self::InheritedAcrossFork { .. } => "inherited_across_fork",
            Self::NotPublished => "not_published",
            Self::KeyMapTooLong { .. } => "key_map_too_long",
            #[cfg(feature = "alloc")]
            Self::KeyMapNotAppendOnly { .. } => "key_map_not_append_only",
        }
    }
}

/// Formats an errno as its symbolic name where known (`EPERM`), else its number.
pub(crate) struct ErrnoName(pub(crate) Errno);

impl fmt::Display for ErrnoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: &[(Errno, &str)] = &[
            (Errno::PERM, "EPERM"),
            (Errno::ACCESS, "EACCES"),
            (Errno::NOSYS, "ENOSYS"),
            (Errno::INVAL, "EINVAL"),
            (Errno::NOMEM, "ENOMEM"),
            (Errno::MFILE, "EMFILE"),
            (Errno::NFILE, "ENFILE"),
            (Errno::BADF, "EBADF"),
            (Errno::FAULT, "EFAULT"),
            (Errno::AGAIN, "EAGAIN"),
            (Errno::FBIG, "EFBIG"),
            (Errno::NOSPC, "ENOSPC"),
            (Errno::NODEV, "ENODEV"),
            (Errno::OPNOTSUPP, "EOPNOTSUPP"),
            (Errno::INTR, "EINTR"),
            (Errno::IO, "EIO"),
        ];
        match NAMES.iter().find(|(e, _)| *e == self.0) {
            Some((_, name)) => f.write_str(name),
            None => write!(f, "errno {}", self.0.raw_os_error()),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PayloadTooLarge { size, limit } => write!(
                f,
                "the encoded process context is {size} bytes, over the {limit}-byte limit \
                 readers accept; publish fewer or shorter attributes"
            ),
            Self::Unreadable(e) => write!(
                f,
                "readers would refuse this process context ({e}); flatten or shorten the \
                 attribute values"
            ),
            Self::Encode(e) => write!(f, "the process context could not be encoded: {e}"),
            Self::AlreadyPublished { pid } => write!(
                f,
                "process {pid} already publishes a process context, which is a singleton; \
                 change it through its Publisher (update) or unpublish it first"
            ),
            Self::Syscall { step, errno } => {
                let errno = ErrnoName(*errno);
                let syscall = step.syscall();
                match step {
                    Step::Ftruncate | Step::Mmap => write!(
                        f,
                        "{syscall} of the context mapping failed ({errno}), so no context \
                         was published; check the process's memory limits (RLIMIT_AS, \
                         RLIMIT_FSIZE, vm.max_map_count)"
                    ),
                    Step::Madvise => write!(
                        f,
                        "{syscall} failed ({errno}), so the context was not published (a \
                         forked child would inherit a stale copy of it); check that seccomp \
                         allows madvise"
                    ),
                    Step::Munmap => write!(
                        f,
                        "{syscall} of the context mapping failed ({errno}); the context was \
                         withdrawn (timestamp 0) but its mapping remains"
                    ),
                    Step::Getrandom => write!(
                        f,
                        "{syscall} failed ({errno}), so no random service.instance.id could \
                         be made; set one with ResourceBuilder::service_instance_id"
                    ),
                }
            }
            Self::Undiscoverable { memfd, naming } => write!(
                f,
                "memfd_create denied ({}), fell back to an anonymous mapping; naming it \
                 failed too ({}), so no reader can find it and nothing was published; allow \
                 memfd_create (seccomp, vm.memfd_noexec) or run a kernel with \
                 CONFIG_ANON_VMA_NAME",
                ErrnoName(*memfd),
                ErrnoName(*naming)
            ),
            Self::InheritedAcrossFork {
                publisher_pid,
                current_pid,
            } if publisher_pid == current_pid => write!(
                f,
                "this publisher belongs to process {publisher_pid} of another PID namespace; \
                 this process is a forked child with the same pid, which does not inherit \
                 the context mapping; publish a new context in the child"
            ),
            Self::InheritedAcrossFork {
                publisher_pid,
                current_pid,
            } => write!(
                f,
                "this publisher belongs to process {publisher_pid}; process {current_pid} is a \
                 forked child, which does not inherit the context mapping; publish a new \
                 context in the child"
            ),
            Self::NotPublished => {
                f.write_str("no process context is published by this process; publish one first")
            }
            Self::KeyMapTooLong { len } => write!(
                f,
                "the attribute key map has {len} names, over the {MAX_KEY_MAP_LEN} that a u8 \
                 key index can reach; register fewer keys"
            ),
            #[cfg(feature = "alloc")]
            Self::KeyMapNotAppendOnly {
                index,
                published,
                given,
            } => match given {
                Some(given) => write!(
                    f,
                    "key index {index} was published as {published:?} and is now {given:?}; \
                     the attribute key map may only grow at its end"
                ),
                None => write!(
                    f,
                    "key index {index} ({published:?}) was published and is now missing; \
                     the attribute key map may only grow at its end"
                ),
            },
        }
    }
}

impl core::error::Error for Error {}

impl From<EncodeError> for Error {
    fn from(e: EncodeError) -> Self {
        Self::Encode(e)
    }
}
