//! A thread's `PyThreadState` and its chain of `_PyInterpreterFrame`s, newest first.

use super::error::PythonError;
use super::frame::{
    push_bounded, PythonFrame, PythonStack, FLAG_ENTRY, FLAG_GENERATOR, FLAG_SHIM,
    MAX_PYTHON_FRAMES, MAX_PYTHON_THREADS, OWNED_BY_GENERATOR,
};
use super::names::stamp;
use super::PythonProcess;
use otel_ctx_reader::memory::{CopiedMemory, CopyError, ProcessMemory};
use otel_ctx_reader::thread::tls::TargetMemory;
use std::time::Instant;

/// The most interpreters (the main one and subinterpreters) looked through.
const MAX_INTERPRETERS: usize = 64;

fn word(mem: &dyn TargetMemory, what: &'static str, at: u64) -> Result<u64, PythonError> {
    mem.read_u64(at)
        .map_err(|_| PythonError::Memory { what, address: at })
}

fn ne_u64(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// The page size copies of frames are laid out by (the smallest of the architectures
/// covered: a larger page is mapped whole all the same).
const PAGE: u64 = 4096;

/// Pages copied below a frame's own page when a frame is read that no earlier copy
/// holds. CPython (3.11 on) keeps a thread's frames in chunks of its data stack, each
/// frame above the one it called from: the older frames of the chain are just below.
const PAGES_BELOW: u64 = 2;

/// The most code objects whose stamps a walk copies with its first frames.
pub(crate) const MAX_EXPECTED_CODES: usize = 32;

/// The target's memory around the frames of one walk: a frame's page up to its end, and
/// the pages below it that are mapped, taken in one copy, so that the next frames of
/// the chain are read without another. The first copy of a walk also takes the stamps
/// of the code objects it expects (the last walk's): a walk of the same functions then
/// reads its frames and their code objects' stamps in one copy.
struct FrameWindow<'a> {
    bytes: &'a mut Vec<u8>,
    /// The address of `bytes[start]`.
    base: u64,
    start: usize,
    /// The code objects expected, and their stamps (`stamp_len` bytes each, from the
    /// code object's address plus `stamp_from`) once copied.
    expected: &'a [u64],
    stamps: &'a mut Vec<u8>,
    stamp_from: u64,
    stamp_len: usize,
    /// How many of `expected` have their stamps copied; `None` before the first copy.
    stamped: Option<usize>,
}

/// A frame window copied ahead of a walk, in the same system call as the thread's stack:
/// around the page of the thread's newest frame at its last walk. Its ranges are laid out
/// as [`FrameWindow::read`] lays out its own first copy: that page, the expected code
/// objects' stamps, then the pages below it, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowAhead {
    /// The page of the thread's newest frame at its last walk.
    page: u64,
    /// The pages below it in the copy.
    below: u64,
    /// How much of the page is copied, from its start (past its end for a frame that
    /// crosses it).
    top: usize,
    /// How many code objects' stamps the copy asked for (`None`: it asked for none).
    expected: Option<usize>,
    /// How many of the ranges were copied, in their order.
    copied: usize,
    /// When the code objects whose stamps it asks for were chosen: those whose stamps
    /// were not fresh then.
    at: Instant,
}

impl WindowAhead {
    /// The same window, `copied` of its ranges copied.
    pub(crate) const fn copied(self, copied: usize) -> Self {
        Self { copied, ..self }
    }
}

/// Ranges of the target's memory to copy, each with the buffer it goes into.
pub(crate) type Ranges<'s> = Vec<(u64, &'s mut [u8])>;

/// Lays out in `bytes` (and in `stamps`, unless `expected` is `None`) a window around
/// `page`: `top` bytes from its start, the stamps of the code objects `expected` (each
/// `stamp.1` bytes from `stamp.0` on), and `below` pages below it; and gives the ranges to
/// copy into them, in [`WindowAhead`]'s order.
fn lay_out_window<'s>(
    page: u64,
    below: u64,
    top: usize,
    expected: Option<&[u64]>,
    (stamp_from, stamp_len): (u64, usize),
    bytes: &'s mut Vec<u8>,
    stamps: &'s mut Vec<u8>,
) -> (WindowAhead, Ranges<'s>) {
    let below = below.min(page / PAGE);
    bytes.clear();
    bytes.resize((below * PAGE) as usize + top, 0);
    let (lower, top_bytes) = bytes.split_at_mut((below * PAGE) as usize);
    let codes = expected.unwrap_or_default();
    let mut reads = Vec::with_capacity(1 + codes.len() + below as usize);
    reads.push((page, top_bytes));
    if expected.is_some() {
        stamps.clear();
        stamps.resize(codes.len() * stamp_len, 0);
        let at = codes.iter().map(|code| code.wrapping_add(stamp_from));
        reads.extend(at.zip(stamps.chunks_exact_mut(stamp_len.max(1))));
    }
    let low = page - below * PAGE;
    let pages = lower.chunks_exact_mut(PAGE as usize).enumerate().rev();
    reads.extend(pages.map(|(i, bytes)| (low + i as u64 * PAGE, bytes)));
    let window = WindowAhead {
        page,
        below,
        top,
        expected: expected.map(<[u64]>::len),
        copied: 0,
        at: Instant::now(),
    };
    (window, reads)
}

impl<'a> FrameWindow<'a> {
    /// A window that holds what `ahead` says was copied into `bytes` and `stamps` with
    /// the thread's stack; empty when nothing was (or the layout is not `ahead`'s).
    fn ahead(
        bytes: &'a mut Vec<u8>,
        expected: &'a [u64],
        stamps: &'a mut Vec<u8>,
        stamp: (u64, usize),
        ahead: WindowAhead,
    ) -> Self {
        let laid_out = (ahead.below * PAGE) as usize + ahead.top == bytes.len()
            && ahead.expected == Some(expected.len())
            && stamps.len() == expected.len() * stamp.1;
        if ahead.copied == 0 || !laid_out {
            return Self::new(bytes, expected, stamps, stamp);
        }
        let mut window = Self::new_keeping(bytes, expected, stamps, stamp);
        window.hold(ahead);
        window
    }

    /// Takes what the copy of `window`, laid out in this window's buffers, took: the
    /// page, the stamps asked for up to the first not copied, and the pages below only
    /// when every stamp was.
    fn hold(&mut self, window: WindowAhead) {
        let after_page = window.copied.saturating_sub(1);
        if let Some(expected) = window.expected {
            self.stamped = Some(after_page.min(expected));
        }
        let stamps = window.expected.unwrap_or(0);
        let pages_below = (after_page.saturating_sub(stamps) as u64).min(window.below);
        self.base = window.page - pages_below * PAGE;
        self.start = ((window.below - pages_below) * PAGE) as usize;
    }

    fn new(
        bytes: &'a mut Vec<u8>,
        expected: &'a [u64],
        stamps: &'a mut Vec<u8>,
        stamp: (u64, usize),
    ) -> Self {
        bytes.clear();
        Self::new_keeping(bytes, expected, stamps, stamp)
    }

    /// An empty window over `bytes` as they are.
    fn new_keeping(
        bytes: &'a mut Vec<u8>,
        expected: &'a [u64],
        stamps: &'a mut Vec<u8>,
        (stamp_from, stamp_len): (u64, usize),
    ) -> Self {
        Self {
            bytes,
            base: 0,
            start: 0,
            expected,
            stamps,
            stamp_from,
            stamp_len,
            stamped: None,
        }
    }

    /// The copied bytes at `at`, as many as `len`, if the window holds them all.
    fn get(&self, at: u64, len: usize) -> Option<&[u8]> {
        let from = usize::try_from(at.checked_sub(self.base)?).ok()?;
        let held = self.bytes.get(self.start..)?;
        held.get(from..from.checked_add(len)?)
    }

    /// The stamp bytes of code object `code`, if it was expected and they were copied.
    fn stamp(&self, code: u64) -> Option<&[u8]> {
        let copied = self.expected.get(..self.stamped.unwrap_or(0))?;
        let at = copied.iter().position(|&c| c == code)?;
        let from = at.checked_mul(self.stamp_len)?;
        self.stamps.get(from..from.checked_add(self.stamp_len)?)
    }

    /// Fills `out` with the target's bytes at `at`: from the window, or from a new copy
    /// of `at`'s page (up to the end of `out`) and of the mapped pages below it (with the
    /// expected stamps, the first time).
    fn read(&mut self, mem: &ProcessMemory, at: u64, out: &mut [u8]) -> Result<(), CopyError> {
        if let Some(held) = self.get(at, out.len()) {
            out.copy_from_slice(held);
            return Ok(());
        }
        let Some(end) = at.checked_add(out.len() as u64) else {
            return mem.read_exact(at, out);
        };
        let page = at & !(PAGE - 1);
        let Ok(top) = usize::try_from(end - page) else {
            return mem.read_exact(at, out);
        };
        // The frame's page first, then the expected stamps (the first time): the pages
        // below count only while each one is mapped.
        let expected = self.stamped.is_none().then_some(self.expected);
        let stamp = (self.stamp_from, self.stamp_len);
        let (window, mut reads) = lay_out_window(
            page,
            PAGES_BELOW,
            top,
            expected,
            stamp,
            self.bytes,
            self.stamps,
        );
        let copied = mem.read_leading(&mut reads);
        drop(reads);
        self.hold(window.copied(copied));
        if copied == 0 {
            self.bytes.clear();
            return mem.read_exact(at, out);
        }
        match self.get(at, out.len()) {
            Some(held) => {
                out.copy_from_slice(held);
                Ok(())
            }
            None => mem.read_exact(at, out),
        }
    }
}

/// The most bytes of a thread state read with its `native_thread_id`.
pub(crate) const TSTATE_HEAD: usize = 256;

impl PythonProcess {
    /// The main interpreter's first thread state address.
    pub(crate) fn interpreter_head(&self) -> Result<u64, PythonError> {
        let head = word(
            &self.memory,
            "_PyRuntime.interpreters.head",
            self.runtime
                .wrapping_add(self.offsets.runtime_interpreters_head),
        )?;
        if head == 0 {
            return Err(PythonError::Fake(
                "_PyRuntime has no interpreter (not started, or finished)".into(),
            ));
        }
        Ok(head)
    }

    /// Thread `tid`'s `PyThreadState`: through `_Py_tss_tstate` when a module exports it
    /// and the thread is attached (`thread_pointer` is the stopped thread's), else found
    /// in the interpreters' lists of thread states by `native_thread_id` (and remembered).
    pub fn thread_state(&self, tid: u32, thread_pointer: Option<u64>) -> Result<u64, PythonError> {
        self.thread_state_head(tid, thread_pointer, None, None, &mut [])
            .map(|(tstate, _)| tstate)
    }

    /// Where thread `tid`'s thread state was found before, when the walk reads its head
    /// (the bytes from its `native_thread_id` to the word that leads to its current
    /// frame): the address and length to copy ahead, in the same system call as the
    /// thread's stack, for [`sample_over_ahead`](Self::sample_over_ahead) to find it there.
    pub(crate) fn head_ahead(&self, tid: u32) -> Option<(u64, usize)> {
        if self.tstate_tls.is_some() {
            return None;
        }
        let tstate = self.threads.borrow().get(&tid).copied()?;
        let (from, len) = self.tstate_head()?;
        Some((tstate.wrapping_add(from), len))
    }

    /// The bytes of a thread state read with its `native_thread_id`, from the lower of
    /// it and the word that leads to the current frame up to the end of the higher
    /// (`None` when they lie too far apart to be read as one).
    fn tstate_head(&self) -> Option<(u64, usize)> {
        let o = &self.offsets;
        let frame_word = o.tstate_cframe.unwrap_or(o.current_frame);
        let from = o.tstate_native_thread_id.min(frame_word);
        let to = o.tstate_native_thread_id.max(frame_word) + 8;
        usize::try_from(to - from)
            .ok()
            .filter(|&len| len <= TSTATE_HEAD)
            .map(|len| (from, len))
    }

    /// Where a code object's stamp (its first line and file name) lies: the offset from
    /// the code object and the length that take both.
    fn stamp_range(&self) -> Result<(u64, usize), PythonError> {
        let o = &self.offsets;
        let (from, to) = (
            o.code_firstlineno.min(o.code_filename),
            o.code_firstlineno.max(o.code_filename) + 8,
        );
        if to - from > 256 {
            return Err(PythonError::Malformed("a code stamp past 256 bytes"));
        }
        Ok((from, (to - from) as usize))
    }

    /// The frame window to copy ahead of thread `tid`'s walk, with its stack: the page its
    /// newest frame was on at its last walk and the pages below that held its older
    /// frames (`None` when it had no frame then), laid out in `stack`'s buffers, and the
    /// ranges to copy into them, in order.
    pub(crate) fn window_ahead<'s>(
        &self,
        tid: u32,
        stack: &'s mut PythonStack,
    ) -> Option<(WindowAhead, Ranges<'s>)> {
        let (page, below) = self.last_frames.borrow().get(&tid).copied()?;
        let stamp = self.stamp_range().ok()?;
        let below = below.min(PAGES_BELOW).min(page / PAGE);
        let PythonStack {
            scratch,
            expected: stamps,
            asked,
            ..
        } = stack;
        let expected = self.expected_codes.borrow();
        self.stamps_read
            .borrow()
            .due(&expected, Instant::now(), asked);
        let top = PAGE as usize;
        Some(lay_out_window(
            page,
            below,
            top,
            Some(asked),
            stamp,
            scratch,
            stamps,
        ))
    }

    /// [`thread_state`](Self::thread_state), and when the thread state remembered for
    /// `tid` is checked, the bytes [`tstate_head`](Self::tstate_head) says read into
    /// `head` with the same copy (their length, 0 when not read), or taken from `ahead`
    /// where it holds them.
    fn thread_state_head(
        &self,
        tid: u32,
        thread_pointer: Option<u64>,
        copied: Option<(u64, &[u8])>,
        ahead: Option<(u64, &[u8])>,
        head: &mut [u8],
    ) -> Result<(u64, usize), PythonError> {
        let mem: &dyn TargetMemory = &self.memory;
        if let (Some(tls), Some(tp)) = (&self.tstate_tls, thread_pointer) {
            // The slot is in the static TLS, which on x86_64 a worker's stack copy holds.
            let copy = CopiedMemory {
                copies: [copied.unwrap_or((0, &[]))],
                memory: &self.memory,
            };
            if let Ok(Some(slot)) = tls.slot_address(tp, &copy) {
                let tstate = word(&copy, "_Py_tss_tstate", slot)?;
                if tstate != 0 {
                    return Ok((tstate, 0));
                }
            }
        }
        let native = |tstate: u64| {
            word(
                mem,
                "PyThreadState.native_thread_id",
                tstate.wrapping_add(self.offsets.tstate_native_thread_id),
            )
        };
        let known = self.threads.borrow().get(&tid).copied();
        if let Some(tstate) = known {
            if let Some((from, len)) = self.tstate_head().filter(|&(_, len)| len <= head.len()) {
                let head = &mut head[..len];
                // Copied ahead of the stack when this thread state was expected.
                let copies = CopiedMemory {
                    copies: [ahead.unwrap_or((0, &[]))],
                    memory: &self.memory,
                };
                let read = copies
                    .read_exact_at(tstate.wrapping_add(from), head)
                    .is_ok();
                let at = self.offsets.tstate_native_thread_id - from;
                if read && ne_u64(head, at) == Some(u64::from(tid)) {
                    return Ok((tstate, len));
                }
            } else if native(tstate).ok() == Some(u64::from(tid)) {
                return Ok((tstate, 0));
            }
            self.threads.borrow_mut().remove(&tid);
        }
        let mut interp = self.interpreter_head()?;
        let mut looked = 0;
        for _ in 0..MAX_INTERPRETERS {
            let mut tstate = word(
                mem,
                "PyInterpreterState.threads.head",
                interp.wrapping_add(self.offsets.interp_threads_head),
            )?;
            while tstate != 0 && looked < MAX_PYTHON_THREADS {
                looked += 1;
                if native(tstate)? == u64::from(tid) {
                    let mut threads = self.threads.borrow_mut();
                    if threads.len() >= MAX_PYTHON_THREADS {
                        threads.clear();
                    }
                    threads.insert(tid, tstate);
                    return Ok((tstate, 0));
                }
                tstate = word(
                    mem,
                    "PyThreadState.next",
                    tstate.wrapping_add(self.offsets.tstate_next),
                )?;
            }
            // `PyInterpreterState.next` is its first word.
            interp = word(mem, "PyInterpreterState.next", interp)?;
            if interp == 0 {
                break;
            }
        }
        Err(PythonError::NoThreadState)
    }

    /// Walks the frames of thread state `tstate` into `stack`, newest first: a shim frame
    /// (owned by the C stack) marks the frame above it as an entry and is kept as a
    /// marker ([`PythonFrame::is_shim`]); a frame whose instruction lies before its code
    /// is left out (it has not started).
    ///
    /// The frames are read through a window of the target's memory (one copy takes a
    /// frame and the older frames below it in the same data-stack chunk), and the stamps
    /// of their code objects all in one copy once the chain is known.
    pub fn walk(&self, tstate: u64, stack: &mut PythonStack) -> Result<(), PythonError> {
        self.walk_in(&self.memory, tstate, None, stack)
    }

    /// [`walk`](Self::walk), reading the thread state and what leads from it to the
    /// current frame through `mem`, and the frames first from `window`, where one was
    /// copied ahead into `stack`'s buffers.
    fn walk_in(
        &self,
        mem: &dyn TargetMemory,
        tstate: u64,
        window: Option<WindowAhead>,
        stack: &mut PythonStack,
    ) -> Result<(), PythonError> {
        stack.clear();
        let o = &self.offsets;
        let mut frame = match o.tstate_cframe {
            Some(cframe) => {
                let cframe = word(mem, "PyThreadState.cframe", tstate.wrapping_add(cframe))?;
                if cframe == 0 {
                    return Ok(());
                }
                word(
                    mem,
                    "_PyCFrame.current_frame",
                    cframe.wrapping_add(o.current_frame),
                )?
            }
            None => word(
                mem,
                "PyThreadState.current_frame",
                tstate.wrapping_add(o.current_frame),
            )?,
        };
        let header_len = [o.frame_code, o.frame_previous, o.frame_instr, o.frame_owner]
            .into_iter()
            .chain(o.frame_is_entry)
            .max()
            .unwrap_or(0)
            + 8;
        let mut header = [0u8; 128];
        let header = header
            .get_mut(..header_len as usize)
            .ok_or(PythonError::Malformed("a frame header past 128 bytes"))?;
        let (stamp_from, stamp_len) = self.stamp_range()?;
        let PythonStack {
            frames,
            scratch,
            expected: stamps,
            asked,
        } = stack;
        let stamp = (stamp_from, stamp_len);
        // The stamps asked for are those not fresh when the window's copy was laid out.
        let (mut window, copied_at) = match window {
            Some(ahead) => (
                FrameWindow::ahead(scratch, asked, stamps, stamp, ahead),
                ahead.at,
            ),
            None => {
                let now = Instant::now();
                let expected = self.expected_codes.borrow();
                self.stamps_read.borrow().due(&expected, now, asked);
                (FrameWindow::new(scratch, asked, stamps, stamp), now)
            }
        };
        let mut walked = 0;
        while frame != 0 {
            walked += 1;
            if walked > MAX_PYTHON_FRAMES {
                return Err(PythonError::Loop);
            }
            window
                .read(&self.memory, frame, header)
                .map_err(|_| PythonError::Memory {
                    what: "a _PyInterpreterFrame",
                    address: frame,
                })?;
            let field = |at: u64| ne_u64(header, at).unwrap_or(0);
            let owner = header[o.frame_owner as usize];
            let previous = field(o.frame_previous);
            if o.owner_shim.is_some_and(|shim| owner >= shim) {
                if let Some(last) = frames.last_mut() {
                    last.flags |= FLAG_ENTRY;
                }
                let shim = PythonFrame {
                    frame,
                    code: 0,
                    stamp: 0,
                    instruction: 0,
                    flags: FLAG_SHIM,
                };
                if !push_bounded(frames, shim) {
                    return Err(PythonError::Loop);
                }
                frame = previous;
                continue;
            }
            let code = field(o.frame_code) & !o.code_tag_mask;
            let instr = field(o.frame_instr);
            let first = code.wrapping_add(o.code_adaptive);
            if code != 0 && instr >= first {
                let mut flags = 0;
                if o.frame_is_entry.is_some_and(|at| header[at as usize] != 0) {
                    flags |= FLAG_ENTRY;
                }
                if owner == OWNED_BY_GENERATOR {
                    flags |= FLAG_GENERATOR;
                }
                let instruction = u32::try_from((instr - first) / 2).unwrap_or(u32::MAX);
                // Its stamp is read below, with the others'.
                let walked = PythonFrame {
                    frame,
                    code,
                    stamp: 0,
                    instruction,
                    flags,
                };
                if !push_bounded(frames, walked) {
                    return Err(PythonError::Loop);
                }
            } else if o.frame_is_entry.is_some_and(|at| header[at as usize] != 0) {
                // An entry frame that has not started: the entry is the frame above it.
                if let Some(last) = frames.last_mut() {
                    last.flags |= FLAG_ENTRY;
                }
            }
            frame = previous;
        }
        // The stamps copied with the first frames, or read lately; the others' are read
        // below.
        let mut missing = Vec::new();
        let mut stamps_read = self.stamps_read.borrow_mut();
        for (at, frame) in frames.iter_mut().enumerate() {
            if frame.is_shim() {
                continue;
            }
            if let Some(head) = window.stamp(frame.code) {
                frame.stamp = self.stamp_of(head, stamp_from);
                stamps_read.note(frame.code, frame.stamp, copied_at);
            } else if let Some(stamp) = stamps_read.fresh(frame.code, copied_at) {
                frame.stamp = stamp;
            } else {
                missing.push(at);
            }
        }
        drop(stamps_read);
        if stack.loops() {
            return Err(PythonError::Loop);
        }
        self.stamp_codes(stack, &missing, stamp_from, stamp_len)?;
        // The next walk, of this thread or another, expects these code objects first,
        // then those of the walks before, as many as fit.
        let mut expected = self.expected_codes.borrow_mut();
        let before = std::mem::take(&mut *expected);
        let walked = stack.frames.iter().filter(|f| !f.is_shim()).map(|f| f.code);
        for code in walked.chain(before) {
            if expected.len() >= MAX_EXPECTED_CODES {
                break;
            }
            if !expected.contains(&code) {
                expected.push(code);
            }
        }
        Ok(())
    }

    /// A code object's stamp from its bytes `from..` (as many as the stamp needs).
    fn stamp_of(&self, head: &[u8], from: u64) -> u64 {
        let o = &self.offsets;
        let first_line = o
            .code_firstlineno
            .checked_sub(from)
            .and_then(|at| usize::try_from(at).ok())
            .and_then(|at| head.get(at..at.checked_add(4)?))
            .map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap_or_default()));
        let filename = ne_u64(head, o.code_filename.wrapping_sub(from)).unwrap_or(0);
        stamp(first_line, filename)
    }

    /// Reads the stamp (first line and file name) of the code object of each frame of
    /// `stack` at the indices `missing`, in one copy: the `len` bytes from `from` of
    /// each code object.
    fn stamp_codes(
        &self,
        stack: &mut PythonStack,
        missing: &[usize],
        from: u64,
        len: usize,
    ) -> Result<(), PythonError> {
        if missing.is_empty() {
            return Ok(());
        }
        let PythonStack {
            frames, scratch, ..
        } = stack;
        scratch.clear();
        scratch.resize(len * missing.len(), 0);
        let codes = missing
            .iter()
            .filter_map(|&at| frames.get(at))
            .map(|f| f.code);
        let mut reads: Vec<(u64, &mut [u8])> = codes
            .map(|code| code.wrapping_add(from))
            .zip(scratch.chunks_exact_mut(len.max(1)))
            .collect();
        let results = self.memory.read_exact_each(&mut reads);
        let now = Instant::now();
        drop(reads);
        let mut stamps_read = self.stamps_read.borrow_mut();
        let heads = scratch.chunks_exact(len.max(1));
        for ((&at, result), head) in missing.iter().zip(results).zip(heads) {
            let Some(frame) = frames.get_mut(at) else {
                continue;
            };
            if result.is_err() {
                return Err(PythonError::Memory {
                    what: "a code object",
                    address: frame.code,
                });
            }
            frame.stamp = self.stamp_of(head, from);
            stamps_read.note(frame.code, frame.stamp, now);
        }
        Ok(())
    }

    /// Thread `tid`'s Python frames into `stack` (empty when it runs none):
    /// [`thread_state`](Self::thread_state), then [`walk`](Self::walk).
    pub fn sample(
        &self,
        tid: u32,
        thread_pointer: Option<u64>,
        stack: &mut PythonStack,
    ) -> Result<(), PythonError> {
        self.sample_over(tid, thread_pointer, None, stack)
    }

    /// [`sample`](Self::sample), with `copied`: the stopped thread's memory from an
    /// address (its stack, from the stack pointer up), copied while it is stopped. A
    /// read that lies in it (3.11's `_PyCFrame`, which each run of the evaluation loop
    /// keeps on the C stack) is taken from the copy, as is the thread state's word that
    /// leads to its current frame, read with the check of its `native_thread_id`.
    pub fn sample_over(
        &self,
        tid: u32,
        thread_pointer: Option<u64>,
        copied: Option<(u64, &[u8])>,
        stack: &mut PythonStack,
    ) -> Result<(), PythonError> {
        self.sample_over_ahead(tid, thread_pointer, copied, None, None, stack)
    }

    /// [`sample_over`](Self::sample_over), with the bytes [`head_ahead`](Self::head_ahead)
    /// named, copied with the stack: the thread state's head is taken from them when the
    /// thread state is still the thread's; and the frames first from `window`, the
    /// window [`window_ahead`](Self::window_ahead) laid out in `stack`, where it was copied
    /// with the stack. The walk's frames say where the thread's next window lies.
    pub(crate) fn sample_over_ahead(
        &self,
        tid: u32,
        thread_pointer: Option<u64>,
        copied: Option<(u64, &[u8])>,
        ahead: Option<(u64, &[u8])>,
        window: Option<WindowAhead>,
        stack: &mut PythonStack,
    ) -> Result<(), PythonError> {
        stack.clear();
        let mut head = [0u8; TSTATE_HEAD];
        let (tstate, head_len) =
            self.thread_state_head(tid, thread_pointer, copied, ahead, &mut head)?;
        let head_at = self
            .tstate_head()
            .map_or(0, |(from, _)| tstate.wrapping_add(from));
        let mem = CopiedMemory {
            copies: [(head_at, &head[..head_len]), copied.unwrap_or((0, &[]))],
            memory: &self.memory,
        };
        let walked = self.walk_in(&mem, tstate, window, stack);
        let mut last_frames = self.last_frames.borrow_mut();
        match stack.frames.first().filter(|_| walked.is_ok()) {
            Some(newest) => {
                if last_frames.len() >= MAX_PYTHON_THREADS && !last_frames.contains_key(&tid) {
                    last_frames.clear();
                }
                // The pages below the newest frame's that held older frames of the walk
                // (the older frames of a data-stack chunk lie below the newer ones).
                let page = newest.frame & !(PAGE - 1);
                let lowest = stack
                    .frames
                    .iter()
                    .map(|f| f.frame & !(PAGE - 1))
                    .filter(|&at| at <= page && page - at <= PAGES_BELOW * PAGE)
                    .min()
                    .unwrap_or(page);
                last_frames.insert(tid, (page, (page - lowest) / PAGE));
            }
            None => {
                last_frames.remove(&tid);
            }
        }
        walked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::memory::ReadMethod;

    #[test]
    fn a_window_holds_the_pages_below_and_the_expected_stamps_it_could_copy() {
        let memory = ProcessMemory::new(std::process::id(), ReadMethod::Auto);
        let data: Vec<u8> = (0..6 * PAGE as usize).map(|i| (i % 251) as u8).collect();
        let start = data.as_ptr() as u64;
        // A page boundary inside the data, with two whole pages below it.
        let page = (start + 3 * PAGE) & !(PAGE - 1);
        let at = page + 100;
        let byte = |addr: u64| data[(addr - start) as usize];
        // Expected: one readable, then one that is not (nothing after it is copied).
        let expected = [start + 8, 8, start + 16];
        let (mut bytes, mut stamps) = (Vec::new(), Vec::new());
        let mut window = FrameWindow::new(&mut bytes, &expected, &mut stamps, (0, 16));
        let mut out = [0u8; 24];
        window.read(&memory, at, &mut out).unwrap();
        assert_eq!(out[0], byte(at));
        assert_eq!(window.stamp(start + 8).unwrap()[0], byte(start + 8));
        assert_eq!(window.stamp(8), None);
        assert_eq!(window.stamp(start + 16), None);
        // The pages below were not copied (the unmapped stamp ended the copy): a frame
        // there is copied anew, with the pages below it, and no stamps.
        window.read(&memory, page - 200, &mut out).unwrap();
        assert_eq!(out[..], data[(page - 200 - start) as usize..][..24]);
        assert!(window.get(page - PAGE - 50, 24).is_some());
        assert_eq!(window.stamp(start + 8).unwrap()[0], byte(start + 8));
        // Unmapped: an error, no panic.
        assert!(window.read(&memory, 16, &mut out).is_err());
        assert!(window.read(&memory, u64::MAX - 8, &mut out).is_err());
        // No stamps expected: the pages below come with the first copy.
        let (mut bytes, mut stamps) = (Vec::new(), Vec::new());
        let mut window = FrameWindow::new(&mut bytes, &[], &mut stamps, (0, 16));
        window.read(&memory, at, &mut out).unwrap();
        assert!(window.get(page - 2 * PAGE, 24).is_some());
        assert_eq!(window.get(page - 2 * PAGE - 1, 24), None);
    }

    #[test]
    fn a_window_copied_ahead_holds_what_its_copy_took() {
        let memory = ProcessMemory::new(std::process::id(), ReadMethod::Auto);
        let data: Vec<u8> = (0..6 * PAGE as usize).map(|i| (i % 241) as u8).collect();
        let start = data.as_ptr() as u64;
        let page = (start + 3 * PAGE) & !(PAGE - 1);
        let at = |addr: u64| &data[(addr - start) as usize..][..24];
        let (mut bytes, mut stamps) = (Vec::new(), Vec::new());
        let copy = |expected: &[u64], bytes: &mut Vec<u8>, stamps: &mut Vec<u8>| {
            let top = PAGE as usize;
            let (window, mut reads) =
                lay_out_window(page, 2, top, Some(expected), (0, 16), bytes, stamps);
            assert_eq!(reads.len(), 1 + expected.len() + 2);
            window.copied(memory.read_leading(&mut reads))
        };
        // All copied: the page whole, the stamps, the two pages below.
        let expected = [start + 8, start + 40];
        let ahead = copy(&expected, &mut bytes, &mut stamps);
        let window = FrameWindow::ahead(&mut bytes, &expected, &mut stamps, (0, 16), ahead);
        assert_eq!(window.get(page + PAGE - 24, 24), Some(at(page + PAGE - 24)));
        assert_eq!(window.get(page - 2 * PAGE, 24), Some(at(page - 2 * PAGE)));
        assert_eq!(window.get(page - 2 * PAGE - 8, 24), None);
        assert_eq!(window.get(page + PAGE - 8, 24), None);
        assert_eq!(window.stamp(start + 40).unwrap()[0], data[40]);
        // A stamp that cannot be copied ends the copy: the stamps before it and the page
        // are held, the pages below are not.
        let expected = [start + 8, 8, start + 40];
        let ahead = copy(&expected, &mut bytes, &mut stamps);
        let window = FrameWindow::ahead(&mut bytes, &expected, &mut stamps, (0, 16), ahead);
        assert_eq!(window.get(page + 100, 24), Some(at(page + 100)));
        assert_eq!(window.get(page - 100, 24), None);
        assert_eq!(window.stamp(start + 8).unwrap()[0], data[8]);
        assert_eq!(window.stamp(start + 40), None);
        // Nothing copied, or a layout that is not the window's: an empty window, whose
        // first read copies the stamps.
        let no_stamps = |bytes: &mut Vec<u8>, stamps: &mut Vec<u8>| {
            lay_out_window(page, 2, PAGE as usize, Some(&[]), (0, 16), bytes, stamps).0
        };
        let window = no_stamps(&mut bytes, &mut stamps);
        let empty = FrameWindow::ahead(&mut bytes, &[], &mut stamps, (0, 16), window);
        assert_eq!(empty.get(page + 100, 24), None);
        assert_eq!(empty.stamped, None);
        let window = no_stamps(&mut bytes, &mut stamps);
        let one = [start];
        let other = FrameWindow::ahead(&mut bytes, &one, &mut stamps, (0, 16), window.copied(3));
        assert_eq!(other.get(page + 100, 24), None);
    }
}
