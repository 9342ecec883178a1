//! Sampling a thread while it is held still, stopped with ptrace or blocked in a system
//! call and read without a stop, with more work done meanwhile: what that work copies of
//! the thread's memory serves the reads of the slot and the record.

use super::*;
use crate::memory::Copies;

/// The most threads whose last record [`ThreadReader`] remembers.
const MAX_RECORDS_AT: usize = 4096;

impl ThreadReader {
    /// Like [`sample_into`](Self::sample_into), with more work done while the thread is
    /// stopped: `while_stopped` gets the stopped thread and the process's memory, does
    /// its work (takes the user registers, copies the stack, walks an interpreter's
    /// frames) and returns its outcome with the thread pointer
    /// ([`StoppedThread::thread_pointer`], or the one [`StoppedThread::registers`]
    /// gives), from which the record is then read. The thread runs on once the record is
    /// copied.
    pub fn sample_stopped_into<'a, T>(
        &'a mut self,
        tid: u32,
        buffer: &'a mut RecordBuffer,
        while_stopped: impl FnOnce(&StoppedThread, &ProcessMemory) -> Result<(T, u64), SampleError>,
    ) -> Result<(T, Option<ThreadContextRef<'a>>), SampleError> {
        self.sample_stopped_over_into(tid, buffer, |stopped, memory, _| {
            let (outcome, thread_pointer) = while_stopped(stopped, memory)?;
            Ok((outcome, thread_pointer, [(0, &[][..]); 2]))
        })
    }

    /// [`sample_stopped_into`](Self::sample_stopped_into), where `while_stopped` also
    /// gets where the thread's record was at its last sample, if it had one (to copy
    /// [`RECORD_FIRST_COPY`](crate::thread::tls::RECORD_FIRST_COPY) bytes from there in
    /// the same system call as the rest), and hands back what it copied of the thread's
    /// memory: its stack, from the stack pointer up (on x86_64 a worker thread's static
    /// TLS lies at its top), and that record. The slot and the record are read from the
    /// copies where they hold them: fewer system calls, and the same bytes, the thread
    /// being stopped.
    pub fn sample_stopped_over_into<'a, 's, T>(
        &'a mut self,
        tid: u32,
        buffer: &'a mut RecordBuffer,
        while_stopped: impl FnOnce(
            &StoppedThread,
            &ProcessMemory,
            Option<u64>,
        ) -> Result<(T, u64, Copies<'s>), SampleError>,
    ) -> Result<(T, Option<ThreadContextRef<'a>>), SampleError> {
        let record_at = self.records_at.get(&tid).copied();
        let (outcome, contents) = {
            let stopped = StoppedThread::stop(tid)?;
            let (outcome, thread_pointer, copies) =
                while_stopped(&stopped, &self.memory, record_at)?;
            (
                outcome,
                self.read_over(tid, thread_pointer, copies, buffer)?,
            )
            // `stopped` is dropped here: the thread runs on.
        };
        Ok((outcome, self.named(contents, &buffer.attrs_data)))
    }

    /// [`sample_stopped_over_into`](Self::sample_stopped_over_into) without the stop, for
    /// a thread blocked in a system call whose thread pointer and registers the caller
    /// knows (from its `syscall` file, and a stop at the same point before):
    /// `while_blocked` copies what it needs, the record is read, and `unmoved` then says
    /// whether the thread stayed off its CPU all along (its count of runs unchanged, say).
    /// `Ok(None)` when it did not: what was read may be torn, and none of it is kept.
    #[allow(clippy::type_complexity)]
    pub fn sample_blocked_over_into<'a, 's, T>(
        &'a mut self,
        tid: u32,
        buffer: &'a mut RecordBuffer,
        thread_pointer: u64,
        while_blocked: impl FnOnce(&ProcessMemory, Option<u64>) -> Result<(T, Copies<'s>), SampleError>,
        unmoved: impl FnOnce() -> bool,
    ) -> Result<Option<(T, Option<ThreadContextRef<'a>>)>, SampleError> {
        let record_at = self.records_at.get(&tid).copied();
        let read = while_blocked(&self.memory, record_at).and_then(|(outcome, copies)| {
            Ok((
                outcome,
                self.read_over(tid, thread_pointer, copies, buffer)?,
            ))
        });
        if !unmoved() {
            return Ok(None);
        }
        let (outcome, contents) = read?;
        Ok(Some((outcome, self.named(contents, &buffer.attrs_data))))
    }

    /// Reads the slot at `thread_pointer`, and the record it points to, into `buffer`;
    /// from `copies` where they hold them. Remembers where thread `tid`'s record is.
    fn read_over(
        &mut self,
        tid: u32,
        thread_pointer: u64,
        copies: Copies<'_>,
        buffer: &mut RecordBuffer,
    ) -> Result<SlotContents, SampleError> {
        let memory = CopiedMemory {
            copies,
            memory: &self.memory,
        };
        let contents = match self.resolution.slot_address(thread_pointer, &memory)? {
            None => SlotContents::Null,
            Some(slot) => {
                read_slot_into(slot, &memory, self.max_record_size, &mut buffer.attrs_data)?
            }
        };
        match contents {
            SlotContents::Record { address, .. } => {
                if self.records_at.len() >= MAX_RECORDS_AT {
                    self.records_at.clear();
                }
                self.records_at.insert(tid, address);
            }
            _ => {
                self.records_at.remove(&tid);
            }
        }
        Ok(contents)
    }
}
