//! A thread's `PyThreadState` and its chain of `_PyInterpreterFrame`s, newest first.

use super::error::PythonError;
use super::frame::{
    PythonFrame, PythonStack, FLAG_ENTRY, FLAG_GENERATOR, FLAG_SHIM, MAX_PYTHON_FRAMES,
    MAX_PYTHON_THREADS, OWNED_BY_GENERATOR,
};
use super::names::stamp;
use super::PythonProcess;
use otel_ctx_reader::thread::tls::TargetMemory;

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
