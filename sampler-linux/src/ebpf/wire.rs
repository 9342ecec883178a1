//! The bytes exchanged with the BPF program (`bpf/sampler.bpf.c`): the configuration
//! words user space writes (`struct ctx_config`, the global options, and `struct
//! ctx_target`, one process's entry of the `targets` map), and the samples the program
//! sends through its ring buffer (`struct ctx_sample`). This file mirrors those C
//! structures: a change to one is a change to both, and the C file's `_Static_assert`s
//! check the same offsets as the constants here.
//! Both are parsed and built field by field from native-endian bytes, so no `unsafe`
//! reinterpretation of memory is needed.

use std::io;

use otel_ctx_codec::record::{RecordHeader, RECORD_HEADER_SIZE};

use otel_ctx_reader::thread::tls::{Resolution, SampleError, SlotContents, SlotLocation, TlsError};
use otel_ctx_reader::UserRegisters;

/// Number of `u64` words of `struct ctx_config`.
pub(crate) const CONFIG_WORDS: usize = 6;

/// Number of `u64` words of `struct ctx_target`.
pub(crate) const TARGET_WORDS: usize = 8;

/// The most processes one eBPF sampler follows at once (`MAX_PROCESSES`, the entries of
/// the program's `targets` map): the sampler's [`MAX_PROCESSES`](crate::MAX_PROCESSES).
pub const EBPF_MAX_PROCESSES: usize = crate::MAX_PROCESSES;

/// The most user stack a sample carries (`MAX_STACK`): the sampler's
/// [`MAX_STACK_SIZE`](crate::stack::MAX_STACK_SIZE).
pub const EBPF_MAX_STACK: usize = crate::stack::MAX_STACK_SIZE;

/// The most kernel frames a sample carries (`MAX_KSTACK_FRAMES`).
pub const EBPF_MAX_KERNEL_FRAMES: usize = 32;

/// What the program captures besides the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Capture {
    /// Bytes of user stack to copy (0: neither registers nor stack).
    pub stack_size: usize,
    /// The kernel stack too.
    pub kernel_stack: bool,
    /// Bytes waiting in the ring before the program wakes user space.
    pub wakeup_bytes: u64,
    /// Off-CPU samples of the waits at least this long, in nanoseconds; 0: none.
    pub off_cpu_threshold_ns: u64,
    /// One switch away from a CPU in how many is followed (at least 1).
    pub off_cpu_one_in: u32,
    /// Waits shorter than this (ns) are sampled by time; 0: every one.
    pub off_cpu_period_ns: u64,
}

/// `off_cpu_chance`: a switch is followed when a random `u32` is below it; `1 << 32`
/// follows every one.
fn off_cpu_chance(one_in: u32) -> u64 {
    (1u64 << 32) / u64::from(one_in.max(1))
}

/// The largest attrs-data a sample carries (`MAX_ATTRS`): records of up to 640 bytes.
pub const EBPF_MAX_ATTRS: usize = 612;

/// The largest record the eBPF sampler copies: 640 bytes, the size the spec recommends as
/// every reader's bound.
pub const EBPF_MAX_RECORD_SIZE: usize = RECORD_HEADER_SIZE + EBPF_MAX_ATTRS;

/// `MODE_OFF`: no slot to look for (the program still copies the registers and stack
/// when configured to).
const MODE_OFF: u64 = 0;
const MODE_TP_OFFSET: u64 = 1;
const MODE_DTV: u64 = 2;
/// The modes by their names in the program.
#[cfg(test)]
pub(crate) const MODES: [(&str, u64); 3] = [
    ("MODE_OFF", MODE_OFF),
    ("MODE_TP_OFFSET", MODE_TP_OFFSET),
    ("MODE_DTV", MODE_DTV),
];

/// `struct ctx_config` as words: what the program captures of every process.
pub(crate) fn config_words(capture: Capture) -> [u64; CONFIG_WORDS] {
    [
        capture.stack_size.min(EBPF_MAX_STACK) as u64,
        u64::from(capture.kernel_stack),
        capture.wakeup_bytes,
        capture.off_cpu_threshold_ns,
        off_cpu_chance(capture.off_cpu_one_in),
        // Below 1 << 32, as the program's arithmetic needs (4.3 s).
        capture.off_cpu_period_ns.min(u64::from(u32::MAX)),
    ]
}

/// `struct ctx_target` as words: what the program needs to find one process's slot;
/// without a resolution, `MODE_OFF` (the process's stacks only, no slot to read).
pub(crate) fn target_words(
    resolution: Option<&Resolution>,
    generation: u64,
    max_record_size: usize,
) -> [u64; TARGET_WORDS] {
    // The same layouts as `Resolution::slot_address`: where the DTV pointer sits relative
    // to the thread pointer, the entry size, and where the DTV's length word is.
    let location = resolution.map(|r| (r, r.location));
    let (mode, tp_offset, module_id, offset, entry_shift, bound_at) = match location {
        None => (MODE_OFF, 0, 0, 0, 0, 0i64),
        Some((_, SlotLocation::TpOffset(offset))) => (MODE_TP_OFFSET, offset, 0, 0, 0, 0i64),
        Some((resolution, SlotLocation::Dtv { module_id, offset })) => {
            match resolution.libc.dtv_layout(resolution.machine) {
                Some(layout) => (
                    MODE_DTV,
                    layout.pointer_at,
                    module_id,
                    offset,
                    u64::from(layout.entry_shift),
                    layout.bound_at,
                ),
                // No C library, no DTV: nothing to configure.
                None => (MODE_OFF, 0, 0, 0, 0, 0),
            }
        }
    };
    let max_attrs = max_record_size
        .saturating_sub(RECORD_HEADER_SIZE)
        .min(EBPF_MAX_ATTRS);
    [
        mode,
        tp_offset as u64,
        module_id,
        offset,
        entry_shift,
        bound_at as u64,
        generation,
        max_attrs as u64,
    ]
}

// `struct ctx_sample`'s offsets (the C file asserts the same ones).
const TID: usize = 0;
const PID: usize = 4;
const STATE: usize = 8;
const FAULT_WHAT: usize = 12;
const GENERATION: usize = 16;
const THREAD_POINTER: usize = 24;
const SLOT: usize = 32;
const RECORD: usize = 40;
const FAULT_ADDR: usize = 48;
const ATTRS_LEN: usize = 56;
const HEADER: usize = 58;
const ATTRS: usize = HEADER + RECORD_HEADER_SIZE;
const REGS: usize = ATTRS + EBPF_MAX_ATTRS + 6;
const STACK_LEN: usize = REGS + 32;
const KSTACK_LEN: usize = STACK_LEN + 4;
const SYSCALL: usize = KSTACK_LEN + 2;
const KSTACK: usize = KSTACK_LEN + 4;
const PY_STATE: usize = KSTACK + 8 * EBPF_MAX_KERNEL_FRAMES;
const PY_COUNT: usize = PY_STATE + 4;
const PY_FAULT: usize = PY_COUNT + 4;
const OFF_CPU: usize = PY_FAULT + 8;
const PY: usize = OFF_CPU + 8;
/// Bytes of one `struct py_frame`.
pub(crate) const PY_FRAME_SIZE: usize = 32;
/// The most Python frames (and shims) a sample carries (`MAX_PY_FRAMES`): fewer than the
/// ptrace walk's [`MAX_PYTHON_FRAMES`](crate::python::MAX_PYTHON_FRAMES), for the
/// verifier's bound on one program; a longer chain is `PY_TRUNCATED`.
pub const EBPF_MAX_PYTHON_FRAMES: usize = 64;
const STACK: usize = PY + PY_FRAME_SIZE * EBPF_MAX_PYTHON_FRAMES;
/// The part of `struct ctx_sample` every entry has: all but the stack bytes, of which
/// the entry carries `stack_len`.
pub(crate) const SAMPLE_SIZE: usize = STACK;

// The offsets `bpf/sampler.bpf.c` asserts for `struct ctx_sample`.
const _: () = assert!(PID == 4 && STATE == 8 && FAULT_WHAT == 12 && GENERATION == 16);
const _: () = assert!(FAULT_ADDR == 48 && ATTRS_LEN == 56 && HEADER == 58 && ATTRS == 86);
const _: () = assert!(REGS == 704 && STACK_LEN == 736 && KSTACK_LEN == 740 && SYSCALL == 742);
const _: () = assert!(KSTACK == 744 && PY_STATE == 1000 && OFF_CPU == 1016 && PY == 1024);
const _: () = assert!(STACK == 1024 + 32 * 64);

const STATE_NO_TLS_BLOCK: u32 = 0;
const STATE_NULL: u32 = 1;
const STATE_INVALID: u32 = 2;
const STATE_RECORD: u32 = 3;
const STATE_MISALIGNED: u32 = 4;
const STATE_TOO_LARGE: u32 = 5;
const STATE_FAULT: u32 = 6;
const STATE_NO_CONFIG: u32 = 7;

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut w = [0u8; 2];
    w.copy_from_slice(&b[at..at + 2]);
    u16::from_ne_bytes(w)
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// One decoded ring-buffer entry, its attrs-data left in the entry.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub tid: u32,
    /// The thread's process.
    pub pid: u32,
    pub generation: u64,
    /// Whether the program had a slot to look for (`false`: `MODE_OFF`, the entry of a
    /// process followed for its stacks only, whose contents read as `Null`).
    pub configured: bool,
    pub thread_pointer: u64,
    pub slot: Option<u64>,
    pub contents: Result<SlotContents, SampleError>,
    /// The attrs-data's range in the entry (empty unless a valid record).
    pub attrs: std::ops::Range<usize>,
    /// The user registers (all 0 when the program copies no stack).
    pub registers: UserRegisters,
    /// The user stack's range in the entry, from the stack pointer up.
    pub stack: std::ops::Range<usize>,
    /// The kernel return addresses, innermost first.
    pub kernel_frames: std::ops::Range<usize>,
    /// What the Python walk found (`PY_*`), where it faulted, and its frames' range.
    pub python: (u32, u64, std::ops::Range<usize>),
    /// An off-CPU sample: how long the thread was away from a CPU, in nanoseconds; 0
    /// for a tick's sample.
    pub off_cpu_ns: u64,
    /// An off-CPU sample: the number of the system call it waited in.
    pub syscall: Option<u16>,
}

/// The `n`-th native-endian word of `bytes`.
pub(crate) fn word(bytes: &[u8], n: usize) -> u64 {
    u64_at(bytes, n * 8)
}

fn fault_error(what: u32, address: u64) -> SampleError {
    let source = io::Error::from_raw_os_error(libc::EFAULT);
    let tls = |what| {
        SampleError::Tls(TlsError::Memory {
            what,
            addr: address,
            source: io::Error::from_raw_os_error(libc::EFAULT),
        })
    };
    let what = match what {
        1 => return tls("the thread's DTV pointer"),
        2 => return tls("the DTV length"),
        3 => return tls("a DTV entry"),
        4 => "the otel_thread_ctx_v1 slot",
        5 => "the record header",
        6 => "the record's attrs-data",
        7 => "the task's thread pointer",
        _ => "target memory",
    };
    SampleError::Memory {
        what,
        address,
        source,
    }
}

/// Decodes a ring-buffer entry; `None` for an entry that is not a sample of this
/// program (wrong size or fields that disagree). An entry taken without a slot to look
/// for (`MODE_OFF`) decodes with `configured == false`.
pub(crate) fn decode(entry: &[u8], limit: usize) -> Option<Decoded> {
    if entry.len() < SAMPLE_SIZE {
        return None;
    }
    let stack_len = u32_at(entry, STACK_LEN) as usize;
    let kernel_frames = usize::from(u16_at(entry, KSTACK_LEN));
    // The program sends exactly the stack bytes it copied, never more than it has room
    // for.
    if stack_len > EBPF_MAX_STACK
        || entry.len() != SAMPLE_SIZE + stack_len
        || kernel_frames > EBPF_MAX_KERNEL_FRAMES
    {
        return None;
    }
    let py_count = u32_at(entry, PY_COUNT) as usize;
    if py_count > EBPF_MAX_PYTHON_FRAMES {
        return None;
    }
    let state = u32_at(entry, STATE);
    let slot = u64_at(entry, SLOT);
    let record = u64_at(entry, RECORD);
    let header = || RecordHeader::read(&entry[HEADER..ATTRS]).ok();
    let mut attrs = ATTRS..ATTRS;
    let contents = match state {
        STATE_NO_TLS_BLOCK | STATE_NULL | STATE_NO_CONFIG => Ok(SlotContents::Null),
        STATE_INVALID => Ok(SlotContents::Invalid {
            address: record,
            valid: entry[HEADER + 24],
        }),
        STATE_RECORD => {
            let header = header()?;
            let len = usize::from(u16_at(entry, ATTRS_LEN));
            // The program copies exactly attrs_data_size bytes, never more than fit.
            if len != usize::from(header.attrs_data_size()) || len > EBPF_MAX_ATTRS {
                return None;
            }
            attrs = ATTRS..ATTRS + len;
            Ok(SlotContents::Record {
                address: record,
                header,
            })
        }
        STATE_MISALIGNED => Err(SampleError::Misaligned { address: record }),
        STATE_TOO_LARGE => Err(SampleError::RecordTooLarge {
            size: header()?.record_size(),
            limit,
        }),
        STATE_FAULT => Err(fault_error(
            u32_at(entry, FAULT_WHAT),
            u64_at(entry, FAULT_ADDR),
        )),
        _ => return None,
    };
    Some(Decoded {
        tid: u32_at(entry, TID),
        pid: u32_at(entry, PID),
        generation: u64_at(entry, GENERATION),
        configured: state != STATE_NO_CONFIG,
        thread_pointer: u64_at(entry, THREAD_POINTER),
        // The program leaves 0 where no slot was computed.
        slot: (slot != 0).then_some(slot),
        contents,
        attrs,
        registers: UserRegisters {
            ip: u64_at(entry, REGS),
            sp: u64_at(entry, REGS + 8),
            fp: u64_at(entry, REGS + 16),
            lr: u64_at(entry, REGS + 24),
        },
        stack: STACK..STACK + stack_len,
        kernel_frames: KSTACK..KSTACK + 8 * kernel_frames,
        python: (
            u32_at(entry, PY_STATE),
            u64_at(entry, PY_FAULT),
            PY..PY + PY_FRAME_SIZE * py_count,
        ),
        off_cpu_ns: u64_at(entry, OFF_CPU),
        // The program sends the number plus 1, 0 for none.
        syscall: u16_at(entry, SYSCALL).checked_sub(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_reader::thread::tls::{AccessModel, SymbolTable};
    use otel_ctx_reader::thread::tls::{Libc, Machine};

    fn resolution(location: SlotLocation, libc: Libc, machine: Machine) -> Resolution {
        Resolution {
            module: "/lib/libw.so".into(),
            defining_module: "/lib/libw.so".into(),
            symbol_table: SymbolTable::Dynsym,
            model: AccessModel::GeneralDynamic,
            location,
            libc,
            machine,
        }
    }

    #[test]
    fn configuration_mirrors_slot_address() {
        let r = resolution(SlotLocation::TpOffset(-72), Libc::Glibc, Machine::X86_64);
        let capture = Capture {
            stack_size: 1 << 20,
            kernel_stack: true,
            wakeup_bytes: 4096,
            off_cpu_threshold_ns: 0,
            off_cpu_one_in: 1,
            off_cpu_period_ns: 0,
        };
        assert_eq!(
            config_words(capture),
            [65536, 1, 4096, 0, 1 << 32, 0],
            "the stack is cut to what the program has room for"
        );
        // Off-CPU samples of waits of 200 us or more, one switch in 4 followed, those
        // under 10 ms sampled by time; a period past the program's arithmetic is cut.
        let off_cpu = Capture {
            off_cpu_threshold_ns: 200_000,
            off_cpu_one_in: 4,
            off_cpu_period_ns: 10_000_000,
            ..capture
        };
        assert_eq!(config_words(off_cpu)[3..], [200_000, 1 << 30, 10_000_000]);
        let long = Capture {
            off_cpu_period_ns: 1 << 40,
            ..off_cpu
        };
        assert_eq!(config_words(long)[5], u64::from(u32::MAX));
        assert_eq!(
            target_words(Some(&r), 3, 640),
            [1, (-72i64) as u64, 0, 0, 0, 0, 3, 612]
        );
        let dtv = SlotLocation::Dtv {
            module_id: 2,
            offset: 16,
        };
        for (libc, machine, dtv_at, shift, bound_at) in [
            (Libc::Glibc, Machine::X86_64, 8i64, 4, -16i64),
            (Libc::Glibc, Machine::Aarch64, 0, 4, -16),
            (Libc::Musl, Machine::X86_64, 8, 3, 0),
            (Libc::Musl, Machine::Aarch64, -8, 3, 0),
        ] {
            let w = target_words(Some(&resolution(dtv, libc, machine)), 1, 100);
            assert_eq!(
                w,
                [2, dtv_at as u64, 2, 16, shift, bound_at as u64, 1, 72],
                "{libc:?} {machine:?}"
            );
        }
        // A process followed for its stacks only: no slot to look for.
        assert_eq!(target_words(None, 9, 640), [0, 0, 0, 0, 0, 0, 9, 612]);
    }

    fn entry(state: u32, header: &[u8; 28], attrs: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; SAMPLE_SIZE];
        e[TID..TID + 4].copy_from_slice(&77u32.to_ne_bytes());
        e[PID..PID + 4].copy_from_slice(&70u32.to_ne_bytes());
        e[STATE..STATE + 4].copy_from_slice(&state.to_ne_bytes());
        e[GENERATION..GENERATION + 8].copy_from_slice(&5u64.to_ne_bytes());
        e[THREAD_POINTER..THREAD_POINTER + 8].copy_from_slice(&0x7000u64.to_ne_bytes());
        e[SLOT..SLOT + 8].copy_from_slice(&0x6fc0u64.to_ne_bytes());
        e[RECORD..RECORD + 8].copy_from_slice(&0x9000u64.to_ne_bytes());
        e[ATTRS_LEN..ATTRS_LEN + 2].copy_from_slice(&(attrs.len() as u16).to_ne_bytes());
        e[HEADER..ATTRS].copy_from_slice(header);
        e[ATTRS..ATTRS + attrs.len()].copy_from_slice(attrs);
        e
    }

    #[test]
    fn samples_decode_to_the_readers_types() {
        let mut header = [0u8; 28];
        header[0] = 0x11;
        header[24] = 1;
        header[26..28].copy_from_slice(&4u16.to_ne_bytes());
        let e = entry(STATE_RECORD, &header, &[0, 2, b'h', b'i']);
        let d = decode(&e, 640).expect("a record");
        assert_eq!(
            (d.tid, d.pid, d.generation, d.thread_pointer),
            (77, 70, 5, 0x7000)
        );
        assert_eq!(d.slot, Some(0x6fc0));
        assert_eq!(&e[d.attrs.clone()], &[0, 2, b'h', b'i']);
        match d.contents {
            Ok(SlotContents::Record { address, header }) => {
                assert_eq!(address, 0x9000);
                assert_eq!(header.trace_id[0], 0x11);
            }
            other => panic!("{other:?}"),
        }
        // A length that disagrees with the header is not trusted.
        let mut bad = e.clone();
        bad[ATTRS_LEN..ATTRS_LEN + 2].copy_from_slice(&3u16.to_ne_bytes());
        assert!(decode(&bad, 640).is_none());
        // Truncated entries are refused.
        assert!(decode(&e[..SAMPLE_SIZE - 1], 640).is_none());
        assert_eq!(d.registers, UserRegisters::default());
        assert_eq!(d.off_cpu_ns, 0, "a tick's sample");
        let mut away = e.clone();
        away[OFF_CPU..OFF_CPU + 8].copy_from_slice(&1_500_000u64.to_ne_bytes());
        away[SYSCALL..SYSCALL + 2].copy_from_slice(&203u16.to_ne_bytes());
        let d = decode(&away, 640).expect("off-CPU");
        assert_eq!((d.off_cpu_ns, d.syscall), (1_500_000, Some(202)));
        assert_eq!(decode(&e, 640).expect("a tick's").syscall, None);
        assert!(d.stack.is_empty() && d.kernel_frames.is_empty());

        // Registers, stack bytes and kernel frames, as many as the entry says it has.
        let mut with_stack = e.clone();
        for (i, value) in [0x401000u64, 0x7ffd_0000, 0x7ffd_0100, 0]
            .iter()
            .enumerate()
        {
            with_stack[REGS + 8 * i..REGS + 8 * i + 8].copy_from_slice(&value.to_ne_bytes());
        }
        with_stack[STACK_LEN..STACK_LEN + 4].copy_from_slice(&16u32.to_ne_bytes());
        with_stack[KSTACK_LEN..KSTACK_LEN + 2].copy_from_slice(&2u16.to_ne_bytes());
        with_stack[KSTACK..KSTACK + 8].copy_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        with_stack.extend_from_slice(&[0xab; 16]);
        let d = decode(&with_stack, 640).expect("a sample with a stack");
        assert_eq!(d.registers.ip, 0x401000);
        assert_eq!(d.registers.sp, 0x7ffd_0000);
        assert_eq!(&with_stack[d.stack.clone()], &[0xab; 16]);
        assert_eq!(
            word(&with_stack[d.kernel_frames.clone()], 0),
            0xffff_ffff_8100_0000
        );
        assert_eq!(d.kernel_frames.len(), 16);
        // A stack length that disagrees with the entry's is not trusted.
        assert!(decode(&with_stack[..with_stack.len() - 1], 640).is_none());
        let mut lying = with_stack.clone();
        lying[KSTACK_LEN..KSTACK_LEN + 2].copy_from_slice(&33u16.to_ne_bytes());
        assert!(decode(&lying, 640).is_none());

        header[24] = 0;
        let d = decode(&entry(STATE_INVALID, &header, &[]), 640).expect("invalid");
        assert!(matches!(
            d.contents,
            Ok(SlotContents::Invalid {
                address: 0x9000,
                valid: 0
            })
        ));
        header[26..28].copy_from_slice(&1000u16.to_ne_bytes());
        let d = decode(&entry(STATE_TOO_LARGE, &header, &[]), 640).expect("too large");
        assert!(matches!(
            d.contents,
            Err(SampleError::RecordTooLarge {
                size: 1028,
                limit: 640
            })
        ));
        let d = decode(&entry(STATE_NULL, &header, &[]), 640).expect("null");
        assert!(matches!(d.contents, Ok(SlotContents::Null)));
        let mut none = entry(STATE_NO_TLS_BLOCK, &header, &[]);
        none[SLOT..SLOT + 8].copy_from_slice(&0u64.to_ne_bytes());
        let d = decode(&none, 640).expect("no block");
        assert_eq!(d.slot, None);

        let mut f = entry(STATE_FAULT, &header, &[]);
        f[FAULT_WHAT..FAULT_WHAT + 4].copy_from_slice(&5u32.to_ne_bytes());
        f[FAULT_ADDR..FAULT_ADDR + 8].copy_from_slice(&0x9000u64.to_ne_bytes());
        let d = decode(&f, 640).expect("fault");
        let err = d.contents.unwrap_err().to_string();
        assert!(
            err.contains("record header") && err.contains("0x9000"),
            "{err}"
        );
        assert!(d.configured);
        // Without a slot to look for, the contents read as Null, marked unconfigured.
        let d = decode(&entry(STATE_NO_CONFIG, &header, &[]), 640).expect("stacks only");
        assert!(!d.configured && matches!(d.contents, Ok(SlotContents::Null)));
        assert!(decode(&entry(99, &header, &[]), 640).is_none());
    }
}
