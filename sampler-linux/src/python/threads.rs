//! The names Python code gave its threads (`threading.Thread(name=...)`), as py-spy
//! shows them, where the kernel's name (`comm`) is the interpreter's for every thread.
//!
//! They are read from the target's `threading` module: `sys.modules["threading"]`, its
//! dict's `_active` (a dict from each thread's ident, its `pthread_self()`, to its
//! `Thread` object), and each `Thread`'s `_name` attribute (a `str`). The interpreter's
//! thread states then map idents to kernel thread ids (`PyThreadState.thread_id` and
//! `native_thread_id`). Every read is bounded: the entries of a dict, the threads, the
//! length of a name, and the bytes of one reading in all ([`MAX_REGISTRY_BYTES`]). Any
//! failure leaves the thread with its kernel name.
//!
//! The layouts below are those of CPython 3.11, 3.13 and 3.14 on LP64 (x86_64 and
//! aarch64), from their headers and checked against Debian's interpreters with ctypes.

use std::collections::HashMap;

use super::error::PythonError;
use super::frame::MAX_PYTHON_THREADS;
use super::names::read_str_max;
use super::offsets::Offsets;
use super::thread_names::{
    PythonThreadNames, RegistryAt, MAX_NAMED_THREADS, MAX_REGISTRY_BYTES, MAX_THREAD_NAME_BYTES,
};
use super::PythonProcess;
use otel_ctx_reader::thread::tls::TargetMemory;

/// The most entries of one dict looked through (`sys.modules` of a large program has
/// a few thousand).
const MAX_DICT_ENTRIES: u64 = 1 << 14;

/// `PyTypeObject.tp_basicsize` (Include/cpython/object.h: after `PyObject_VAR_HEAD` and
/// `tp_name`).
const TP_BASICSIZE: u64 = 32;
/// `PyTypeObject.tp_flags` (`_Py_DebugOffsets.type_object.tp_flags` of 3.13 and 3.14).
const TP_FLAGS: u64 = 168;
/// `Py_TPFLAGS_MANAGED_DICT` (Include/object.h, 3.11 on): the instance dict is managed
/// by the interpreter, its pointer three words before the object.
const MANAGED_DICT: u64 = 1 << 4;
/// `Py_TPFLAGS_INLINE_VALUES` (3.13 on): the instance's attribute values follow it, at
/// `tp_basicsize`.
const INLINE_VALUES: u64 = 1 << 2;
/// How far before an object its managed dict pointer is (`MANAGED_DICT_OFFSET`).
const MANAGED_DICT_BEFORE: u64 = 24;
/// How far before an object 3.11 keeps its values pointer (`_PyObject_ValuesPointer`).
const VALUES_POINTER_BEFORE: u64 = 32;
/// `PyModuleObject.md_dict`.
const MODULE_DICT: u64 = 16;
/// `PyDictObject.ma_used`, `ma_keys`, `ma_values`, and the bytes read of one.
const DICT_USED: usize = 16;
const DICT_KEYS: usize = 32;
const DICT_VALUES: usize = 40;
const DICT_HEADER: usize = 48;
/// `PyDictKeysObject`: `dk_refcnt`, then the bytes `dk_log2_size`,
/// `dk_log2_index_bytes`, `dk_kind`, then `dk_version` (a u32), `dk_usable`,
/// `dk_nentries`; its indices follow, then its entries.
pub(crate) const KEYS_HEADER: usize = 32;
/// `dk_kind`: `DICT_KEYS_GENERAL` (entries of hash, key, value), `DICT_KEYS_UNICODE`
/// and `DICT_KEYS_SPLIT` (entries of key, value).
const KIND_GENERAL: u8 = 0;
const KIND_SPLIT: u8 = 2;

/// Where a version keeps what differs between 3.11 and 3.13 on.
#[derive(Clone, Copy, Debug)]
struct ObjectLayout {
    /// `PyHeapTypeObject.ht_cached_keys`: the keys an instance's values are indexed by.
    cached_keys: u64,
    /// Where the values of a split table start from its values pointer: 3.11's
    /// `PyDictValues` is the array; 3.13's starts with `capacity`, `size`, `embedded`
    /// and `valid` bytes, padded to a word.
    values_header: u64,
    /// 3.13 on: the values are inline (`Py_TPFLAGS_INLINE_VALUES`); 3.11: behind the
    /// values pointer.
    inline_values: bool,
}

impl ObjectLayout {
    const fn of(minor: u8) -> Self {
        if minor <= 11 {
            // Include/cpython/object.h (3.11): `PyHeapTypeObject { PyTypeObject
            // ht_type; PyAsyncMethods as_async; ... PyObject *ht_name, *ht_slots,
            // *ht_qualname; struct _dictkeysobject *ht_cached_keys; ...}` (the word
            // after `ht_qualname`, as measured against Debian's 3.11).
            Self {
                cached_keys: 872,
                values_header: 0,
                inline_values: false,
            }
        } else {
            // 3.13 and 3.14: one word further (`PyTypeObject` gained `tp_watched` in
            // 3.12), as measured against trixie's 3.13 and sid's 3.14 with ctypes.
            Self {
                cached_keys: 880,
                values_header: 8,
                inline_values: true,
            }
        }
    }
}

/// A dict's keys table, as its header says, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeysTable {
    /// `dk_kind`.
    pub kind: u8,
    /// Where its entries start, from the start of the keys object.
    pub entries_at: u64,
    /// `dk_nentries`: the entries used so far (deleted ones among them).
    pub count: u64,
}

impl KeysTable {
    /// Reads a `PyDictKeysObject` header (its first [`KEYS_HEADER`] bytes): the sizes
    /// must agree with each other, and the entries be at most `max_entries`.
    pub(crate) fn parse(header: &[u8], max_entries: u64) -> Result<Self, PythonError> {
        let header = header
            .get(..KEYS_HEADER)
            .ok_or(PythonError::Malformed("a short dict keys header"))?;
        let (log2_size, log2_index_bytes, kind) = (header[8], header[9], header[10]);
        let count = u64::from_ne_bytes(header[24..32].try_into().unwrap_or_default());
        if !(3..=30).contains(&log2_size) {
            return Err(PythonError::Malformed("a dict of an impossible size"));
        }
        // Each index takes 1, 2, 4 or 8 bytes, by the table's size.
        let index_log2 = match log2_size {
            0..=7 => 0,
            8..=15 => 1,
            _ => 2,
        };
        if log2_index_bytes != log2_size + index_log2 {
            return Err(PythonError::Malformed(
                "a dict whose index size does not fit its table",
            ));
        }
        if kind > KIND_SPLIT {
            return Err(PythonError::Malformed("a dict of an unknown kind"));
        }
        // USABLE_FRACTION: two thirds of the table's slots hold entries.
        let usable = (1u64 << log2_size) * 2 / 3;
        if count > usable || count > max_entries {
            return Err(PythonError::Malformed("a dict with too many entries"));
        }
        Ok(Self {
            kind,
            entries_at: KEYS_HEADER as u64 + (1u64 << log2_index_bytes),
            count,
        })
    }

    /// The bytes of one entry.
    pub(crate) const fn entry_size(&self) -> usize {
        if self.kind == KIND_GENERAL {
            24
        } else {
            16
        }
    }
}

/// One entry of a dict: its stored hash (general tables only), key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub hash: Option<u64>,
    pub key: u64,
    pub value: u64,
}

/// The used entries of a table of `kind` in `bytes` (its entries, read whole); a split
/// table's values come from `values` (the values array, a word each), by position.
pub(crate) fn entries<'b>(
    kind: u8,
    bytes: &'b [u8],
    values: Option<&'b [u8]>,
) -> impl Iterator<Item = Entry> + 'b {
    let size = if kind == KIND_GENERAL { 24 } else { 16 };
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|w| w.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    };
    bytes
        .chunks_exact(size)
        .enumerate()
        .filter_map(move |(i, e)| {
            let (hash, key, value) = if kind == KIND_GENERAL {
                (Some(word(e, 0)), word(e, 8), word(e, 16))
            } else {
                (None, word(e, 0), word(e, 8))
            };
            let value = match values {
                Some(values) => word(values, i * 8),
                None => value,
            };
            (key != 0 && value != 0).then_some(Entry { hash, key, value })
        })
}

/// A dict's table as read: its keys table, its entries' bytes, and a split table's
/// values.
struct Table {
    keys: KeysTable,
    entries: Vec<u8>,
    values: Option<Vec<u8>>,
}

impl Table {
    fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        entries(self.keys.kind, &self.entries, self.values.as_deref())
    }
}

/// One reading of the registry: the target, its layouts, and the bytes still allowed.
struct Registry<'a> {
    mem: &'a dyn TargetMemory,
    offsets: &'a Offsets,
    layout: ObjectLayout,
    left: usize,
    /// Set when a read was refused for the budget: the reading stops there.
    exhausted: bool,
    /// `PyDict_Type` and `PyUnicode_Type`, as the target's `sys.modules` shows them.
    dict_type: u64,
    str_type: u64,
}

impl Registry<'_> {
    /// Takes `bytes` from what is left of the budget.
    fn spend(&mut self, bytes: usize) -> Result<(), PythonError> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.exhausted = true;
                Err(PythonError::Malformed(
                    "the thread registry is larger than its read budget",
                ))
            }
        }
    }

    fn read(&mut self, what: &'static str, at: u64, buf: &mut [u8]) -> Result<(), PythonError> {
        self.spend(buf.len())?;
        self.mem
            .read_exact_at(at, buf)
            .map_err(|_| PythonError::Memory { what, address: at })
    }

    fn word(&mut self, what: &'static str, at: u64) -> Result<u64, PythonError> {
        let mut b = [0u8; 8];
        self.read(what, at, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// The entries (and, for a split table, the values) of the dict at `dict`, checked
    /// to be of the dict type.
    fn dict(&mut self, dict: u64) -> Result<Table, PythonError> {
        let mut header = [0u8; DICT_HEADER];
        self.read("a dict", dict, &mut header)?;
        let word = |at: usize| {
            header
                .get(at..at.saturating_add(8))
                .and_then(|w| w.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        };
        if self.dict_type != 0 && word(self.offsets.ob_type as usize) != self.dict_type {
            return Err(PythonError::Malformed("a dict that is not a dict"));
        }
        let (used, keys, values) = (word(DICT_USED), word(DICT_KEYS), word(DICT_VALUES));
        let values = (values != 0).then(|| values.wrapping_add(self.layout.values_header));
        let table = self.table(keys, values, u64::MAX)?;
        if used > table.keys.count {
            return Err(PythonError::Malformed("a dict that uses more than it has"));
        }
        Ok(table)
    }

    /// The keys table at `keys` and its entries; with `values`, the values array of a
    /// split table by it, at most `capacity` of them.
    fn table(
        &mut self,
        keys: u64,
        values: Option<u64>,
        capacity: u64,
    ) -> Result<Table, PythonError> {
        let mut header = [0u8; KEYS_HEADER];
        self.read("a dict's keys", keys, &mut header)?;
        let table = KeysTable::parse(&header, MAX_DICT_ENTRIES)?;
        let mut bytes = vec![0u8; table.count as usize * table.entry_size()];
        self.read(
            "a dict's entries",
            keys.wrapping_add(table.entries_at),
            &mut bytes,
        )?;
        let values = match values {
            Some(at) => {
                let mut v = vec![0u8; table.count.min(capacity) as usize * 8];
                self.read("a dict's values", at, &mut v)?;
                Some(v)
            }
            None => None,
        };
        Ok(Table {
            keys: table,
            entries: bytes,
            values,
        })
    }

    /// Whether the object at `object` is a compact ASCII `str` saying `text` (one read).
    fn str_is(&mut self, object: u64, text: &str) -> bool {
        let o = self.offsets;
        let at = o.unicode_ascii_size as usize;
        let mut bytes = vec![0u8; at + text.len()];
        if self.read("a str", object, &mut bytes).is_err() {
            return false;
        }
        let field = |from: u64, n: usize| bytes.get(from as usize..from as usize + n);
        let length =
            field(o.unicode_length, 8).map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
        let state =
            field(o.unicode_state, 4).map(|b| u32::from_ne_bytes(b.try_into().unwrap_or([0; 4])));
        // Include/cpython/unicodeobject.h: `interned:2, kind:3, compact:1, ascii:1`.
        length == Some(text.len() as u64)
            && state.is_some_and(|s| s & (1 << 5) != 0 && s & (1 << 6) != 0)
            && bytes.get(at..) == Some(text.as_bytes())
    }

    /// The value of key `name` (a `str`) in the dict at `dict`.
    fn get(&mut self, dict: u64, name: &str) -> Result<Option<(u64, u64)>, PythonError> {
        let table = self.dict(dict)?;
        Ok(self.find(&table, name))
    }

    /// The (key, value) of `name` among a table's entries.
    fn find(&mut self, table: &Table, name: &str) -> Option<(u64, u64)> {
        table
            .entries()
            .find(|e| self.str_is(e.key, name))
            .map(|e| (e.key, e.value))
    }

    /// The attribute `name` of the instance at `object` (a plain class's instance: its
    /// managed dict, or its values by its type's cached keys).
    fn attribute(&mut self, object: u64, name: &str) -> Result<Option<u64>, PythonError> {
        let ty = self.word(
            "an object's type",
            object.wrapping_add(self.offsets.ob_type),
        )?;
        let flags = self.word("a type's flags", ty.wrapping_add(TP_FLAGS))?;
        if flags & MANAGED_DICT == 0 {
            return Err(PythonError::Malformed("a Thread without a managed dict"));
        }
        let dict = self.word("a managed dict", object.wrapping_sub(MANAGED_DICT_BEFORE))?;
        if dict != 0 {
            return Ok(self.get(dict, name)?.map(|(_, value)| value));
        }
        let mut capacity = u64::MAX;
        let values = if self.layout.inline_values {
            if flags & INLINE_VALUES == 0 {
                return Ok(None);
            }
            let size = self.word("a type's size", ty.wrapping_add(TP_BASICSIZE))?;
            if size == 0 || size > 4096 {
                return Err(PythonError::Malformed("a type of an impossible size"));
            }
            let at = object.wrapping_add(size);
            // `capacity`, `size`, `embedded`, `valid`: values no longer valid moved to a
            // dict (read above when there is one).
            let mut head = [0u8; 4];
            self.read("inline values", at, &mut head)?;
            if head[3] == 0 {
                return Ok(None);
            }
            // The type's keys may have grown since the object was made: its own values
            // stop at its capacity.
            capacity = u64::from(head[0]);
            at
        } else {
            let at = self.word(
                "a values pointer",
                object.wrapping_sub(VALUES_POINTER_BEFORE),
            )?;
            if at == 0 {
                return Ok(None);
            }
            at
        };
        let keys = self.word(
            "a type's cached keys",
            ty.wrapping_add(self.layout.cached_keys),
        )?;
        let values = values.wrapping_add(self.layout.values_header);
        let table = self.table(keys, Some(values), capacity)?;
        Ok(self.find(&table, name).map(|(_, value)| value))
    }

    /// The text of the `str` at `object`, at most [`MAX_THREAD_NAME_BYTES`] bytes.
    fn name(&mut self, object: u64) -> Result<String, PythonError> {
        let ty = self.word("a name's type", object.wrapping_add(self.offsets.ob_type))?;
        if ty != self.str_type {
            return Err(PythonError::Malformed("a thread name that is not a str"));
        }
        self.spend(MAX_THREAD_NAME_BYTES * 4 + 64)?;
        let mut text = read_str_max(self.mem, self.offsets, object, MAX_THREAD_NAME_BYTES)?;
        if text.len() > MAX_THREAD_NAME_BYTES {
            let mut end = MAX_THREAD_NAME_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        Ok(text)
    }
}

impl PythonProcess {
    /// Reads the Python names of the process's threads now, by kernel thread id: the
    /// `_name` of each `Thread` in `threading._active` whose ident a thread state of the
    /// main interpreter has. Empty when the program never imported `threading`.
    pub fn read_thread_names(&self) -> Result<Vec<(u32, String)>, PythonError> {
        self.read_thread_names_at(&mut None)
    }

    /// [`read_thread_names`](Self::read_thread_names), from the registry `at` that an
    /// earlier reading found when there is one (looked for again when it no longer
    /// reads as a dict); leaves in `at` where the registry is (`None` without
    /// `threading`).
    pub(crate) fn read_thread_names_at(
        &self,
        at: &mut Option<RegistryAt>,
    ) -> Result<Vec<(u32, String)>, PythonError> {
        let mut r = Registry {
            mem: &self.memory,
            offsets: &self.offsets,
            layout: ObjectLayout::of(self.version.minor),
            left: MAX_REGISTRY_BYTES,
            exhausted: false,
            dict_type: 0,
            str_type: 0,
        };
        let interp = self.interpreter_head()?;
        let known = at.and_then(|known| {
            (r.dict_type, r.str_type) = (known.dict_type, known.str_type);
            r.dict(known.active).ok()
        });
        let table = match known {
            Some(table) => table,
            None => {
                *at = self.find_registry(&mut r, interp)?;
                match *at {
                    Some(found) => r.dict(found.active)?,
                    None => return Ok(Vec::new()),
                }
            }
        };
        if table.keys.kind != KIND_GENERAL {
            return Err(PythonError::Malformed("threading._active has str keys"));
        }
        // Ident to thread object: the stored hash of an int below 2**61 - 1 is the int.
        let threads: Vec<(u64, u64)> = table
            .entries()
            .filter_map(|e| Some((e.hash?, e.value)))
            .take(MAX_NAMED_THREADS)
            .collect();
        let tids = self.idents(&mut r, interp)?;
        let mut names = Vec::new();
        for (ident, thread) in threads {
            let Some(&tid) = tids.get(&ident) else {
                continue;
            };
            // One thread's name that cannot be read leaves it its kernel name.
            let name = match r.attribute(thread, "_name") {
                Ok(Some(name)) => r.name(name),
                Ok(None) => continue,
                Err(e) => Err(e),
            };
            match name {
                Ok(name) => names.push((tid, name)),
                Err(_) if r.exhausted => break,
                Err(_) => {}
            }
        }
        Ok(names)
    }

    /// Where `threading._active` is, through `sys.modules` (`None` when the program
    /// never imported `threading`); sets `r`'s dict and str types.
    fn find_registry(
        &self,
        r: &mut Registry<'_>,
        interp: u64,
    ) -> Result<Option<RegistryAt>, PythonError> {
        let modules = r.word(
            "PyInterpreterState.modules",
            interp.wrapping_add(self.offsets.interp_modules),
        )?;
        r.dict_type = r.word("sys.modules", modules.wrapping_add(self.offsets.ob_type))?;
        let Some((key, threading)) = r.get(modules, "threading")? else {
            return Ok(None);
        };
        r.str_type = r.word("a str's type", key.wrapping_add(self.offsets.ob_type))?;
        let globals = r.word("the threading module", threading.wrapping_add(MODULE_DICT))?;
        Ok(r.get(globals, "_active")?.map(|(_, active)| RegistryAt {
            active,
            dict_type: r.dict_type,
            str_type: r.str_type,
        }))
    }

    /// The kernel thread id of each thread state of the interpreter at `interp`, by its
    /// ident.
    fn idents(&self, r: &mut Registry<'_>, interp: u64) -> Result<HashMap<u64, u32>, PythonError> {
        let o = &self.offsets;
        let mut tstate = r.word(
            "PyInterpreterState.threads.head",
            interp.wrapping_add(o.interp_threads_head),
        )?;
        let mut tids = HashMap::new();
        for _ in 0..MAX_PYTHON_THREADS {
            if tstate == 0 {
                break;
            }
            let ident = r.word(
                "PyThreadState.thread_id",
                tstate.wrapping_add(o.tstate_thread_id),
            )?;
            let tid = r.word(
                "PyThreadState.native_thread_id",
                tstate.wrapping_add(o.tstate_native_thread_id),
            )?;
            if let Ok(tid) = u32::try_from(tid) {
                if tid != 0 && tids.len() < MAX_PYTHON_THREADS {
                    tids.insert(ident, tid);
                }
            }
            tstate = r.word("PyThreadState.next", tstate.wrapping_add(o.tstate_next))?;
        }
        Ok(tids)
    }
}

impl PythonProcess {
    /// Reads the Python names of the process's threads into `names` now (a failure is
    /// kept there, with the names read before).
    pub fn refresh_thread_names(&self, names: &mut PythonThreadNames) {
        let read = self.read_thread_names_at(&mut names.registry);
        names.set(read);
    }

    /// The Python names of the process's threads, read now.
    pub fn thread_names(&self) -> PythonThreadNames {
        let mut names = PythonThreadNames::default();
        self.refresh_thread_names(&mut names);
        names
    }

    /// Thread `tid`'s Python name in `names`, read again first when it has none there
    /// and the last reading is [`THREAD_NAMES_INTERVAL`](super::THREAD_NAMES_INTERVAL)
    /// old.
    pub fn thread_name<'n>(&self, names: &'n mut PythonThreadNames, tid: u32) -> Option<&'n str> {
        if names.due(tid) {
            self.refresh_thread_names(names);
        }
        names.name(tid)
    }
}

#[cfg(test)]
mod tests {
    use super::super::offsets::PY311;
    use super::*;

    /// Target memory of a few regions.
    #[derive(Default)]
    struct Fake(Vec<(u64, Vec<u8>)>);

    impl Fake {
        fn put(&mut self, at: u64, bytes: &[u8]) {
            self.0.push((at, bytes.to_vec()));
        }

        fn word(&mut self, at: u64, w: u64) {
            self.put(at, &w.to_ne_bytes());
        }

        /// A compact ASCII str of 3.11 at `at`.
        fn str(&mut self, at: u64, text: &str) {
            let mut b = vec![0u8; 48];
            b[8..16].copy_from_slice(&STR_TYPE.to_ne_bytes());
            b[16..24].copy_from_slice(&(text.len() as u64).to_ne_bytes());
            b[32..36].copy_from_slice(&((1u32 << 2) | (1 << 5) | (1 << 6)).to_ne_bytes());
            b.extend_from_slice(text.as_bytes());
            self.put(at, &b);
        }
    }

    impl TargetMemory for Fake {
        fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            for (at, bytes) in self.0.iter().rev() {
                let from = addr.wrapping_sub(*at) as usize;
                if addr >= *at && from + buf.len() <= bytes.len() {
                    buf.copy_from_slice(&bytes[from..from + buf.len()]);
                    return Ok(());
                }
            }
            Err(std::io::Error::from_raw_os_error(14))
        }
    }

    const STR_TYPE: u64 = 0x50;
    const DICT_TYPE: u64 = 0x60;

    fn registry<'a>(mem: &'a Fake, offsets: &'a Offsets, left: usize) -> Registry<'a> {
        Registry {
            mem,
            offsets,
            layout: ObjectLayout::of(11),
            left,
            exhausted: false,
            dict_type: DICT_TYPE,
            str_type: STR_TYPE,
        }
    }

    /// A dict at `at` of type `ty` whose keys are at `keys`.
    fn dict(mem: &mut Fake, at: u64, ty: u64, keys_at: u64) {
        let mut b = vec![0u8; DICT_HEADER];
        b[8..16].copy_from_slice(&ty.to_ne_bytes());
        b[16..24].copy_from_slice(&2u64.to_ne_bytes());
        b[32..40].copy_from_slice(&keys_at.to_ne_bytes());
        mem.put(at, &b);
    }

    #[test]
    fn the_registry_reads_dicts_and_attributes_and_refuses_bad_ones() {
        let mut mem = Fake::default();
        mem.str(0x1000, "threading");
        mem.str(0x1100, "other");
        mem.put(0x2000, &keys(3, 1, &[&[0x1100, 0xaaaa], &[0x1000, 0xbbbb]]));
        dict(&mut mem, 0x3000, DICT_TYPE, 0x2000);
        let o = PY311;
        let mut r = registry(&mem, &o, MAX_REGISTRY_BYTES);
        assert_eq!(r.get(0x3000, "threading").unwrap(), Some((0x1000, 0xbbbb)));
        assert_eq!(r.get(0x3000, "threadin").unwrap(), None);
        // A Thread of 3.11: no dict, its values behind its values pointer, indexed by
        // its type's cached keys.
        mem.str(0x1200, "_target");
        mem.str(0x1300, "_name");
        mem.str(0x1400, "worker-0");
        mem.put(0x4000, &keys(3, 2, &[&[0x1200, 0], &[0x1300, 0]]));
        let (object, ty) = (0x5020u64, 0x6000u64);
        mem.put(object - 32, &[0u8; 48]);
        mem.word(object - 32, 0x7000);
        mem.word(object + 8, ty);
        mem.word(ty + TP_FLAGS, MANAGED_DICT);
        mem.word(ty + 872, 0x4000);
        let values: Vec<u8> = [0x99u64, 0x1400]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        mem.put(0x7000, &values);
        let mut r = registry(&mem, &o, MAX_REGISTRY_BYTES);
        let name = r.attribute(object, "_name").unwrap().unwrap();
        assert_eq!(r.name(name).unwrap(), "worker-0");
        // Not a str: refused.
        assert!(r.name(0x2000).is_err());
        // A dict of another type, keys that say too much, keys unmapped: errors.
        dict(&mut mem, 0x3100, 0x70, 0x2000);
        let mut huge = keys(3, 1, &[]);
        huge[24..32].copy_from_slice(&u64::MAX.to_ne_bytes());
        mem.put(0x2800, &huge);
        dict(&mut mem, 0x3200, DICT_TYPE, 0x2800);
        dict(&mut mem, 0x3300, DICT_TYPE, 0xdead_0000);
        let mut r = registry(&mem, &o, MAX_REGISTRY_BYTES);
        for bad in [0x3100, 0x3200, 0x3300, 0x9999_0000] {
            assert!(r.get(bad, "threading").is_err(), "{bad:#x}");
        }
        // A budget too small: an error, not a read past it.
        let mut r = registry(&mem, &o, 100);
        assert!(r.get(0x3000, "threading").is_err());
        assert!(r.exhausted, "a refusal for the budget says so");
        // Offsets that point past what is read: nothing panics.
        let far = Offsets {
            ob_type: 1 << 20,
            unicode_length: 1 << 20,
            ..PY311
        };
        let mut r = registry(&mem, &far, MAX_REGISTRY_BYTES);
        let _ = r.get(0x3000, "threading");
        let _ = r.attribute(object, "_name");
    }

    /// A keys object of `log2_size` slots, of `kind`, with `entries` (each its words).
    fn keys(log2_size: u8, kind: u8, entries: &[&[u64]]) -> Vec<u8> {
        let index_log2 = if log2_size < 8 { 0 } else { 1 };
        let mut b = vec![0u8; KEYS_HEADER];
        b[0] = 1;
        b[8] = log2_size;
        b[9] = log2_size + index_log2;
        b[10] = kind;
        b[24..32].copy_from_slice(&(entries.len() as u64).to_ne_bytes());
        b.resize(KEYS_HEADER + (1usize << b[9]), 0xff);
        for e in entries {
            for w in *e {
                b.extend_from_slice(&w.to_ne_bytes());
            }
        }
        b
    }

    #[test]
    fn dict_tables_are_parsed_and_checked() {
        // A general table (int keys): hash, key, value; a deleted entry left out.
        let b = keys(
            3,
            0,
            &[&[0x7f00_1000, 0xa0, 0xb0], &[5, 0, 0], &[7, 0xa1, 0xb1]],
        );
        let t = KeysTable::parse(&b, 100).unwrap();
        assert_eq!((t.kind, t.entries_at, t.count), (0, 40, 3));
        let at = t.entries_at as usize;
        let got: Vec<Entry> = entries(t.kind, &b[at..at + 3 * 24], None).collect();
        assert_eq!(
            got,
            [
                Entry {
                    hash: Some(0x7f00_1000),
                    key: 0xa0,
                    value: 0xb0
                },
                Entry {
                    hash: Some(7),
                    key: 0xa1,
                    value: 0xb1
                }
            ]
        );
        // A split table (str keys): values from the values array, by position.
        let b = keys(8, 2, &[&[0xc0, 0], &[0xc1, 0]]);
        let t = KeysTable::parse(&b, 100).unwrap();
        assert_eq!((t.entries_at, t.entry_size()), (32 + 512, 16));
        let values: Vec<u8> = [0xd0u64, 0xd1]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let at = t.entries_at as usize;
        let got: Vec<(u64, u64)> = entries(t.kind, &b[at..], Some(&values))
            .map(|e| (e.key, e.value))
            .collect();
        assert_eq!(got, [(0xc0, 0xd0), (0xc1, 0xd1)]);
        // Short values: entries past them have none, and are left out.
        assert_eq!(entries(t.kind, &b[at..], Some(&values[..8])).count(), 1);
        // Sizes that disagree, an unknown kind, too many entries, a short header.
        let mut bad = keys(3, 0, &[]);
        bad[9] = 4;
        assert!(KeysTable::parse(&bad, 100).is_err());
        assert!(KeysTable::parse(&keys(3, 3, &[]), 100).is_err());
        let mut huge = keys(3, 0, &[]);
        (huge[8], huge[9]) = (40, 41);
        assert!(KeysTable::parse(&huge, 100).is_err());
        let six: Vec<&[u64]> = vec![&[1, 1, 1]; 6];
        assert!(KeysTable::parse(&keys(3, 0, &six), 100).is_err());
        let mut big = keys(3, 0, &[]);
        big[24..32].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(KeysTable::parse(&big, 100).is_err());
        assert!(KeysTable::parse(&keys(4, 0, &six), 5).is_err());
        assert!(KeysTable::parse(&b[..20], 100).is_err());
    }
}
