//! Why a sampler cannot start or cannot follow a process.

use otel_ctx_reader::thread::ThreadError;
use otel_ctx_reader::Error;

use crate::options::MAX_FREQUENCY_HZ;

/// Why a sampler cannot start or cannot follow a process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// The process cannot be read (gone, permission denied, ...).
    #[error(transparent)]
    Process(#[from] Error),
    /// Its thread contexts cannot be read, and it cannot be followed for its stacks
    /// either.
    #[error(transparent)]
    Thread(#[from] ThreadError),
    /// The eBPF sampler cannot run, or refused the process.
    #[cfg(feature = "ebpf")]
    #[error(transparent)]
    Ebpf(#[from] crate::ebpf::EbpfError),
    /// eBPF was asked for, and this reader was built without it.
    #[error(
        "this reader was built without the eBPF sampler: rebuild with `--features ebpf`, or \
         sample with ptrace"
    )]
    NoEbpf,
    /// The rate is 0 or above [`MAX_FREQUENCY_HZ`].
    #[error("a sampling rate of {0} Hz: use a rate between 1 and {MAX_FREQUENCY_HZ}")]
    Frequency(u32),
    /// The sampler follows as many processes as it has room for.
    #[error(
        "the sampler follows {max} processes already, as many as it has room for \
         (SamplerOptions::max_processes)"
    )]
    TooManyProcesses {
        /// How many it has room for.
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use otel_ctx_reader::thread::tls::{PtraceError, SampleError};

    #[test]
    fn every_error_says_its_source() {
        let io = || std::io::Error::from_raw_os_error(libc::EIO);
        let e = SamplerError::Thread(ThreadError::Process(Error::Io {
            pid: 7,
            operation: "read".into(),
            source: io(),
        }));
        // Transparent: the thread error's own message, and its chain down to the kernel's.
        assert!(e.to_string().contains("read of process 7 failed"), "{e}");
        let process = e.source().expect("the reader's error");
        assert!(process.to_string().contains("process 7"), "{process}");
        let kernel = process.source().expect("the kernel's error");
        assert_eq!(kernel.to_string(), io().to_string());
        let sample = SampleError::Ptrace(PtraceError::Os {
            request: "PTRACE_INTERRUPT",
            source: io(),
        });
        let ptrace = sample.source().expect("the ptrace error");
        assert!(ptrace.source().is_some(), "{ptrace}");
        assert!(SamplerError::NoEbpf.source().is_none());
    }
}
