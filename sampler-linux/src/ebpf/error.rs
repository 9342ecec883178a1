//! Why the eBPF sampler cannot run, and the classification of the loader's errors.

use std::fmt;
use std::io;

/// Where the kernel exposes its BTF.
pub(super) const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// Why the eBPF sampler cannot run. The ptrace reader
/// ([`ThreadReader`](otel_ctx_reader::ThreadReader)) still works in every one of these cases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EbpfError {
    /// The kernel exposes no BTF, which the program's CO-RE relocations need.
    NoBtf,
    /// The kernel refused for lack of privilege.
    Permission {
        /// What was refused.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The program could not be loaded (the verifier's log, or a relocation the running
    /// kernel cannot satisfy).
    Load(String),
    /// A perf event could not be opened or attached.
    Attach {
        /// The CPU.
        cpu: u32,
        /// What the kernel said.
        message: String,
    },
    /// The sampling frequency is 0.
    Frequency,
    /// A map of the program could not be used, or the CPUs could not be listed.
    Setup(String),
    /// Waiting for samples failed.
    Poll(#[source] io::Error),
    /// The sampler follows as many processes as it has room for
    /// ([`EbpfOptions::max_processes`](super::EbpfOptions::max_processes)).
    TooManyProcesses {
        /// How many it has room for.
        max: usize,
    },
    /// The sampler does not follow this process.
    UnknownProcess {
        /// The process id.
        pid: u32,
    },
    /// A program could not be attached to a kernel tracepoint (the publication hook's
    /// `syscalls/sys_enter_prctl`).
    Tracepoint {
        /// The tracepoint, `category/name`.
        name: &'static str,
        /// What the kernel (or the search for tracefs) said.
        message: String,
    },
}

impl fmt::Display for EbpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBtf => write!(
                f,
                "the eBPF sampler needs the kernel's BTF ({BTF_PATH} is missing: a kernel \
                 built without CONFIG_DEBUG_INFO_BTF); sample with ptrace instead (--sampler ptrace)"
            ),
            Self::Permission { what, source } => write!(
                f,
                "the kernel refused to {what} ({source}): the eBPF sampler needs root, or \
                 CAP_BPF and CAP_PERFMON; sample with ptrace instead (--sampler ptrace)"
            ),
            Self::Load(message) => write!(
                f,
                "the kernel did not accept the eBPF sampler: {message}; sample with ptrace \
                 instead (--sampler ptrace)"
            ),
            Self::Attach { cpu, message } => write!(
                f,
                "cannot attach the eBPF sampler to a CPU-clock perf event on CPU {cpu}: \
                 {message} (a frequency above kernel.perf_event_max_sample_rate is refused \
                 too)"
            ),
            Self::Frequency => write!(f, "the sampling frequency must be at least 1 Hz"),
            Self::Setup(message) => write!(f, "cannot set up the eBPF sampler: {message}"),
            Self::Poll(e) => write!(f, "waiting for eBPF samples failed: {e}"),
            Self::TooManyProcesses { max } => write!(
                f,
                "the eBPF sampler already follows {max} processes, as many as it has room for"
            ),
            Self::UnknownProcess { pid } => {
                write!(f, "the eBPF sampler does not follow process {pid}")
            }
            Self::Tracepoint { name, message } => {
                write!(f, "cannot attach to the tracepoint {name}: {message}")?;
                if message.contains("tracefs") {
                    f.write_str(
                        " (tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing)",
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// The error's message followed by its sources', and the first OS error among them.
pub(super) fn explain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> (String, Option<&'a io::Error>) {
    let mut message = error.to_string();
    let mut os = None;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if os.is_none() {
            os = e.downcast_ref::<io::Error>();
        }
        if !std::ptr::eq(e, error) {
            let part = e.to_string();
            if !message.contains(&part) {
                message.push_str(": ");
                message.push_str(&part);
            }
        }
        next = e.source();
    }
    (message, os)
}

pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

/// Classifies a loader error: privilege, or anything else the kernel said.
pub(super) fn load_error(what: &str, error: &(dyn std::error::Error + 'static)) -> EbpfError {
    let (message, os) = explain(error);
    match os {
        Some(e) if is_permission(e) => EbpfError::Permission {
            what: what.to_owned(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EPERM)),
        },
        _ => EbpfError::Load(format!("{what}: {message}")),
    }
}
