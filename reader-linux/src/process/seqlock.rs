//! The seqlock read of a process context, OTEP 4719 "Read (external reader)" steps 3 to
//! 5: one pass, which the [`ProcessContextReader`](crate::ProcessContextReader) repeats
//! and the conformance checker runs on headers a reader would refuse.

use std::sync::atomic::{fence, Ordering};

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE, TIMESTAMP_OFFSET};

use crate::memory::{CopyError, ProcessMemory};

/// What one pass of [`read_consistent`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeqlockRead {
    /// The header's memory is not mapped (any more): unpublished, or the process is gone.
    Unmapped,
    /// `monotonic_published_at_ns` was 0: the writer is changing the context.
    Updating,
    /// The timestamp changed between the first read and the re-read: an update ran
    /// meanwhile, and what was copied may mix two versions.
    Changed,
    /// The timestamp is not later than the `since` asked about: nothing was copied past
    /// the header.
    Unchanged(ProcessContextHeader),
    /// The header and what `payload` says of the payload belong to one publication.
    Consistent {
        /// The header, whose timestamp was the same before and after the copies.
        header: ProcessContextHeader,
        /// Whether the payload was copied.
        payload: PayloadCopy,
    },
}

/// What became of the payload in a [`SeqlockRead::Consistent`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadCopy {
    /// `payload_size` bytes at `payload` are in the caller's buffer.
    Copied,
    /// `payload_size` is 0 or over the bound: nothing was copied.
    OutOfRange,
    /// The payload pointer and size name memory the process has not mapped.
    Unmapped,
}

/// One pass of the seqlock read of the header at `header_addr`: the timestamp alone, the
/// header, the payload into `payload` (resized to `payload_size`, its allocation reused;
/// only when `payload_size` is in `1..=max_payload_size`), the timestamp again.
///
/// The header's identity (signature, version) is not judged here: a reader refuses what
/// the checker wants to describe. With `since`, a timestamp at or before it is
/// [`SeqlockRead::Unchanged`] and costs two small copies.
///
/// The timestamp is read on its own before the rest of the header: one copy of the 32
/// bytes is not atomic, and takes `payload_size` (offset 12) before the timestamp
/// (offset 16); a reader preempted between the two could pair an old size with the
/// pointer and timestamp of a whole update made meanwhile, which the re-read would
/// accept. Fields copied after the lone read and before an unchanged re-read all belong
/// to that timestamp's publication.
pub fn read_consistent(
    memory: &ProcessMemory,
    header_addr: u64,
    max_payload_size: u32,
    since: Option<u64>,
    payload: &mut Vec<u8>,
) -> Result<SeqlockRead, CopyError> {
    let Some(published_at) = unmapped_as_none(read_timestamp(memory, header_addr))? else {
        return Ok(SeqlockRead::Unmapped);
    };
    if published_at == 0 {
        return Ok(SeqlockRead::Updating);
    }
    // Orders the timestamp read above before the header copy below.
    fence(Ordering::SeqCst);
    let Some(header) = unmapped_as_none(read_header(memory, header_addr))? else {
        return Ok(SeqlockRead::Unmapped);
    };
    if header.monotonic_published_at_ns != published_at {
        return Ok(SeqlockRead::Changed);
    }
    if since.is_some_and(|since| published_at <= since) {
        return Ok(SeqlockRead::Unchanged(header));
    }
    // Orders the header copy above before the payload copy below, so the payload is
    // never older than the timestamp it is checked against.
    fence(Ordering::SeqCst);
    let copy = if header.payload_size == 0 || header.payload_size > max_payload_size {
        PayloadCopy::OutOfRange
    } else {
        payload.clear();
        payload.resize(header.payload_size as usize, 0);
        match memory.read_exact(header.payload, payload) {
            Ok(()) => PayloadCopy::Copied,
            // An update may have freed the old payload after its new timestamp: the
            // re-read below tells the two apart.
            Err(CopyError::Unmapped) => PayloadCopy::Unmapped,
            Err(e) => return Err(e),
        }
    };
    // Orders the copies above before the timestamp re-read below: a writer that started
    // an update during the copies has zeroed or changed the timestamp by then.
    fence(Ordering::SeqCst);
    let Some(again) = unmapped_as_none(read_timestamp(memory, header_addr))? else {
        return Ok(SeqlockRead::Unmapped);
    };
    Ok(if again == published_at {
        SeqlockRead::Consistent {
            header,
            payload: copy,
        }
    } else {
        SeqlockRead::Changed
    })
}

/// The 32 bytes at `addr`, as a header (every bit pattern is one).
pub(crate) fn read_header(
    memory: &ProcessMemory,
    addr: u64,
) -> Result<ProcessContextHeader, CopyError> {
    let mut bytes = [0u8; HEADER_SIZE];
    memory.read_exact(addr, &mut bytes)?;
    // 32 bytes always make a header, so `read` cannot fail.
    Ok(ProcessContextHeader::read(&bytes).unwrap_or_default())
}

/// `monotonic_published_at_ns` of the header at `header_addr`, alone.
fn read_timestamp(memory: &ProcessMemory, header_addr: u64) -> Result<u64, CopyError> {
    let mut bytes = [0u8; 8];
    memory.read_exact(
        header_addr.wrapping_add(TIMESTAMP_OFFSET as u64),
        &mut bytes,
    )?;
    Ok(u64::from_ne_bytes(bytes))
}

fn unmapped_as_none<T>(r: Result<T, CopyError>) -> Result<Option<T>, CopyError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(CopyError::Unmapped) => Ok(None),
        Err(e) => Err(e),
    }
}
