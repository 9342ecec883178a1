//! The one error type of the reader: each variant says what happened and what to do.

use std::fmt;
use std::io;

use otel_ctx_codec::{DecodeError, HeaderError};

use crate::denied::Refuser;

/// Why a process context could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The process has no `OTEL_CTX` mapping: it publishes no process context (or has not
    /// yet, or has unpublished it).
    NoContext {
        /// The process.
        pid: u32,
    },
    /// The kernel refused access to the process.
    PermissionDenied {
        /// The process.
        pid: u32,
        /// What was refused, such as `open /proc/1234/maps`.
        operation: String,
        /// The kernel's error.
        source: io::Error,
        /// What refused it, as far as `/proc` tells.
        refuser: Refuser,
    },
    /// No process has this id (none did when the reader looked).
    NoSuchProcess {
        /// The id.
        pid: u32,
    },
    /// The process exited (or is a zombie) before or while it was read.
    ProcessGone {
        /// The process.
        pid: u32,
    },
    /// `monotonic_published_at_ns` was 0 or changed during every attempt.
    StillUpdating {
        /// The process.
        pid: u32,
        /// Attempts made.
        attempts: u32,
    },
    /// The mapping or the payload does not follow the specification.
    Malformed {
        /// The process.
        pid: u32,
        /// What exactly is wrong.
        problem: Malformed,
    },
    /// Any other failure of a system call.
    Io {
        /// The process.
        pid: u32,
        /// What failed, such as `process_vm_readv`.
        operation: String,
        /// The kernel's error.
        source: io::Error,
    },
}

/// What is wrong with a published process context.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// The 32-byte header does not validate.
    Header(HeaderError),
    /// The payload does not decode.
    Payload(DecodeError),
    /// The header's payload pointer and size name memory the process has not mapped.
    PayloadUnmapped {
        /// The header's `payload` address.
        payload: u64,
        /// The header's `payload_size`.
        payload_size: u32,
    },
    /// The mapping is smaller than the 32-byte header.
    MappingTooSmall {
        /// Size of the mapping in bytes.
        len: u64,
    },
}

impl Malformed {
    /// A snake_case name of the problem: the codec's error kind, or `payload_unmapped` and
    /// `mapping_too_small`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Header(e) => e.kind(),
            Self::Payload(e) => e.kind(),
            Self::PayloadUnmapped { .. } => "payload_unmapped",
            Self::MappingTooSmall { .. } => "mapping_too_small",
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(e) => write!(f, "header: {e}"),
            Self::Payload(e) => write!(f, "payload: {e}"),
            Self::PayloadUnmapped {
                payload,
                payload_size,
            } => write!(
                f,
                "the payload pointer {payload:#x} (payload_size {payload_size}) points into memory the process has not mapped"
            ),
            Self::MappingTooSmall { len } => {
                write!(f, "the mapping has {len} bytes, fewer than the 32-byte header")
            }
        }
    }
}

impl Error {
    /// A snake_case name of the error, stable for scripts and JSON.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::NoContext { .. } => "no_context",
            Self::PermissionDenied { .. } => "permission_denied",
            Self::NoSuchProcess { .. } => "no_such_process",
            Self::ProcessGone { .. } => "process_gone",
            Self::StillUpdating { .. } => "still_updating",
            Self::Malformed { .. } => "malformed",
            Self::Io { .. } => "io",
        }
    }

    /// The process the error is about.
    pub const fn pid(&self) -> u32 {
        match self {
            Self::NoContext { pid }
            | Self::PermissionDenied { pid, .. }
            | Self::NoSuchProcess { pid }
            | Self::ProcessGone { pid }
            | Self::StillUpdating { pid, .. }
            | Self::Malformed { pid, .. }
            | Self::Io { pid, .. } => *pid,
        }
    }

    /// The error for a process that is not there (see
    /// [`is_gone`](crate::memory::is_gone)): [`Error::NoSuchProcess`] when `/proc` has no
    /// entry for `pid`, else [`Error::ProcessGone`] (a zombie, or a process exiting now).
    pub fn gone(pid: u32) -> Self {
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            Self::ProcessGone { pid }
        } else {
            Self::NoSuchProcess { pid }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoContext { pid } => write!(
                f,
                "process {pid} publishes no process context (no OTEL_CTX mapping in /proc/{pid}/maps); \
                 check that its OpenTelemetry SDK publishes one, or read again later"
            ),
            Self::PermissionDenied {
                pid,
                operation,
                source,
                refuser,
            } => {
                write!(
                    f,
                    "permission denied to {operation} of process {pid} ({source}): {refuser}"
                )?;
                if operation.starts_with("process_vm_readv") {
                    f.write_str(
                        "; if a seccomp filter denies process_vm_readv, read through \
                         /proc/<pid>/mem instead (ReadMethod::Auto or ReadMethod::ProcMem)",
                    )?;
                }
                Ok(())
            }
            Self::NoSuchProcess { pid } => write!(f, "no process has id {pid}"),
            Self::ProcessGone { pid } => write!(f, "process {pid} has exited"),
            Self::StillUpdating { pid, attempts } => write!(
                f,
                "process {pid} was still updating its process context after {attempts} attempts \
                 (monotonic_published_at_ns was 0 or kept changing); read again"
            ),
            Self::Malformed { pid, problem } => write!(
                f,
                "process {pid} publishes a malformed process context: {problem}; \
                 report this to the maintainers of its OpenTelemetry SDK"
            ),
            Self::Io {
                pid,
                operation,
                source,
            } => write!(f, "{operation} of process {pid} failed: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::PermissionDenied { source, .. } | Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
