//! One thread's Python frames as sampled ([`PythonFrame`], [`PythonStack`]), and the
//! bounds of a walk.

/// The most Python frames one sample walks (user space); a longer chain, or one that
/// loops, is [`PythonError::Loop`](super::PythonError::Loop).
pub const MAX_PYTHON_FRAMES: usize = 256;

/// The most thread states looked through to find a thread's.
pub const MAX_PYTHON_THREADS: usize = 4096;

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
    pub(super) frames: Vec<PythonFrame>,
    /// The walk's copies of the target's memory (frames, then code objects' stamps),
    /// kept from sample to sample.
    pub(super) scratch: Vec<u8>,
    /// The stamps of the code objects the walk expected, copied with its first frames.
    pub(super) expected: Vec<u8>,
    /// Those code objects, in the same order.
    pub(super) asked: Vec<u64>,
}

/// Adds `frame` to `frames` unless they hold [`MAX_PYTHON_FRAMES`] already (then false):
/// the one bound of a stack, for a walk that holds its frames apart from the stack.
pub(super) fn push_bounded(frames: &mut Vec<PythonFrame>, frame: PythonFrame) -> bool {
    if frames.len() >= MAX_PYTHON_FRAMES {
        return false;
    }
    frames.push(frame);
    true
}

impl PythonStack {
    /// An empty stack with room for [`MAX_PYTHON_FRAMES`].
    pub fn new() -> Self {
        Self {
            frames: Vec::with_capacity(MAX_PYTHON_FRAMES),
            scratch: Vec::new(),
            expected: Vec::new(),
            asked: Vec::new(),
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
        push_bounded(&mut self.frames, frame)
    }

    /// Whether two frames of the chain are the same frame: a chain that loops.
    pub fn loops(&self) -> bool {
        let mut seen: Vec<u64> = self.frames.iter().map(|f| f.frame).collect();
        seen.sort_unstable();
        seen.windows(2).any(|w| w[0] == w[1])
    }
}
