//! Python frames in the profile: the interpreter's frames of a sample (the reader's
//! [`PythonFrame`]s, walked by ptrace or by the eBPF sampler's program) spliced into its
//! native stack where the interpreter runs them, each `_PyEval_EvalFrameDefault` frame
//! replaced by the Python frames it evaluates, native frames kept below and above (a C
//! extension called from Python shows under its Python caller), or the Python frames
//! alone ([`ProfileOptions::native`](crate::ProfileOptions::native) `false`, as py-spy
//! shows them by default).
//!
//! In the aggregate a Python frame is keyed by its code object (its address and stamp)
//! and, with [`ProfileOptions::lines`](crate::ProfileOptions::lines), its instruction: a
//! frame of mapping [`PYTHON_MAPPING`] whose address is its index here. Its names are
//! taken the first time the key is seen from the names the sampler read with the sample
//! (its code-object cache, which checks the object's type and stamp), so a code object
//! freed later keeps its name in the profile, and one reused at the same address is not
//! misnamed.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use foldhash::HashMap;
use otel_ctx_sampler::python::{PythonError, PythonFrame, PythonNames};

use crate::aggregate::StackFrame;
use crate::unwind::Frame;
use crate::ProfileOptions;

/// The mapping of a Python frame in the aggregate.
pub(crate) const PYTHON_MAPPING: u32 = u32::MAX - 1;

/// The most distinct Python frames one profile keeps; past it a new one is
/// `[python frames past the profile's limit]`.
pub const MAX_PYTHON_LOCATIONS: usize = 1 << 18;

/// The name of a Python frame past [`MAX_PYTHON_LOCATIONS`].
const OVERFLOW_NAME: &str = "[python frames past the profile's limit]";

/// One distinct Python frame, named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PythonLocation {
    /// The code object's address.
    pub code: u64,
    /// `co_qualname`, or why the code object could not be named.
    pub name: Arc<str>,
    /// `co_filename` (empty when unnamed).
    pub file: Arc<str>,
    /// `co_firstlineno`.
    pub start_line: u32,
    /// The line, with the `lines` option.
    pub line: Option<u32>,
}

/// What the Python frames of a profile cost and how they went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PythonStats {
    /// Samples that had Python frames.
    pub samples: u64,
    /// Python frames spliced in.
    pub frames: u64,
    /// Samples whose Python frames could not be walked, or frames that could not be
    /// named, by reason ([`PythonError::kind`]); those samples keep their native frames.
    pub failures: BTreeMap<&'static str, u64>,
    /// Distinct Python frames in the profile.
    pub locations: usize,
}

/// The Python frames of one profile: their names, by index.
#[derive(Debug, Default)]
pub(crate) struct PythonTable {
    index: HashMap<(u64, u64, u32), u32>,
    locations: Vec<PythonLocation>,
    pub stats: PythonStats,
    /// The spliced stack being built.
    scratch: Vec<StackFrame>,
}

impl PythonTable {
    /// Counts a sample whose Python walk failed (it keeps its native frames).
    pub fn failed(&mut self, error: &PythonError) {
        *self.stats.failures.entry(error.kind()).or_default() += 1;
    }

    /// The index of `frame`'s location, named through `names` when it is new; `None`
    /// for a frame that had not started (left out, as CPython leaves it out).
    fn intern(&mut self, frame: &PythonFrame, names: &PythonNames<'_>, lines: bool) -> Option<u32> {
        let key = (
            frame.code,
            frame.stamp,
            if lines { frame.instruction } else { 0 },
        );
        if let Some(&at) = self.index.get(&key) {
            return Some(at);
        }
        if self.locations.len() >= MAX_PYTHON_LOCATIONS {
            return Some(self.overflow());
        }
        let location = match names.frame_info(frame) {
            Ok(info) => PythonLocation {
                code: frame.code,
                name: info.code.qualname.clone(),
                file: info.code.filename.clone(),
                start_line: info.code.first_line,
                line: lines.then_some(info.line),
            },
            Err(PythonError::Incomplete) => return None,
            Err(e) => {
                self.failed(&e);
                PythonLocation {
                    code: frame.code,
                    name: format!("[unknown python code] ({})", e.kind()).into(),
                    file: "".into(),
                    start_line: 0,
                    line: None,
                }
            }
        };
        let at = self.locations.len() as u32;
        self.locations.push(location);
        self.index.insert(key, at);
        self.stats.locations = self.locations.len();
        Some(at)
    }

    /// The one location every frame past the limit shares.
    fn overflow(&mut self) -> u32 {
        let key = (0, 0, u32::MAX);
        if let Some(&at) = self.index.get(&key) {
            return at;
        }
        let at = self.locations.len() as u32;
        self.locations.push(PythonLocation {
            code: 0,
            name: OVERFLOW_NAME.into(),
            file: "".into(),
            start_line: 0,
            line: None,
        });
        self.index.insert(key, at);
        at
    }

    /// The location at `index`.
    pub fn location(&self, index: u64) -> Option<&PythonLocation> {
        self.locations.get(usize::try_from(index).ok()?)
    }

    /// Splices `frames` (newest first) into `native` (leaf first), naming new frames
    /// through `names`: see [`splice`]. `interpreter` says whether a mapping is the
    /// interpreter's module ([`ProfileOptions::interpreter_frames`]).
    pub fn splice(
        &mut self,
        native: &mut Vec<StackFrame>,
        sps: &[u64],
        frames: &[PythonFrame],
        names: &PythonNames<'_>,
        options: &ProfileOptions,
        interpreter: &dyn Fn(u32) -> bool,
    ) {
        let (keep_native, lines) = (options.native, options.lines);
        let keep_all = options.interpreter_frames;
        let internal = |frame: &StackFrame| !keep_all && interpreter(frame.mapping);
        let eval = names.eval_range();
        if frames.iter().all(PythonFrame::is_shim) {
            return;
        }
        self.stats.samples += 1;
        let mut out = std::mem::take(&mut self.scratch);
        let native_frames = Native {
            frames: native,
            sps,
            eval,
        };
        let spliced = splice(
            &native_frames,
            frames,
            (keep_native, &internal),
            &mut out,
            &mut |frame| self.intern(frame, names, lines),
        );
        self.stats.frames += spliced as u64;
        std::mem::swap(native, &mut out);
        self.scratch = out;
    }
}

/// A sample's native stack, as the splice reads it.
struct Native<'a> {
    /// Its frames, leaf first.
    frames: &'a [StackFrame],
    /// Each frame's stack pointer (frame `n`'s own stack frame is from `sps[n]` up to
    /// `sps[n + 1]`); may be shorter than `frames`.
    sps: &'a [u64],
    /// Where `_PyEval_EvalFrameDefault` is.
    eval: Option<Range<u64>>,
}

impl Native<'_> {
    /// Whether native frame `n` is the call of the evaluation loop that runs a run of
    /// Python frames whose shim (entry marker) is at `shim`: the shim lies in its own
    /// stack frame (3.12 on), or, without one (3.11), its address is in `eval`.
    fn evaluates(&self, n: usize, shim: Option<u64>) -> bool {
        match shim {
            Some(at) => {
                let low = self.sps.get(n).copied();
                let high = self.sps.get(n + 1).copied().unwrap_or(u64::MAX);
                low.is_some_and(|low| low <= at && at < high)
            }
            None => self.eval.as_ref().is_some_and(|r| {
                self.frames
                    .get(n)
                    .is_some_and(|f| r.contains(&f.frame.lookup_address()))
            }),
        }
    }
}

/// Splices `frames` (newest first, shims among them) into `native` (leaf first), into
/// `out`: the Python frames come in runs, each the frames one call of
/// `_PyEval_EvalFrameDefault` runs (up to an entry frame, or a shim); the native frame of
/// that call is replaced by its run. Runs whose call is not found (an unwinding that
/// stopped short, a build whose evaluation loop has no symbol) go at the root end. With
/// `keep_native` false the Python frames alone remain; native frames that are the
/// interpreter's own work (`internal`) are left out above the outermost run. `intern`
/// gives a frame's index (`None`: left out). Returns the number of Python frames put in.
fn splice(
    native: &Native<'_>,
    frames: &[PythonFrame],
    (keep_native, internal): (bool, &dyn Fn(&StackFrame) -> bool),
    out: &mut Vec<StackFrame>,
    intern: &mut dyn FnMut(&PythonFrame) -> Option<u32>,
) -> usize {
    out.clear();
    // The runs: (first, end) ranges of `frames`, and the shim that ends each.
    let mut runs: Vec<(usize, usize, Option<u64>)> = Vec::new();
    let mut first = 0;
    for (at, frame) in frames.iter().enumerate() {
        if frame.is_shim() {
            if at > first {
                runs.push((first, at, Some(frame.frame)));
            }
            first = at + 1;
        } else if frame.is_entry() && frames.get(at + 1).is_none_or(|f| !f.is_shim()) {
            runs.push((first, at + 1, None));
            first = at + 1;
        }
    }
    if first < frames.len() {
        runs.push((first, frames.len(), None));
    }
    let mut spliced = 0;
    let mut put = |out: &mut Vec<StackFrame>, (first, end, _): (usize, usize, Option<u64>)| {
        for frame in &frames[first..end] {
            if let Some(at) = intern(frame) {
                spliced += 1;
                out.push(StackFrame {
                    mapping: PYTHON_MAPPING,
                    frame: Frame {
                        address: u64::from(at),
                        return_address: false,
                    },
                });
            }
        }
    };
    // Without shims (3.11), a call of the evaluation loop that has not linked its run yet
    // (its prologue) or has unlinked it already (its epilogue) is the newest one: with
    // one more call on the native stack than runs, the leaf-most keeps its native frame
    // and each run goes to its own call.
    let mut between = runs.iter().all(|run| run.2.is_none())
        && (0..native.frames.len())
            .filter(|&n| native.evaluates(n, None))
            .count()
            == runs.len() + 1;
    // The native frame each run replaces, in order (runs not found stay out).
    let mut calls = Vec::with_capacity(runs.len());
    for n in 0..native.frames.len() {
        let Some(run) = runs.get(calls.len()) else {
            break;
        };
        if between && native.evaluates(n, None) {
            between = false;
        } else if native.evaluates(n, run.2) {
            calls.push(n);
        }
    }
    // The interpreter's own frames are left out above the outermost call found (none
    // when no run found its call: then where Python runs is not known).
    let outermost = calls.last().copied();
    let mut next = 0;
    for (n, &frame) in native.frames.iter().enumerate() {
        if calls.get(next) == Some(&n) {
            put(out, runs[next]);
            next += 1;
        } else if keep_native && !(outermost.is_some_and(|o| n < o) && internal(&frame)) {
            out.push(frame);
        }
    }
    for &run in &runs[next..] {
        put(out, run);
    }
    spliced
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every native frame kept, or none.
    const KEEP: (bool, &dyn Fn(&StackFrame) -> bool) = (true, &|_| false);
    const PYTHON_ONLY: (bool, &dyn Fn(&StackFrame) -> bool) = (false, &|_| false);

    fn native(address: u64) -> StackFrame {
        StackFrame {
            mapping: 0,
            frame: Frame {
                address,
                return_address: true,
            },
        }
    }

    fn python(code: u64, entry: bool) -> PythonFrame {
        PythonFrame {
            frame: 0x1000 + code,
            code,
            stamp: 0,
            instruction: 0,
            flags: u8::from(entry),
        }
    }

    /// The codes of the Python frames and the addresses of the native ones, leaf first.
    fn shown(stack: &[StackFrame]) -> Vec<String> {
        stack
            .iter()
            .map(|f| match f.mapping {
                PYTHON_MAPPING => format!("py{}", f.frame.address),
                _ => format!("{:#x}", f.frame.address),
            })
            .collect()
    }

    fn shim(at: u64) -> PythonFrame {
        PythonFrame {
            frame: at,
            code: 0,
            stamp: 0,
            instruction: 0,
            flags: 4,
        }
    }

    #[test]
    fn each_evaluation_frame_is_replaced_by_its_run() {
        // Leaf first: a C function called from Python (0x900), the evaluation loop
        // (0x510) running py2 and py1 (entry), a C call (0x700), the evaluation loop
        // again (0x520) running py0 (entry), then the thread's start (0x100).
        let stack = [
            native(0x901),
            native(0x511),
            native(0x701),
            native(0x521),
            native(0x101),
        ];
        let frames = [python(2, false), python(1, true), python(0, true)];
        let eval = Some(0x500..0x600);
        let by_eval = |frames| Native {
            frames,
            sps: &[],
            eval: eval.clone(),
        };
        // Interned as their code; code 9 is a frame that had not started.
        let mut intern = |f: &PythonFrame| (f.code != 9).then_some(f.code as u32);
        let mut out = Vec::new();
        let n = splice(&by_eval(&stack), &frames, KEEP, &mut out, &mut intern);
        assert_eq!(n, 3);
        assert_eq!(
            shown(&out),
            ["0x901", "py2", "py1", "0x701", "py0", "0x101"]
        );
        // Python only.
        splice(
            &by_eval(&stack),
            &frames,
            PYTHON_ONLY,
            &mut out,
            &mut intern,
        );
        assert_eq!(shown(&out), ["py2", "py1", "py0"]);
        // An unwinding that stopped after the first evaluation frame: the older run
        // goes at the root end.
        splice(&by_eval(&stack[..2]), &frames, KEEP, &mut out, &mut intern);
        assert_eq!(shown(&out), ["0x901", "py2", "py1", "py0"]);
        // A frame left out (not started) keeps its run's entry.
        let started = [python(9, false), python(1, true), python(0, true)];
        splice(&by_eval(&stack), &started, KEEP, &mut out, &mut intern);
        assert_eq!(shown(&out), ["0x901", "py1", "0x701", "py0", "0x101"]);
        // One evaluation frame more than runs: the newest call has not linked its run
        // yet (a generator expression or a callback from C just called, its prologue)
        // or has unlinked it (its epilogue). It stays native, and the run is its
        // caller's.
        let calling = [python(1, false), python(0, true)];
        splice(&by_eval(&stack), &calling, KEEP, &mut out, &mut intern);
        assert_eq!(
            shown(&out),
            ["0x901", "0x511", "0x701", "py1", "py0", "0x101"]
        );
        // Two more: not that; the runs go to the leaf-most calls.
        let three = [native(0x501), native(0x511), native(0x521), native(0x101)];
        splice(&by_eval(&three), &calling, KEEP, &mut out, &mut intern);
        assert_eq!(shown(&out), ["py1", "py0", "0x511", "0x521", "0x101"]);

        // 3.12 on: each run ends at the shim its call keeps in its own stack frame,
        // whatever the evaluation loop's symbol (here none). Stack pointers: frame n's
        // stack frame is [sps[n], sps[n + 1]).
        let sps = [0x1000, 0x1100, 0x1200, 0x1300, 0x1400];
        let shims = [
            python(2, false),
            python(1, true),
            shim(0x1150),
            python(0, true),
            shim(0x1350),
        ];
        let by_shim = Native {
            frames: &stack,
            sps: &sps,
            eval: None,
        };
        splice(&by_shim, &shims, KEEP, &mut out, &mut intern);
        assert_eq!(
            shown(&out),
            ["0x901", "py2", "py1", "0x701", "py0", "0x101"]
        );
        // A shim in no frame's stack: its run goes at the root end.
        let lost = [python(2, true), shim(0x10)];
        splice(&by_shim, &lost, KEEP, &mut out, &mut intern);
        assert_eq!(
            shown(&out),
            ["0x901", "0x511", "0x701", "0x521", "0x101", "py2"]
        );
    }

    #[test]
    fn the_interpreters_own_frames_count_in_their_python_caller() {
        // Leaf first: malloc in libc (mapping 0), PyObject_Malloc and list_sort in the
        // interpreter (mapping 1), the evaluation loop running py1 (entry), the
        // interpreter's PyEval_EvalCode, then main in the interpreter and the start in
        // libc.
        let interpreter = |address: u64| StackFrame {
            mapping: 1,
            ..native(address)
        };
        let stack = [
            native(0x901),
            interpreter(0x301),
            interpreter(0x311),
            interpreter(0x511),
            interpreter(0x321),
            interpreter(0x331),
            native(0x101),
        ];
        let frames = [python(1, true)];
        let by_eval = Native {
            frames: &stack,
            sps: &[],
            eval: Some(0x500..0x600),
        };
        let mut intern = |f: &PythonFrame| Some(f.code as u32);
        let mut out = Vec::new();
        let internal = |f: &StackFrame| f.mapping == 1;
        splice(&by_eval, &frames, (true, &internal), &mut out, &mut intern);
        assert_eq!(shown(&out), ["0x901", "py1", "0x321", "0x331", "0x101"]);
        // Without the evaluation loop's symbol no run finds its call: where Python
        // runs is not known, and every native frame stays.
        let unknown = Native {
            eval: None,
            ..by_eval
        };
        splice(&unknown, &frames, (true, &internal), &mut out, &mut intern);
        assert_eq!(
            shown(&out),
            ["0x901", "0x301", "0x311", "0x511", "0x321", "0x331", "0x101", "py1"]
        );
        let from_interpreter = Native {
            frames: &stack[1..],
            ..unknown
        };
        splice(
            &from_interpreter,
            &frames,
            (true, &internal),
            &mut out,
            &mut intern,
        );
        assert_eq!(
            shown(&out),
            ["0x301", "0x311", "0x511", "0x321", "0x331", "0x101", "py1"]
        );
        // Kept on request.
        splice(&by_eval, &frames, KEEP, &mut out, &mut intern);
        assert_eq!(
            shown(&out),
            ["0x901", "0x301", "0x311", "py1", "0x321", "0x331", "0x101"]
        );
    }
}
