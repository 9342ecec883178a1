//! Where CPython keeps what the frame walk reads, per minor version.
//!
//! From 3.13, `_PyRuntime` starts with `_Py_DebugOffsets`, CPython's own table of offsets
//! for out-of-process tools (`Include/internal/pycore_runtime.h` in 3.13,
//! `pycore_debug_offsets.h` in 3.14): the offsets are read from the target, after its
//! cookie (`xdebugpy`) and version are checked. For 3.11 there is no such table: the
//! numbers below come from the 3.11 headers, each named beside its number. 3.12 and 3.15
//! on are refused: no CPython of those versions can be tested here (3.12 is in no
//! Debian release, and no registry package ships its interpreter), and a table that was
//! never checked against a real interpreter would be a guess.

use std::fmt;

/// A CPython version, as the target's own `Py_Version` (`PY_VERSION_HEX`) says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PythonVersion {
    /// 3.
    pub major: u8,
    /// 11, 13, 14.
    pub minor: u8,
    /// The patch release.
    pub micro: u8,
}

impl PythonVersion {
    /// The version of a `PY_VERSION_HEX` word (`0x030b02f0` is 3.11.2).
    pub const fn from_hex(hex: u64) -> Self {
        Self {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            micro: (hex >> 8) as u8,
        }
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// Why a version is not read, for the versions this reader knows of but refuses.
pub(crate) fn refusal(version: PythonVersion) -> Option<&'static str> {
    match (version.major, version.minor) {
        (3, 11 | 13 | 14) => None,
        (3, 12) => Some(
            "CPython 3.12 is not supported: no CPython 3.12 could be tested (it is in no Debian \
             release and no registry package ships it), and its offsets are not guessed",
        ),
        (3, 0..=10) => Some(
            "CPython before 3.11 is not supported (its frames are PyFrameObjects, not the \
             _PyInterpreterFrame chain this reader walks)",
        ),
        _ => Some(
            "this CPython is newer than the reader knows (3.11, 3.13 and 3.14 are supported): \
             its layout is not guessed",
        ),
    }
}

/// The offsets the walk and the names use, in bytes, whatever their source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.threads.head`.
    pub interp_threads_head: u64,
    /// `PyInterpreterState.modules` (3.11) or `imports.modules` (3.13 on): the
    /// interpreter's `sys.modules`.
    pub interp_modules: u64,
    /// `PyThreadState.next`.
    pub tstate_next: u64,
    /// `PyThreadState.thread_id`: the thread's `pthread_self()`, its ident in Python.
    pub tstate_thread_id: u64,
    /// `PyThreadState.native_thread_id`.
    pub tstate_native_thread_id: u64,
    /// 3.11: `PyThreadState.cframe`, a `_PyCFrame` whose `current_frame` is the frame;
    /// `None` from 3.13, where `current_frame` is in the thread state itself.
    pub tstate_cframe: Option<u64>,
    /// `_PyCFrame.current_frame` (3.11) or `PyThreadState.current_frame` (3.13 on).
    pub current_frame: u64,
    /// `_PyInterpreterFrame.f_code` (3.11) or `f_executable` (3.13 on).
    pub frame_code: u64,
    /// `_PyInterpreterFrame.previous`.
    pub frame_previous: u64,
    /// `_PyInterpreterFrame.prev_instr` (3.11) or `instr_ptr` (3.13 on).
    pub frame_instr: u64,
    /// `_PyInterpreterFrame.owner`.
    pub frame_owner: u64,
    /// 3.11: `_PyInterpreterFrame.is_entry`; later versions mark entries with a shim
    /// frame owned by the C stack instead.
    pub frame_is_entry: Option<u64>,
    /// The smallest `owner` of a shim frame (`FRAME_OWNED_BY_CSTACK`, and 3.14's
    /// `FRAME_OWNED_BY_INTERPRETER`): frames owned so are not Python functions.
    pub owner_shim: Option<u8>,
    /// Low bits of `f_executable` that tag the reference (3.14's `_PyStackRef`).
    pub code_tag_mask: u64,
    /// `PyObject.ob_type`.
    pub ob_type: u64,
    /// `PyCodeObject.co_firstlineno` (an `int`).
    pub code_firstlineno: u64,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u64,
    /// `PyCodeObject.co_qualname`.
    pub code_qualname: u64,
    /// `PyCodeObject.co_linetable`.
    pub code_linetable: u64,
    /// `PyCodeObject._co_firsttraceable` (an `int`).
    pub code_firsttraceable: u64,
    /// `PyCodeObject.co_code_adaptive`: where the instructions start.
    pub code_adaptive: u64,
    /// `PyVarObject.ob_size` of a bytes object.
    pub bytes_size: u64,
    /// `PyBytesObject.ob_sval`.
    pub bytes_data: u64,
    /// `PyASCIIObject.length`.
    pub unicode_length: u64,
    /// `PyASCIIObject.state`.
    pub unicode_state: u64,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub unicode_ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' characters start.
    pub unicode_compact_size: u64,
}

/// CPython 3.11, x86_64 and aarch64 (LP64: the same layout), from its headers.
pub(crate) const PY311: Offsets = Offsets {
    // Include/internal/pycore_runtime.h: `struct pyinterpreters { PyThread_type_lock
    // mutex; PyInterpreterState *head; ...} interpreters`, after five ints
    // (`_initialized` to `initialized`), `_finalizing` and `main_thread`.
    runtime_interpreters_head: 40,
    // Include/internal/pycore_interp.h: `struct _is { PyInterpreterState *next; struct
    // pythreads { uint64_t next_unique_id; PyThreadState *head; ...} threads; ...}`.
    interp_threads_head: 16,
    // Include/internal/pycore_interp.h: `PyObject *modules`, after the interpreter's
    // `ceval`, `gc` and `imports` state (measured against Debian's 3.11: the word there
    // is `id(sys.modules)`).
    interp_modules: 888,
    // Include/cpython/pystate.h: `struct _ts { PyThreadState *prev; PyThreadState
    // *next; PyInterpreterState *interp; ...}`.
    tstate_next: 8,
    // Include/cpython/pystate.h: `unsigned long thread_id; unsigned long
    // native_thread_id;`.
    tstate_thread_id: 152,
    tstate_native_thread_id: 160,
    // Include/cpython/pystate.h: `_PyCFrame *cframe`.
    tstate_cframe: Some(56),
    // Include/cpython/pystate.h: `typedef struct _PyCFrame { uint8_t use_tracing;
    // struct _PyInterpreterFrame *current_frame; ...}`.
    current_frame: 8,
    // Include/internal/pycore_frame.h: `typedef struct _PyInterpreterFrame {
    // PyFunctionObject *f_func; PyObject *f_globals; PyObject *f_builtins; PyObject
    // *f_locals; PyCodeObject *f_code; PyFrameObject *frame_obj; struct
    // _PyInterpreterFrame *previous; _Py_CODEUNIT *prev_instr; int stacktop; bool
    // is_entry; char owner; ...}`.
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: 69,
    frame_is_entry: Some(68),
    owner_shim: None,
    code_tag_mask: 0,
    // Include/object.h: `struct _object { Py_ssize_t ob_refcnt; PyTypeObject *ob_type; }`.
    ob_type: 8,
    // Include/cpython/code.h (`_PyCode_DEF`): after PyObject_VAR_HEAD (24), co_consts,
    // co_names, co_exceptiontable (pointers), co_flags (int), co_warmup and
    // _co_linearray_entry_size (shorts), co_argcount, co_posonlyargcount,
    // co_kwonlyargcount, co_stacksize (ints), then co_firstlineno.
    code_firstlineno: 72,
    // Include/cpython/code.h: co_localsplusnames (96), co_localspluskinds (104),
    // co_filename, co_name, co_qualname, co_linetable, co_weakreflist, _co_code,
    // _co_linearray (pointers), _co_firsttraceable (int), co_extra, co_code_adaptive.
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_firsttraceable: 168,
    code_adaptive: 184,
    // Include/cpython/bytesobject.h: `PyObject_VAR_HEAD; Py_hash_t ob_shash; char
    // ob_sval[1];`.
    bytes_size: 16,
    bytes_data: 32,
    // Include/cpython/unicodeobject.h: `PyASCIIObject { PyObject_HEAD; Py_ssize_t
    // length; Py_hash_t hash; struct { ... } state; wchar_t *wstr; }` (48 bytes), and
    // `PyCompactUnicodeObject { PyASCIIObject _base; Py_ssize_t utf8_length; char *utf8;
    // Py_ssize_t wstr_length; }` (72 bytes).
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_size: 48,
    unicode_compact_size: 72,
};

/// `_Py_DebugOffsets.cookie`.
pub(crate) const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// Bytes of `_Py_DebugOffsets` read: the 3.13 table (584 bytes) and 3.14's longer one
/// both fit.
pub(crate) const DEBUG_OFFSETS_READ: usize = 1024;

/// The largest offset or size the debug offsets may give that this reader trusts: every
/// structure it reads is far smaller.
const MAX_FIELD: u64 = 1 << 24;

/// Why `_Py_DebugOffsets` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DebugOffsetsError(pub String);

/// Reads the words of `_Py_DebugOffsets` (`bytes`, from the start of `_PyRuntime`) for
/// `version`. The table's layout is that of `version`'s headers; every offset is checked
/// to lie inside the size its structure declares.
pub(crate) fn from_debug_offsets(
    bytes: &[u8],
    version: PythonVersion,
) -> Result<Offsets, DebugOffsetsError> {
    if bytes.len() < 8 + 8 || &bytes[..8] != DEBUG_COOKIE {
        return Err(DebugOffsetsError(
            "_PyRuntime does not start with the _Py_DebugOffsets cookie \"xdebugpy\"".into(),
        ));
    }
    let word = |at: usize| -> Result<u64, DebugOffsetsError> {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
            .ok_or_else(|| DebugOffsetsError(format!("_Py_DebugOffsets is shorter than {at}")))
    };
    let table_version = PythonVersion::from_hex(word(8)?);
    if (table_version.major, table_version.minor) != (version.major, version.minor) {
        return Err(DebugOffsetsError(format!(
            "_Py_DebugOffsets says CPython {table_version}, Py_Version says {version}"
        )));
    }
    if word(16)? != 0 {
        return Err(DebugOffsetsError(
            "a free-threaded CPython (_Py_DebugOffsets.free_threaded): not supported".into(),
        ));
    }
    // The start of each structure of the table, in words from its beginning: 3.13's
    // `pycore_runtime.h` and 3.14's `pycore_debug_offsets.h`. Both start with cookie,
    // version, free_threaded; each structure starts with its `size`.
    let layout = match version.minor {
        13 => DebugLayout {
            runtime: 3,
            interp: 6,
            interp_modules: 5,
            tstate: 19,
            frame: 28,
            code: 34,
            pyobject: 44,
            bytes: 64,
            unicode: 67,
        },
        14 => DebugLayout {
            runtime: 3,
            interp: 6,
            // 3.14 adds `threads_main` after `threads_head`.
            interp_modules: 6,
            tstate: 22,
            frame: 31,
            code: 39,
            pyobject: 50,
            bytes: 74,
            unicode: 77,
        },
        _ => {
            return Err(DebugOffsetsError(format!(
                "no _Py_DebugOffsets layout known for CPython {version}"
            )))
        }
    };
    let field = |structure: usize, n: usize| -> Result<u64, DebugOffsetsError> {
        let size = word(structure * 8)?;
        let value = word((structure + n) * 8)?;
        if size == 0 || size > MAX_FIELD || value >= size {
            return Err(DebugOffsetsError(format!(
                "_Py_DebugOffsets word {} is {value}, outside its structure of {size} bytes",
                structure + n
            )));
        }
        Ok(value)
    };
    let l = layout;
    // Inside each structure the fields keep their places in 3.13 and 3.14 (the words
    // below count from the structure's `size`).
    let unicode_ascii_size = word((l.unicode + 3) * 8)?;
    if unicode_ascii_size == 0 || unicode_ascii_size > 256 {
        return Err(DebugOffsetsError(format!(
            "_Py_DebugOffsets gives PyASCIIObject a size of {unicode_ascii_size}"
        )));
    }
    let code_adaptive = field(l.code, 9)?;
    let offsets = Offsets {
        runtime_interpreters_head: field(l.runtime, 2)?,
        interp_threads_head: field(l.interp, 3)?,
        interp_modules: field(l.interp, l.interp_modules)?,
        tstate_next: field(l.tstate, 2)?,
        tstate_thread_id: field(l.tstate, 5)?,
        tstate_native_thread_id: field(l.tstate, 6)?,
        tstate_cframe: None,
        current_frame: field(l.tstate, 4)?,
        frame_code: field(l.frame, 2)?,
        frame_previous: field(l.frame, 1)?,
        frame_instr: field(l.frame, 3)?,
        frame_owner: field(l.frame, 5)?,
        frame_is_entry: None,
        // Include/internal/pycore_frame.h (3.13): FRAME_OWNED_BY_CSTACK is 3, the
        // largest; pycore_interpframe_structs.h (3.14): FRAME_OWNED_BY_INTERPRETER 3 and
        // FRAME_OWNED_BY_CSTACK 4. CPython's `_PyFrame_IsIncomplete` skips both.
        owner_shim: Some(3),
        // 3.14's `_PyStackRef` tags its low bit (Include/internal/pycore_stackref.h,
        // `Py_TAG_BITS`); 3.13's `f_executable` is a plain `PyObject *`.
        code_tag_mask: if version.minor >= 14 { 1 } else { 0 },
        ob_type: field(l.pyobject, 1)?,
        code_firstlineno: field(l.code, 5)?,
        code_filename: field(l.code, 1)?,
        code_qualname: field(l.code, 3)?,
        code_linetable: field(l.code, 4)?,
        // Not in the table: `_co_firsttraceable` is the int 16 bytes before
        // `co_code_adaptive` in 3.13 and 3.14 (Include/cpython/code.h: `int
        // _co_firsttraceable; void *co_extra; char co_code_adaptive[]`).
        code_firsttraceable: code_adaptive.saturating_sub(16),
        code_adaptive,
        bytes_size: field(l.bytes, 1)?,
        bytes_data: field(l.bytes, 2)?,
        unicode_length: field(l.unicode, 2)?,
        unicode_state: field(l.unicode, 1)?,
        unicode_ascii_size,
        // Include/cpython/unicodeobject.h: PyCompactUnicodeObject adds `utf8_length` and
        // `utf8` to PyASCIIObject.
        unicode_compact_size: unicode_ascii_size + 16,
    };
    Ok(offsets)
}

/// Where each structure of `_Py_DebugOffsets` starts, in words.
#[derive(Clone, Copy)]
struct DebugLayout {
    runtime: usize,
    interp: usize,
    /// `imports_modules`, in words from the start of the interpreter's structure.
    interp_modules: usize,
    tstate: usize,
    frame: usize,
    code: usize,
    pyobject: usize,
    bytes: usize,
    unicode: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3.13 `_Py_DebugOffsets` with the numbers of Debian trixie's 3.13.5.
    fn table_313() -> Vec<u8> {
        let mut words = vec![0u64; DEBUG_OFFSETS_READ / 8];
        words[0] = u64::from_ne_bytes(*DEBUG_COOKIE);
        words[1] = 0x030d_05f0;
        let mut put = |structure: usize, size: u64, fields: &[(usize, u64)]| {
            words[structure] = size;
            for &(n, value) in fields {
                words[structure + n] = value;
            }
        };
        put(3, 316_000, &[(2, 632)]);
        put(6, 8000, &[(3, 7344), (5, 7656)]);
        put(19, 300, &[(2, 8), (4, 72), (5, 152), (6, 160)]);
        put(28, 80, &[(1, 8), (2, 0), (3, 56), (5, 70)]);
        put(34, 208, &[(1, 112), (3, 128), (4, 136), (5, 68), (9, 200)]);
        put(44, 16, &[(1, 8)]);
        put(64, 40, &[(1, 16), (2, 32)]);
        put(67, 40, &[(1, 32), (2, 16), (3, 40)]);
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn debug_offsets_are_read_and_checked() {
        let version = PythonVersion::from_hex(0x030d_05f0);
        assert_eq!(version.to_string(), "3.13.5");
        let o = from_debug_offsets(&table_313(), version).expect("a 3.13 table");
        assert_eq!(
            (
                o.runtime_interpreters_head,
                o.interp_threads_head,
                o.current_frame
            ),
            (632, 7344, 72)
        );
        assert_eq!(
            (o.frame_instr, o.frame_owner, o.code_adaptive),
            (56, 70, 200)
        );
        assert_eq!((o.code_firsttraceable, o.unicode_compact_size), (184, 56));
        assert_eq!((o.interp_modules, o.tstate_thread_id), (7656, 152));
        // Another version's table, a wrong cookie, an offset outside its structure.
        let v314 = PythonVersion::from_hex(0x030e_00f0);
        assert!(from_debug_offsets(&table_313(), v314).is_err());
        let mut bad = table_313();
        bad[0] = b'y';
        assert!(from_debug_offsets(&bad, version).is_err());
        let mut bad = table_313();
        bad[(28 + 5) * 8..(28 + 6) * 8].copy_from_slice(&500u64.to_ne_bytes());
        let e = from_debug_offsets(&bad, version).unwrap_err();
        assert!(e.0.contains("outside its structure"), "{e:?}");
        // A free-threaded build is refused.
        let mut bad = table_313();
        bad[16..24].copy_from_slice(&1u64.to_ne_bytes());
        assert!(from_debug_offsets(&bad, version)
            .unwrap_err()
            .0
            .contains("free-threaded"));
        // Short input is refused, not indexed past.
        assert!(from_debug_offsets(&table_313()[..100], version).is_err());
    }

    #[test]
    fn versions_without_a_tested_layout_are_refused() {
        for (hex, refused) in [
            (0x030b_02f0, false),
            (0x030c_01f0, true),
            (0x030d_05f0, false),
            (0x030e_00f0, false),
            (0x030f_00a1, true),
            (0x030a_0cf0, true),
        ] {
            let version = PythonVersion::from_hex(hex);
            assert_eq!(refusal(version).is_some(), refused, "{version}");
        }
    }
}
