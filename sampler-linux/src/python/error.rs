//! Why a process's Python frames could not be read, or one sample's.

use std::fmt;

use super::frame::MAX_PYTHON_FRAMES;
use super::offsets::PythonVersion;

/// Why a process's Python frames could not be read, or one sample's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PythonError {
    /// A module defines `_PyRuntime` but not what an interpreter has with it
    /// (`Py_Version`, `PyCode_Type`), or they say something no CPython says.
    Fake(String),
    /// A CPython this reader does not read, with the reason.
    Unsupported {
        /// The version the target's bytes say.
        version: PythonVersion,
        /// Why it is refused.
        reason: String,
    },
    /// Memory that could not be read (unmapped, or the process is gone).
    Memory {
        /// What was read.
        what: &'static str,
        /// Where.
        address: u64,
    },
    /// The thread has no `PyThreadState` (it is not a Python thread, or the list of
    /// thread states is longer than [`MAX_PYTHON_THREADS`](super::MAX_PYTHON_THREADS)).
    NoThreadState,
    /// The frame chain is longer than [`MAX_PYTHON_FRAMES`], or loops.
    Loop,
    /// What was read is not what CPython writes.
    Malformed(&'static str),
    /// The frame's code object is not a code object (its type is not `PyCode_Type`).
    NotCode {
        /// Its address.
        address: u64,
    },
    /// The code object's stamp changed since the sample: it was freed and its address
    /// reused.
    Reused {
        /// Its address.
        address: u64,
    },
    /// The frame has not started running, or is a shim (CPython's own walk skips both).
    Incomplete,
}

impl PythonError {
    /// A snake_case name, stable for summaries and JSON.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Fake(_) => "python_fake",
            Self::Unsupported { .. } => "python_unsupported",
            Self::Memory { .. } => "python_memory",
            Self::NoThreadState => "python_no_thread_state",
            Self::Loop => "python_loop",
            Self::Malformed(_) => "python_malformed",
            Self::NotCode { .. } => "python_not_code",
            Self::Reused { .. } => "python_code_reused",
            Self::Incomplete => "python_incomplete",
        }
    }
}

impl fmt::Display for PythonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fake(what) => write!(f, "not a CPython interpreter: {what}"),
            Self::Unsupported { version, reason } => write!(f, "CPython {version}: {reason}"),
            Self::Memory { what, address } => write!(f, "cannot read {what} at {address:#x}"),
            Self::NoThreadState => f.write_str("the thread has no Python thread state"),
            Self::Loop => write!(
                f,
                "the Python frame chain loops or is longer than {MAX_PYTHON_FRAMES} frames"
            ),
            Self::Malformed(what) => write!(f, "malformed Python data: {what}"),
            Self::NotCode { address } => {
                write!(
                    f,
                    "the frame's code object at {address:#x} is not a code object"
                )
            }
            Self::Reused { address } => write!(
                f,
                "the code object at {address:#x} changed since it was sampled (freed and reused)"
            ),
            Self::Incomplete => f.write_str("the frame has not started"),
        }
    }
}

impl std::error::Error for PythonError {}
