//! What a sampler captures of a thread besides its context, for a profiler to unwind:
//! the user registers a stack walk starts from, and a copy of the top of the user stack.
//!
//! The sampler only copies; unwinding, symbols and output formats belong to the layer
//! above it (the `otel-ctx-profile` crate, or a profiler's own), so a profiler that
//! embeds the sampler brings its own.

use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::thread::tls::{SampleError, StoppedThread, RECORD_FIRST_COPY};
use otel_ctx_reader::thread::Copies;
use otel_ctx_reader::{Error, RecordBuffer, ThreadContextRef, ThreadReader, UserRegisters};

use crate::python::walk::TSTATE_HEAD;
use crate::python::{PythonError, PythonProcess, PythonStack};

/// The stack copied by default: the top 16 KiB, enough for a few dozen frames of most
/// programs, at a fixed cost per sample.
pub const DEFAULT_STACK_SIZE: usize = 16 * 1024;

/// Largest stack copy a sampler accepts (the eBPF sampler's ring-buffer record has room
/// for no more).
pub const MAX_STACK_SIZE: usize = 64 * 1024;

/// The caller's buffer for a stack copy, reused from sample to sample: its capacity is
/// the size copied, fixed when it is made, so sampling into it never allocates.
#[derive(Clone, Debug)]
pub struct StackBuffer {
    bytes: Box<[u8]>,
    len: usize,
    /// The thread's record, copied ahead with the stack (from where it was at the
    /// thread's last sample), and where from; `None` when not copied.
    record: Box<[u8; RECORD_FIRST_COPY]>,
    record_at: Option<u64>,
}

impl Default for StackBuffer {
    fn default() -> Self {
        Self::new(DEFAULT_STACK_SIZE)
    }
}

impl StackBuffer {
    /// A buffer that copies up to `size` bytes of stack (at most [`MAX_STACK_SIZE`]).
    pub fn new(size: usize) -> Self {
        Self {
            bytes: vec![0; size.min(MAX_STACK_SIZE)].into_boxed_slice(),
            len: 0,
            record: Box::new([0; RECORD_FIRST_COPY]),
            record_at: None,
        }
    }

    /// The most bytes a copy takes.
    pub fn capacity(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes of the last copy: the stack from the stack pointer up, shorter than the
    /// capacity where the stack's mapping ends first.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The whole buffer, to copy into, and then [`set_len`](Self::set_len).
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        self.len = 0;
        self.record_at = None;
        &mut self.bytes
    }

    /// What was copied of the thread's memory, each with its address: the stack (from
    /// `sp`), and the record copied ahead with it (`(0, &[])` when none was).
    pub(crate) fn copies(&self, sp: u64) -> Copies<'_> {
        let record = match self.record_at {
            Some(at) => (at, &self.record[..]),
            None => (0, &[][..]),
        };
        [(sp, self.bytes()), record]
    }

    /// Sets how many bytes the last copy filled (at most the capacity).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.bytes.len());
    }

    /// Fills the buffer from `bytes` (a copy made elsewhere, such as the eBPF sampler's
    /// ring buffer), cut to the capacity.
    pub fn copy_from(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.bytes.len());
        self.bytes[..n].copy_from_slice(&bytes[..n]);
        self.len = n;
    }
}

/// Where a thread was held for its sample: its user registers and thread pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The registers a stack walk starts from.
    pub registers: UserRegisters,
    /// `fs_base` on x86_64, `tpidr_el0` on aarch64.
    pub thread_pointer: u64,
}

impl Held {
    /// Where `stopped` is held: its registers and thread pointer, from one request.
    fn of(stopped: &StoppedThread) -> Result<Self, SampleError> {
        let (registers, thread_pointer) = stopped.registers()?;
        Ok(Self {
            registers,
            thread_pointer,
        })
    }
}

/// Takes the user registers and thread pointer of `stopped`, and copies the top of its
/// stack into `stack` ([`copy_stack`]): the stack half of every ptrace sample, with a
/// thread context or without.
fn copy_stopped_stack(
    stopped: &StoppedThread,
    memory: &ProcessMemory,
    stack: &mut StackBuffer,
    record_at: Option<u64>,
) -> Result<Held, SampleError> {
    let held = Held::of(stopped)?;
    copy_stack(held, memory, stack, None, record_at, &mut [])?;
    Ok(held)
}

/// A range to copy ahead of a thread's stack, in the same system call: its address, and
/// the buffer it goes into.
type Ahead<'b> = Option<(u64, &'b mut [u8])>;

/// Copies the top of the stack of a thread held at `held` (from the stack pointer up, at
/// most `stack`'s capacity, less where the stack's mapping ends) into `stack`; and in the
/// same system call, where the stack ends at the thread's control block, `head`, the
/// record at `record_at` (into `stack`, [`StackBuffer::copies`]) and the ranges of
/// `after`, in that order: whether `head` was copied, and how many of `after` were.
fn copy_stack(
    held: Held,
    memory: &ProcessMemory,
    stack: &mut StackBuffer,
    head: Ahead<'_>,
    record_at: Option<u64>,
    after: &mut [(u64, &mut [u8])],
) -> Result<(bool, usize), SampleError> {
    let Held {
        registers,
        thread_pointer,
    } = held;
    let sp = registers.sp;
    let read = |at: u64, into: &mut [u8]| {
        memory
            .read_prefix(at, into)
            .map_err(|e| SampleError::Memory {
                what: "the stack",
                address: at,
                source: e.into(),
            })
    };
    let capacity = stack.capacity();
    stack.spare();
    let StackBuffer {
        bytes: spare,
        record,
        record_at: record_copied,
        ..
    } = stack;
    let mut head_copied = false;
    let mut after_copied = 0;
    let copied = match below_thread_block(sp, thread_pointer, capacity) {
        Some(end) => {
            // The stack first: the ranges after it count only when it was copied whole.
            let (has_head, has_record) = (head.is_some(), record_at.is_some());
            // The stack, head and record in a fixed array: a sample without ranges after
            // them allocates nothing.
            let mut leading: [(u64, &mut [u8]); 3] = [(0, &mut []), (0, &mut []), (0, &mut [])];
            let mut count = 0;
            let record_range = record_at.map(|at| (at, &mut record[..]));
            for range in [Some((sp, &mut spare[..end + 8])), head, record_range]
                .into_iter()
                .flatten()
            {
                leading[count] = range;
                count += 1;
            }
            let whole = if count == 1 && after.is_empty() {
                0
            } else if after.is_empty() {
                memory.read_leading(&mut leading[..count])
            } else {
                let after = after.iter_mut().map(|(at, bytes)| (*at, &mut **bytes));
                let leading = leading.into_iter().take(count);
                let mut reads: Vec<(u64, &mut [u8])> = leading.chain(after).collect();
                memory.read_leading(&mut reads)
            };
            head_copied = has_head && whole >= 2;
            let record_index = 1 + usize::from(has_head);
            if has_record && whole > record_index {
                *record_copied = record_at;
            }
            after_copied = whole.saturating_sub(record_index + usize::from(has_record));
            let got = if whole >= 1 {
                end + 8
            } else {
                read(sp, &mut spare[..end + 8])?
            };
            let self_pointer = spare
                .get(end..end + 8)
                .filter(|_| got == end + 8)
                .map(|word| u64::from_ne_bytes(word.try_into().expect("8 bytes")));
            if self_pointer == Some(thread_pointer) {
                // The thread's own control block: its stack ends below it.
                end
            } else if got < end + 8 {
                got
            } else {
                got + read(sp + got as u64, &mut spare[got..])?
            }
        }
        None => read(sp, spare)?,
    };
    stack.set_len(copied);
    Ok((head_copied, after_copied))
}

/// Where a thread's stack ends in a copy of `capacity` bytes from `sp`, when its thread
/// control block is within reach: the offset of `thread_pointer` from `sp`, if the copy
/// can also take the control block's first word (`None`: copy `capacity` bytes).
///
/// On x86_64 the ELF TLS ABI (variant II) has the thread pointer point at the thread
/// control block, whose first word points at itself, with the static TLS blocks below
/// it; glibc and musl put the block and the TLS at the top of each thread's stack
/// mapping, so that thread's frames all lie below the thread pointer. A worker thread's
/// stack is often a few KiB deep: copying up to the block, where its self pointer
/// confirms it, saves copying the rest of the default 16 KiB, which holds only the TLS,
/// the guard page or another thread's memory. The main thread's TLS is not on its stack,
/// and other architectures keep the TLS above the thread pointer: they copy the whole
/// capacity.
fn below_thread_block(sp: u64, thread_pointer: u64, capacity: usize) -> Option<usize> {
    if !cfg!(target_arch = "x86_64") || thread_pointer <= sp {
        return None;
    }
    let end = usize::try_from(thread_pointer - sp).ok()?;
    (end.checked_add(8)? <= capacity).then_some(end)
}

/// Stops thread `tid` of `reader`'s process, takes its user registers, copies the top of
/// its stack (from the stack pointer up, at most `stack`'s capacity, less where the
/// stack's mapping ends) into `stack`, reads its thread context into `buffer` as
/// [`ThreadReader::sample_into`] does, and lets it go: what a profiler unwinds and
/// labels. Allocation-free as `sample_into` is.
pub fn sample_with_stack_into<'a>(
    reader: &'a mut ThreadReader,
    tid: u32,
    buffer: &'a mut RecordBuffer,
    stack: &mut StackBuffer,
) -> Result<(Held, Option<ThreadContextRef<'a>>), SampleError> {
    reader.sample_stopped_over_into(tid, buffer, move |stopped, memory, record_at| {
        let held = copy_stopped_stack(stopped, memory, stack, record_at)?;
        Ok((held, held.thread_pointer, stack.copies(held.registers.sp)))
    })
}

/// [`sample_with_stack_into`] without the stop, for a thread blocked in a system call
/// at `held` (a thread's registers do not change while it is blocked; the caller knows
/// them from a stop at the same point and the thread's `syscall` file), as
/// [`ThreadReader::sample_blocked_over_into`]: `Ok(None)` when `unmoved` says the
/// thread ran meanwhile, and nothing read is kept.
pub fn sample_blocked_with_stack_into<'a>(
    reader: &'a mut ThreadReader,
    tid: u32,
    buffer: &'a mut RecordBuffer,
    stack: &mut StackBuffer,
    held: Held,
    unmoved: impl FnOnce() -> bool,
) -> Result<Option<Option<ThreadContextRef<'a>>>, SampleError> {
    let sampled = reader.sample_blocked_over_into(
        tid,
        buffer,
        held.thread_pointer,
        move |memory, record_at| {
            copy_stack(held, memory, stack, None, record_at, &mut [])?;
            Ok(((), stack.copies(held.registers.sp)))
        },
        unmoved,
    )?;
    Ok(sampled.map(|((), context)| context))
}

/// Copies the stack of thread `tid`, held at `held`, with its Python thread state's head
/// and the window of its frames ahead of it in the same system call where the walk knows
/// where they are (from the thread's last walk), and walks its Python frames into
/// `frames`: the walk's own outcome.
fn copy_and_walk(
    held: Held,
    memory: &ProcessMemory,
    stack: &mut StackBuffer,
    python: &PythonProcess,
    tid: u32,
    frames: &mut PythonStack,
    record_at: Option<u64>,
) -> Result<Result<(), PythonError>, SampleError> {
    let mut head = [0u8; TSTATE_HEAD];
    let ahead = python.head_ahead(tid).filter(|&(_, len)| len <= head.len());
    let into = ahead.map(|(at, len)| (at, &mut head[..len]));
    let (window, copied_ahead, window_copied) = match python.window_ahead(tid, frames) {
        Some((window, mut ranges)) => {
            let (head, copied) = copy_stack(held, memory, stack, into, record_at, &mut ranges)?;
            (Some(window), head, copied)
        }
        None => {
            let (head, _) = copy_stack(held, memory, stack, into, record_at, &mut [])?;
            (None, head, 0)
        }
    };
    let copy = (held.registers.sp, stack.bytes());
    let ahead = ahead
        .filter(|_| copied_ahead)
        .map(|(at, len)| (at, &head[..len]));
    let window = window.map(|window| window.copied(window_copied));
    Ok(python.sample_over_ahead(
        tid,
        Some(held.thread_pointer),
        Some(copy),
        ahead,
        window,
        frames,
    ))
}

/// What a ptrace sample with the Python walk gives: where the thread was held, its
/// context, and the walk's own outcome.
pub type PythonTaken<'a> = (Held, Option<ThreadContextRef<'a>>, Result<(), PythonError>);

/// Like [`sample_with_stack_into`], and while the thread is stopped also walks its
/// Python frames with `python` (the process's interpreter, [`PythonProcess::find`]) into
/// `frames`. The walk's own failure is the third value: the sample keeps its native
/// stack and context whatever it says.
pub fn sample_with_python_into<'a>(
    reader: &'a mut ThreadReader,
    tid: u32,
    buffer: &'a mut RecordBuffer,
    stack: &mut StackBuffer,
    python: &PythonProcess,
    frames: &mut PythonStack,
) -> Result<PythonTaken<'a>, SampleError> {
    let ((held, walked), context) =
        reader.sample_stopped_over_into(tid, buffer, move |stopped, memory, record_at| {
            let held = Held::of(stopped)?;
            let walked = copy_and_walk(held, memory, stack, python, tid, frames, record_at)?;
            let copies = stack.copies(held.registers.sp);
            Ok(((held, walked), held.thread_pointer, copies))
        })?;
    Ok((held, context, walked))
}

/// [`sample_with_python_into`] without the stop, for a thread blocked in a system call
/// at `held`, as [`sample_blocked_with_stack_into`]: `Ok(None)` when `unmoved` says the
/// thread ran meanwhile.
#[allow(clippy::too_many_arguments)]
pub fn sample_blocked_with_python_into<'a>(
    reader: &'a mut ThreadReader,
    tid: u32,
    buffer: &'a mut RecordBuffer,
    stack: &mut StackBuffer,
    python: &PythonProcess,
    frames: &mut PythonStack,
    held: Held,
    unmoved: impl FnOnce() -> bool,
) -> Result<Option<PythonTaken<'a>>, SampleError> {
    let sampled = reader.sample_blocked_over_into(
        tid,
        buffer,
        held.thread_pointer,
        move |memory, record_at| {
            let walked = copy_and_walk(held, memory, stack, python, tid, frames, record_at)?;
            Ok((walked, stack.copies(held.registers.sp)))
        },
        unmoved,
    )?;
    Ok(sampled.map(|(walked, context)| (held, context, walked)))
}

/// The stacks of a process's threads without their thread contexts: for a process that
/// publishes none (it exports no `otel_thread_ctx_v1`), which a profiler still samples
/// by its registers and stack. The ptrace twin of the eBPF sampler's
/// `add_process_stacks`; [`sample_with_stack_into`] takes the same stack with the
/// context, and the [`Sampler`](crate::Sampler) samples such a process with it.
#[derive(Debug)]
pub struct StackReader {
    pid: u32,
    memory: ProcessMemory,
}

impl StackReader {
    /// A reader of process `pid`'s stacks. Nothing is read until a thread is sampled.
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            memory: ProcessMemory::new(pid, ReadMethod::Auto),
        }
    }

    /// The process id.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// The process's thread ids, in increasing order.
    pub fn tids(&self) -> Result<Vec<u32>, Error> {
        otel_ctx_reader::procfs::thread_ids(self.pid)
    }

    /// Stops thread `tid`, takes its user registers, copies the top of its stack into
    /// `stack` (as [`sample_with_stack_into`] does), and lets it go. Allocation-free.
    pub fn sample_stack_into(
        &self,
        tid: u32,
        stack: &mut StackBuffer,
    ) -> Result<UserRegisters, SampleError> {
        let stopped = StoppedThread::stop(tid)?;
        Ok(copy_stopped_stack(&stopped, &self.memory, stack, None)?.registers)
        // `stopped` is dropped on return: the thread runs on.
    }

    /// Like [`sample_stack_into`](Self::sample_stack_into), and while the thread is
    /// stopped also walks its Python frames with `python` (the process's interpreter)
    /// into `frames`. The walk's own failure is the second value: the sample keeps its
    /// native stack whatever it says.
    pub fn sample_with_python_into(
        &self,
        tid: u32,
        stack: &mut StackBuffer,
        python: &PythonProcess,
        frames: &mut PythonStack,
    ) -> Result<(UserRegisters, Result<(), PythonError>), SampleError> {
        let stopped = StoppedThread::stop(tid)?;
        let held = Held::of(&stopped)?;
        let walked = copy_and_walk(held, &self.memory, stack, python, tid, frames, None)?;
        Ok((held.registers, walked))
        // `stopped` is dropped on return: the thread runs on.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_keeps_its_capacity() {
        let mut b = StackBuffer::new(8);
        assert_eq!(b.capacity(), 8);
        assert!(b.bytes().is_empty());
        b.copy_from(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(b.bytes(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        b.copy_from(&[9]);
        assert_eq!(b.bytes(), &[9]);
        let spare = b.spare();
        assert_eq!(spare.len(), 8);
        b.set_len(100);
        assert_eq!(b.bytes().len(), 8);
        assert_eq!(StackBuffer::new(1 << 30).capacity(), MAX_STACK_SIZE);
    }

    #[test]
    fn the_copy_ends_at_a_thread_block_in_reach() {
        let sp = 0x7f00_0000_1000;
        let expect = |end: usize| cfg!(target_arch = "x86_64").then_some(end);
        // 3.5 KiB of frames below the thread pointer, and room for its first word.
        assert_eq!(below_thread_block(sp, sp + 3584, 16384), expect(3584));
        assert_eq!(below_thread_block(sp, sp + 16376, 16384), expect(16376));
        // Out of reach: the whole capacity is copied.
        assert_eq!(below_thread_block(sp, sp + 16377, 16384), None);
        assert_eq!(below_thread_block(sp, sp + (1 << 40), 16384), None);
        // The main thread's TLS, below its stack; and no thread pointer at all.
        assert_eq!(below_thread_block(sp, sp - 4096, 16384), None);
        assert_eq!(below_thread_block(sp, 0, 16384), None);
        assert_eq!(below_thread_block(sp, sp, 16384), None);
        assert_eq!(below_thread_block(u64::MAX - 4, u64::MAX, 16384), expect(4));
    }
}
