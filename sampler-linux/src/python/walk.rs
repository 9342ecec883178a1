//! A thread's `PyThreadState` and its chain of `_PyInterpreterFrame`s, newest first.

use super::names::stamp;
use super::{PythonError, PythonProcess};
use otel_ctx_reader::thread::tls::TargetMemory;

/// The most Python frames one sample walks (user space); a longer chain, or one that
/// loops, is [`PythonError::Loop`].
pub const MAX_PYTHON_FRAMES: usize = 256;

/// The most thread states looked through to find a thread's.
pub const MAX_PYTHON_THREADS: usize = 4096;

/// The most interpreters (the main one and subinterpreters) looked through.
const MAX_INTERPRETERS: usize = 64;

/// `PythonFrame::flags`: the oldest frame of one run of `_PyEval_EvalFrameDefault`.
pub(crate) const FLAG_ENTRY: u8 = 1;
/// `PythonFrame::flags`: a generator's or coroutine's frame.
pub(crate) const FLAG_GENERATOR: u8 = 2;
/// `PythonFrame::flags`: not a Python frame but the shim (owned by the C stack) that
/// one call of `_PyEval_EvalFrameDefault` keeps on its native stack frame, below the
/// Python frames it runs (3.12 on): its address tells which native frame runs them.
pub(crate) const FLAG_SHIM: u8 = 4;

/// `FRAME_OWNED_BY_GENERATOR` (`Include/internal/pycore_frame.h`, 3.11 to 3.14).
pub(crate) const OWNED_BY_GENERATOR: u8 = 1;

/// One Python frame as sampled: what names it later
/// ([`PythonNames::frame_info`](super::PythonNames::frame_info)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PythonFrame {
    /// The `_PyInterpreterFrame`'s address.
    pub frame: u64,
    /// Its code object's address.
    pub code: u64,
    /// The code object's stamp when sampled (first line and file pointer): a code
    /// object freed and replaced at the same address is told apart by it.
    pub stamp: u64,
    /// The instruction, in code units from the start of the code.
    pub instruction: u32,
    /// `FLAG_*` bits.
    pub flags: u8,
}

impl PythonFrame {
    /// Whether it is the oldest frame of one call of `_PyEval_EvalFrameDefault`: the
    /// frames from the newest down to it are what one native evaluation frame runs.
    pub const fn is_entry(&self) -> bool {
        self.flags & FLAG_ENTRY != 0
    }

    /// Whether it is a shim, not a Python frame: the entry marker one call of
    /// `_PyEval_EvalFrameDefault` keeps in its own native stack frame (at `frame`),
    /// below the Python frames it runs. It has no code object.
    pub const fn is_shim(&self) -> bool {
        self.flags & FLAG_SHIM != 0
    }

    /// Whether it is a generator's or coroutine's frame.
    pub const fn is_generator(&self) -> bool {
        self.flags & FLAG_GENERATOR != 0
    }
}

/// The caller's buffer of one thread's Python frames, newest first, reused from sample
/// to sample.
#[derive(Debug, Default, Clone)]
pub struct PythonStack {
    frames: Vec<PythonFrame>,
}

impl PythonStack {
    /// An empty stack with room for [`MAX_PYTHON_FRAMES`].
    pub fn new() -> Self {
        Self {
            frames: Vec::with_capacity(MAX_PYTHON_FRAMES),
        }
    }

    /// The frames, newest first.
    pub fn frames(&self) -> &[PythonFrame] {
        &self.frames
    }

    /// Empties it.
    pub fn clear(&mut self) {
        self.frames.clear();
    }

    /// Adds a frame walked some other way (the eBPF sampler's), newest first; false when
    /// the stack is full.
    pub fn push(&mut self, frame: PythonFrame) -> bool {
        if self.frames.len() >= MAX_PYTHON_FRAMES {
            return false;
        }
        self.frames.push(frame);
        true
    }

    /// Whether two frames of the chain are the same frame: a chain that loops.
    pub fn loops(&self) -> bool {
        let mut seen: Vec<u64> = self.frames.iter().map(|f| f.frame).collect();
        seen.sort_unstable();
        seen.windows(2).any(|w| w[0] == w[1])
    }
}

fn word(mem: &dyn TargetMemory, what: &'static str, at: u64) -> Result<u64, PythonError> {
    mem.read_u64(at)
        .map_err(|_| PythonError::Memory { what, address: at })
}

fn ne_u64(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

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
        let mem: &dyn TargetMemory = &self.memory;
        if let (Some(tls), Some(tp)) = (&self.tstate_tls, thread_pointer) {
            if let Ok(Some(slot)) = tls.slot_address(tp, mem) {
                let tstate = word(mem, "_Py_tss_tstate", slot)?;
                if tstate != 0 {
                    return Ok(tstate);
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
            if native(tstate).ok() == Some(u64::from(tid)) {
                return Ok(tstate);
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
                    return Ok(tstate);
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
    pub fn walk(&self, tstate: u64, stack: &mut PythonStack) -> Result<(), PythonError> {
        stack.clear();
        let mem: &dyn TargetMemory = &self.memory;
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
        let (stamp_from, stamp_to) = (
            o.code_firstlineno.min(o.code_filename),
            o.code_firstlineno.max(o.code_filename) + 8,
        );
        let mut code_head = [0u8; 256];
        let code_head = code_head
            .get_mut(..(stamp_to - stamp_from) as usize)
            .ok_or(PythonError::Malformed("a code stamp past 256 bytes"))?;
        let mut walked = 0;
        while frame != 0 {
            walked += 1;
            if walked > MAX_PYTHON_FRAMES {
                return Err(PythonError::Loop);
            }
            mem.read_exact_at(frame, header)
                .map_err(|_| PythonError::Memory {
                    what: "a _PyInterpreterFrame",
                    address: frame,
                })?;
            let field = |at: u64| ne_u64(header, at).unwrap_or(0);
            let owner = header[o.frame_owner as usize];
            let previous = field(o.frame_previous);
            if o.owner_shim.is_some_and(|shim| owner >= shim) {
                if let Some(last) = stack.frames.last_mut() {
                    last.flags |= FLAG_ENTRY;
                }
                if !stack.push(PythonFrame {
                    frame,
                    code: 0,
                    stamp: 0,
                    instruction: 0,
                    flags: FLAG_SHIM,
                }) {
                    return Err(PythonError::Loop);
                }
                frame = previous;
                continue;
            }
            let code = field(o.frame_code) & !o.code_tag_mask;
            let instr = field(o.frame_instr);
            let first = code.wrapping_add(o.code_adaptive);
            if code != 0 && instr >= first {
                mem.read_exact_at(code.wrapping_add(stamp_from), code_head)
                    .map_err(|_| PythonError::Memory {
                        what: "a code object",
                        address: code,
                    })?;
                let first_line = {
                    let at = (o.code_firstlineno - stamp_from) as usize;
                    u32::from_ne_bytes(code_head[at..at + 4].try_into().unwrap_or_default())
                };
                let filename = ne_u64(code_head, o.code_filename - stamp_from).unwrap_or(0);
                let mut flags = 0;
                if o.frame_is_entry.is_some_and(|at| header[at as usize] != 0) {
                    flags |= FLAG_ENTRY;
                }
                if owner == OWNED_BY_GENERATOR {
                    flags |= FLAG_GENERATOR;
                }
                let instruction = u32::try_from((instr - first) / 2).unwrap_or(u32::MAX);
                if !stack.push(PythonFrame {
                    frame,
                    code,
                    stamp: stamp(first_line, filename),
                    instruction,
                    flags,
                }) {
                    return Err(PythonError::Loop);
                }
            } else if o.frame_is_entry.is_some_and(|at| header[at as usize] != 0) {
                // An entry frame that has not started: the entry is the frame above it.
                if let Some(last) = stack.frames.last_mut() {
                    last.flags |= FLAG_ENTRY;
                }
            }
            frame = previous;
        }
        if stack.loops() {
            return Err(PythonError::Loop);
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
        stack.clear();
        let tstate = self.thread_state(tid, thread_pointer)?;
        self.walk(tstate, stack)
    }
}
