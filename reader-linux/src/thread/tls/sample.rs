//! Reading one stopped thread's context: slot, pointer, record header, attrs-data.

use std::fmt;

use otel_ctx_codec::record::{RecordHeader, RECORD_ALIGN, RECORD_HEADER_SIZE};

use super::ptrace::{PtraceError, StoppedThread};
use super::resolve::{Resolution, TargetMemory, TlsError};

/// What a thread's slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// The thread has no TLS block for the module yet (it started before the module
    /// was loaded and never touched the variable): no context.
    NoTlsBlock,
    /// The slot is NULL: no context.
    Null,
    /// The slot points at a record whose `valid` is not 1: no context.
    Invalid {
        /// The record's address.
        address: u64,
        /// Its `valid` byte.
        valid: u8,
    },
    /// A valid record.
    Record(ThreadRecord),
}

/// A valid record copied out of the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Address of the record in the target.
    pub address: u64,
    /// The fixed 28 bytes.
    pub header: RecordHeader,
    /// Exactly `attrs_data_size` bytes.
    pub attrs_data: Vec<u8>,
}

/// One thread's context as read while it was stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadSample {
    /// Thread pointer.
    pub thread_pointer: u64,
    /// Address of the slot (`None` without a TLS block).
    pub slot: Option<u64>,
    /// What the slot held.
    pub state: SlotState,
}

/// Why a thread's context could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SampleError {
    /// Stopping the thread or reading its registers failed.
    Ptrace(#[source] PtraceError),
    /// Computing the slot address failed.
    Tls(#[source] TlsError),
    /// The slot points at an address that is not 2-aligned.
    Misaligned {
        /// The pointer.
        address: u64,
    },
    /// The record is larger than the reader's bound.
    RecordTooLarge {
        /// Its declared size.
        size: usize,
        /// The bound.
        limit: usize,
    },
    /// The slot or record could not be copied (unmapped pointer, process gone).
    Memory {
        /// What was read.
        what: &'static str,
        /// Where.
        address: u64,
        /// The error.
        source: std::io::Error,
    },
}

impl SampleError {
    /// A snake_case name of the error, stable for scripts and JSON: `thread_gone`,
    /// `ptrace_denied`, `traced` (another tracer holds the thread), `ptrace`, `tls`,
    /// `misaligned`, `record_too_large` or `memory`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Ptrace(PtraceError::Gone) => "thread_gone",
            Self::Ptrace(PtraceError::Denied { .. }) => "ptrace_denied",
            Self::Ptrace(PtraceError::Traced { .. }) => "traced",
            Self::Ptrace(_) => "ptrace",
            Self::Tls(_) => "tls",
            Self::Misaligned { .. } => "misaligned",
            Self::RecordTooLarge { .. } => "record_too_large",
            Self::Memory { .. } => "memory",
        }
    }
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ptrace(e) => e.fmt(f),
            Self::Tls(e) => e.fmt(f),
            Self::Misaligned { address } => write!(
                f,
                "the slot points at {address:#x}, not {RECORD_ALIGN}-aligned as records must be"
            ),
            Self::RecordTooLarge { size, limit } => write!(
                f,
                "the record declares {size} bytes, over the {limit}-byte bound of this reader"
            ),
            Self::Memory {
                what,
                address,
                source,
            } => write!(f, "cannot read {what} at {address:#x}: {source}"),
        }
    }
}

impl From<PtraceError> for SampleError {
    fn from(e: PtraceError) -> Self {
        Self::Ptrace(e)
    }
}

impl From<TlsError> for SampleError {
    fn from(e: TlsError) -> Self {
        Self::Tls(e)
    }
}

fn read(
    mem: &dyn TargetMemory,
    what: &'static str,
    address: u64,
    buf: &mut [u8],
) -> Result<(), SampleError> {
    mem.read_exact_at(address, buf)
        .map_err(|source| SampleError::Memory {
            what,
            address,
            source,
        })
}

/// Reads the context of `thread`, which is held stopped for the whole read.
pub fn read_stopped(
    thread: &StoppedThread,
    resolution: &Resolution,
    mem: &dyn TargetMemory,
    max_record_size: usize,
) -> Result<ThreadSample, SampleError> {
    let thread_pointer = thread.thread_pointer()?;
    let slot = resolution.slot_address(thread_pointer, mem)?;
    let state = match slot {
        None => SlotState::NoTlsBlock,
        Some(slot) => read_slot(slot, mem, max_record_size)?,
    };
    Ok(ThreadSample {
        thread_pointer,
        slot,
        state,
    })
}

/// What a slot held, with the attrs-data in the caller's buffer
/// ([`read_slot_into`]): [`SlotState`] without the allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotContents {
    /// The slot is NULL: no context.
    Null,
    /// The slot points at a record whose `valid` is not 1: no context.
    Invalid {
        /// The record's address.
        address: u64,
        /// Its `valid` byte.
        valid: u8,
    },
    /// A valid record; its attrs-data is in the buffer.
    Record {
        /// The record's address.
        address: u64,
        /// Its fixed 28 bytes.
        header: RecordHeader,
    },
}

/// Follows the slot at `slot` to its record. The caller keeps the thread stopped.
pub fn read_slot(
    slot: u64,
    mem: &dyn TargetMemory,
    max_record_size: usize,
) -> Result<SlotState, SampleError> {
    let mut attrs_data = Vec::new();
    Ok(
        match read_slot_into(slot, mem, max_record_size, &mut attrs_data)? {
            SlotContents::Null => SlotState::Null,
            SlotContents::Invalid { address, valid } => SlotState::Invalid { address, valid },
            SlotContents::Record { address, header } => SlotState::Record(ThreadRecord {
                address,
                header,
                attrs_data,
            }),
        },
    )
}

/// The attrs-data bytes read with a record's header: a record that holds no more is
/// read in one copy.
const ATTRS_WITH_HEADER: usize = 228;

/// The bytes a record's first copy takes: its header and the first 228 bytes of
/// attrs-data. A copy of them made ahead serves that copy.
pub const RECORD_FIRST_COPY: usize = RECORD_HEADER_SIZE + ATTRS_WITH_HEADER;

/// Follows the slot at `slot` to its record, copying the attrs-data into `attrs_data`
/// (cleared first; its allocation is reused, so a buffer that has held the largest record
/// allocates no more). The caller keeps the thread stopped.
pub fn read_slot_into(
    slot: u64,
    mem: &dyn TargetMemory,
    max_record_size: usize,
    attrs_data: &mut Vec<u8>,
) -> Result<SlotContents, SampleError> {
    attrs_data.clear();
    let mut word = [0u8; 8];
    read(mem, "the otel_thread_ctx_v1 slot", slot, &mut word)?;
    let address = u64::from_ne_bytes(word);
    if address == 0 {
        return Ok(SlotContents::Null);
    }
    if address % RECORD_ALIGN as u64 != 0 {
        return Err(SampleError::Misaligned { address });
    }
    // The header and, in the same copy, as many attrs-data bytes as most records hold;
    // the header alone when that copy runs into memory that is not mapped.
    let mut head = [0u8; RECORD_FIRST_COPY];
    let with_attrs = mem.read_exact_at(address, &mut head).is_ok();
    if !with_attrs {
        read(
            mem,
            "the record header",
            address,
            &mut head[..RECORD_HEADER_SIZE],
        )?;
    }
    let (head, attrs_read) = head.split_at(RECORD_HEADER_SIZE);
    let header = RecordHeader::read(head).map_err(|_| SampleError::Memory {
        what: "the record header",
        address,
        source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
    })?;
    if !header.is_valid() {
        return Ok(SlotContents::Invalid {
            address,
            valid: header.valid,
        });
    }
    let size = header.record_size();
    if size > max_record_size {
        return Err(SampleError::RecordTooLarge {
            size,
            limit: max_record_size,
        });
    }
    attrs_data.resize(size - RECORD_HEADER_SIZE, 0);
    if let Some(attrs) = attrs_read.get(..attrs_data.len()).filter(|_| with_attrs) {
        attrs_data.copy_from_slice(attrs);
    } else if !attrs_data.is_empty() {
        read(
            mem,
            "the record's attrs-data",
            address.wrapping_add(RECORD_HEADER_SIZE as u64),
            attrs_data,
        )?;
    }
    Ok(SlotContents::Record { address, header })
}
