//! The eBPF sampler's Python frames: each Python process's offsets in the program's
//! `python` map (`struct py_target`, by process id), and the frames the program walked
//! at a tick (`struct py_frame`s in the sample), decoded into the reader's
//! [`PythonStack`]. Names are read in user space ([`PythonProcess::name_frames`]).

use aya::maps::HashMap as BpfHashMap;
use aya::Ebpf;

use super::error::explain;
use super::wire::{u32_at, u64_at, EBPF_MAX_PYTHON_FRAMES, PY_FRAME_SIZE};
use super::EbpfError;
use crate::python::{PythonError, PythonFrame, PythonProcess, PythonStack};

/// The map's name in the program.
const MAP: &str = "python";

/// Words of `struct py_target`.
const PY_TARGET_WORDS: usize = 17;

/// The most thread states the program looks at to find a thread's (`MAX_PY_THREADS`):
/// fewer than the ptrace walk's [`MAX_PYTHON_THREADS`](crate::python::MAX_PYTHON_THREADS).
pub const EBPF_MAX_PYTHON_THREADS: usize = 64;

/// Bytes of a `_PyInterpreterFrame` the program reads at once (`PY_FRAME_HEADER`): every
/// frame offset it is given lies in them.
pub(crate) const EBPF_PY_FRAME_HEADER: u64 = 80;

/// Bytes of a code object the program reads for its stamp (`PY_CODE_STAMP`).
pub(crate) const EBPF_PY_CODE_STAMP: u64 = 56;

const _: () = {
    assert!(EBPF_MAX_PYTHON_FRAMES <= crate::python::MAX_PYTHON_FRAMES);
    assert!(EBPF_MAX_PYTHON_THREADS <= crate::python::MAX_PYTHON_THREADS);
    assert!(EBPF_MAX_PYTHON_FRAMES.is_power_of_two());
};

/// A field the version has not.
const NONE: u64 = u64::MAX;

// `py_state` (bpf/sampler.bpf.c).
pub(super) const PY_OFF: u32 = 0;
pub(super) const PY_OK: u32 = 1;
pub(super) const PY_NO_THREAD: u32 = 2;
pub(super) const PY_FAULT: u32 = 3;
pub(super) const PY_TRUNCATED: u32 = 4;

/// `struct py_target` for `python`'s interpreter.
fn target_words(python: &PythonProcess) -> [u64; PY_TARGET_WORDS] {
    let o = python.offsets();
    // The stamp is read from an 8-aligned start that holds both of its fields.
    let stamp_from = o.code_firstlineno.min(o.code_filename) & !7;
    [
        python.runtime().wrapping_add(o.runtime_interpreters_head),
        o.interp_threads_head,
        o.tstate_next,
        o.tstate_native_thread_id,
        o.tstate_cframe.unwrap_or(NONE),
        o.current_frame,
        o.frame_code,
        o.frame_previous,
        o.frame_instr,
        o.frame_owner,
        o.frame_is_entry.unwrap_or(NONE),
        o.owner_shim.map_or(NONE, u64::from),
        o.code_tag_mask,
        stamp_from,
        o.code_firstlineno - stamp_from,
        o.code_filename - stamp_from,
        o.code_adaptive,
    ]
}

/// Whether the program can read every field `words` names within what it copies: a
/// frame's first [`EBPF_PY_FRAME_HEADER`] bytes, a code object's stamp within
/// [`EBPF_PY_CODE_STAMP`] bytes.
fn fits_the_program(words: &[u64; PY_TARGET_WORDS]) -> Result<(), EbpfError> {
    // (index in `words`, bytes read there, the bytes the program copies)
    let fields = [
        (6, 8, EBPF_PY_FRAME_HEADER),  // frame_code
        (7, 8, EBPF_PY_FRAME_HEADER),  // frame_previous
        (8, 8, EBPF_PY_FRAME_HEADER),  // frame_instr
        (9, 1, EBPF_PY_FRAME_HEADER),  // frame_owner
        (10, 1, EBPF_PY_FRAME_HEADER), // frame_is_entry
        (14, 4, EBPF_PY_CODE_STAMP),   // code_firstlineno, from the stamp's start
        (15, 8, EBPF_PY_CODE_STAMP),   // code_filename, from the stamp's start
    ];
    for (at, size, limit) in fields {
        let offset = words[at];
        if offset != NONE && offset.saturating_add(size) > limit {
            return Err(EbpfError::Setup(format!(
                "a Python offset ({offset:#x}, word {at} of struct py_target) lies past the \
                 {limit} bytes the program reads"
            )));
        }
    }
    Ok(())
}

/// Forgets process `pid`'s Python entry (it was removed, or its interpreter is gone).
pub(super) fn forget(ebpf: &mut Ebpf, pid: u32) {
    if let Some(map) = ebpf.map_mut(MAP) {
        if let Ok(mut map) = BpfHashMap::<_, u32, [u64; PY_TARGET_WORDS]>::try_from(map) {
            let _ = map.remove(&pid);
        }
    }
}

/// Writes process `pid`'s entry of the program's `python` map, with `python`'s offsets
/// ([`EbpfSampler::set_process_python`](super::EbpfSampler::set_process_python), which
/// checks that the sampler follows the process).
pub(super) fn set_target(
    ebpf: &mut Ebpf,
    pid: u32,
    python: &PythonProcess,
) -> Result<(), EbpfError> {
    let words = target_words(python);
    fits_the_program(&words)?;
    let map = ebpf
        .map_mut(MAP)
        .ok_or_else(|| EbpfError::Setup(format!("the program has no map {MAP:?}")))?;
    let mut map = BpfHashMap::<_, u32, [u64; PY_TARGET_WORDS]>::try_from(map)
        .map_err(|e| EbpfError::Setup(explain(&e).0))?;
    map.insert(pid, words, 0)
        .map_err(|e| EbpfError::Setup(explain(&e).0))
}

/// The Python frames of one eBPF sample, as the program walked them.
#[derive(Clone, Copy, Debug)]
pub struct EbpfPython<'a> {
    state: u32,
    fault: u64,
    frames: &'a [u8],
}

impl<'a> EbpfPython<'a> {
    pub(super) fn new(state: u32, fault: u64, frames: &'a [u8]) -> Self {
        Self {
            state,
            fault,
            frames,
        }
    }

    /// Whether the program walked the process's Python frames
    /// ([`EbpfSampler::set_process_python`](super::EbpfSampler::set_process_python)).
    pub const fn is_walked(&self) -> bool {
        self.state != PY_OFF
    }

    /// The frames, newest first (shims among them), into `stack`; or why there are
    /// none: the thread has no thread state, memory could not be read, or the chain
    /// loops. A chain longer than the program walks keeps its newest frames.
    pub fn frames_into(&self, stack: &mut PythonStack) -> Result<(), PythonError> {
        stack.clear();
        match self.state {
            PY_OK | PY_TRUNCATED => {}
            PY_NO_THREAD => return Err(PythonError::NoThreadState),
            PY_FAULT => {
                return Err(PythonError::Memory {
                    what: "the Python frames (in the BPF program)",
                    address: self.fault,
                })
            }
            _ => {
                return Err(PythonError::Malformed(
                    "a Python state the program never sends",
                ))
            }
        }
        for entry in self.frames.chunks_exact(PY_FRAME_SIZE) {
            stack.push(PythonFrame {
                frame: u64_at(entry, 0),
                code: u64_at(entry, 8),
                stamp: u64_at(entry, 16),
                instruction: u32_at(entry, 24),
                flags: u32_at(entry, 28) as u8,
            });
        }
        if self.state == PY_TRUNCATED && stack.loops() {
            stack.clear();
            return Err(PythonError::Loop);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(frame: u64, code: u64, flags: u32) -> Vec<u8> {
        let mut e = Vec::new();
        for word in [frame, code, code ^ 7] {
            e.extend_from_slice(&word.to_ne_bytes());
        }
        e.extend_from_slice(&5u32.to_ne_bytes());
        e.extend_from_slice(&flags.to_ne_bytes());
        e
    }

    #[test]
    fn frames_decode_with_their_state() {
        let bytes: Vec<u8> = [entry(0x10, 0xc0, 0), entry(0x20, 0, 4)].concat();
        let mut stack = PythonStack::new();
        let walked = EbpfPython::new(PY_OK, 0, &bytes);
        assert!(walked.is_walked());
        walked.frames_into(&mut stack).expect("frames");
        let frames = stack.frames();
        assert_eq!(frames.len(), 2);
        assert_eq!((frames[0].frame, frames[0].code), (0x10, 0xc0));
        assert_eq!((frames[0].stamp, frames[0].instruction), (0xc7, 5));
        assert!(frames[1].is_shim() && !frames[0].is_shim());
        // A chain cut at the program's bound keeps its frames; one that loops has none.
        assert!(EbpfPython::new(PY_TRUNCATED, 0, &bytes)
            .frames_into(&mut stack)
            .is_ok());
        let looping: Vec<u8> = [entry(0x10, 0xc0, 0), entry(0x10, 0xc0, 0)].concat();
        assert_eq!(
            EbpfPython::new(PY_TRUNCATED, 0, &looping).frames_into(&mut stack),
            Err(PythonError::Loop)
        );
        assert!(stack.frames().is_empty());
        assert_eq!(
            EbpfPython::new(PY_NO_THREAD, 0, &[]).frames_into(&mut stack),
            Err(PythonError::NoThreadState)
        );
        let fault = EbpfPython::new(PY_FAULT, 0xdead, &[]).frames_into(&mut stack);
        assert!(matches!(
            fault,
            Err(PythonError::Memory {
                address: 0xdead,
                ..
            })
        ));
        assert!(!EbpfPython::new(PY_OFF, 0, &[]).is_walked());
    }
}
