// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * The thread-context sampler: a BPF program run on every tick of a CPU-clock perf event
 * (one event per CPU), and, for off-CPU time, two run at tracepoints (see
 * `note_switch` and `sample_off_cpu` below). When the interrupted task belongs to one of the target processes
 * (the `targets` map, keyed by process id), it finds the task's `otel_thread_ctx_v1` slot
 * with the parameters user space computed from that process's reader's `Resolution`,
 * follows the slot to the record, and sends the process and thread ids, the outcome, the 28-byte header and the attrs-data to user space through a ring buffer;
 * when configured to, also the thread's user registers (instruction, stack and frame
 * pointers; the link register on aarch64), a copy of the top of its user stack, and the
 * kernel stack, for a profiler to unwind.
 *
 * The task is not running while the program runs (the tick interrupted it), so the
 * record is read as a signal handler would see it: the spec's reader protocol.
 *
 * Built by clang (`-target bpf -O2 -g`); the thread pointer is read through BTF / CO-RE
 * relocations on the minimal kernel structures below, so no vmlinux.h is needed. The
 * layout of `struct ctx_config`, `struct ctx_target` and `struct ctx_sample` is mirrored
 * by `sampler-linux/src/ebpf/wire.rs`.
 */

#include "types.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* Map types and flags of the kernel's UAPI (stable numbers). */
#define MAP_TYPE_HASH 1
#define MAP_TYPE_ARRAY 2
#define MAP_TYPE_PERCPU_ARRAY 6
#define MAP_TYPE_RINGBUF 27
#define MAP_TYPE_LRU_HASH 9
#define MAP_TYPE_TASK_STORAGE 29
#define MAP_NO_PREALLOC 1             /* BPF_F_NO_PREALLOC, which local storage requires */
#define PF_KTHREAD 0x00200000         /* task_struct.flags: a kernel thread */
#define LOCAL_STORAGE_GET_CREATE 1    /* BPF_LOCAL_STORAGE_GET_F_CREATE */

/* The kernel's structures, reduced to the fields read; CO-RE relocates the offsets
 * against the running kernel's BTF. */
#if defined(OTEL_CTX_ARCH_X86_64)
struct thread_struct {
    unsigned long fsbase;
} __attribute__((preserve_access_index));
#elif defined(OTEL_CTX_ARCH_AARCH64)
struct thread_struct {
    struct {
        unsigned long tp_value;
    } uw;
} __attribute__((preserve_access_index));
#else
#error "define OTEL_CTX_ARCH_X86_64 or OTEL_CTX_ARCH_AARCH64"
#endif

/* The scheduler's account of a task: its time on a CPU so far (ns), brought up to date
 * whenever it leaves one. */
struct sched_entity {
    __u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
    unsigned int flags; /* PF_* */
    int pid;            /* the thread id */
    int tgid;           /* the process id */
    struct thread_struct thread;
    struct sched_entity se;
} __attribute__((preserve_access_index));

/* The user registers saved at the kernel's entry (`task_pt_regs`), and the number of
 * the system call the task is in (negative outside one). */
#if defined(OTEL_CTX_ARCH_X86_64)
struct pt_regs {
    unsigned long bp;
    unsigned long orig_ax;
    unsigned long ip;
    unsigned long sp;
} __attribute__((preserve_access_index));
#else
struct pt_regs {
    __u64 regs[31];
    __u64 sp;
    __u64 pc;
    __s32 syscallno;
} __attribute__((preserve_access_index));
#endif

/* The record: 28-byte header, then attrs-data. The largest attrs-data sent is
 * MAX_ATTRS bytes, so records of up to 640 bytes (the size the spec recommends as the
 * readers' limit) arrive whole. */
#define HEADER_SIZE 28
#define MAX_ATTRS 612

/* The most user stack a sample carries, and the kernel frames. The stack is copied a
 * page at a time, so that the end of the stack's mapping ends the copy instead of
 * failing it. */
#define MAX_STACK (64 * 1024)
#define STACK_CHUNK 4096
#define MAX_KSTACK_FRAMES 32

/* The CPython frame walk (`python` map): at most MAX_PY_FRAMES entries per sample
 * (frames and shims), at most MAX_PY_THREADS thread states looked through. */
#define MAX_PY_FRAMES 64
#define MAX_PY_THREADS 64
/* Bytes of a _PyInterpreterFrame read (every field the walk uses lies in them), and of
 * a code object from its first stamp field (co_firstlineno to co_filename). */
#define PY_FRAME_HEADER 80
#define PY_CODE_STAMP 56
#define PY_NONE 0xffffffffffffffffULL

/* What the Python walk found (`py_state`). */
#define PY_OFF 0         /* the process has no Python configuration */
#define PY_OK 1          /* `py_count` entries, newest first */
#define PY_NO_THREAD 2   /* no thread state has the thread's id */
#define PY_FAULT 3       /* memory could not be read at `py_fault_addr` */
#define PY_TRUNCATED 4   /* MAX_PY_FRAMES entries and the chain goes on (or loops) */

/* `struct py_frame.flags`, as `python::PythonFrame`'s. */
#define PY_FLAG_ENTRY 1
#define PY_FLAG_GENERATOR 2
#define PY_FLAG_SHIM 4
/* CPython's FRAME_OWNED_BY_GENERATOR (Include/internal/pycore_frame.h, 3.11 to 3.14). */
#define PY_OWNED_BY_GENERATOR 1

/* How the slot is found (`mode`). */
#define MODE_OFF 0
#define MODE_TP_OFFSET 1
#define MODE_DTV 2

/* What a sample reports (`state`). */
#define STATE_NO_TLS_BLOCK 0 /* no DTV, DTV too short, or entry not allocated */
#define STATE_NULL 1         /* the slot is NULL */
#define STATE_INVALID 2      /* a record whose valid byte is not 1 */
#define STATE_RECORD 3       /* a valid record, attrs-data included */
#define STATE_MISALIGNED 4   /* the slot points at an odd address */
#define STATE_TOO_LARGE 5    /* a valid record larger than the limit */
#define STATE_FAULT 6        /* memory could not be read; `fault_what` says which */
#define STATE_NO_CONFIG 7    /* user space has not configured the process */

/* Which read faulted (`fault_what`). */
#define FAULT_DTV_POINTER 1
#define FAULT_DTV_BOUND 2
#define FAULT_DTV_ENTRY 3
#define FAULT_SLOT 4
#define FAULT_HEADER 5
#define FAULT_ATTRS 6
#define FAULT_THREAD_POINTER 7

/* The most processes sampled at once (`EBPF_MAX_PROCESSES`); user space may set fewer
 * before loading. */
#define MAX_PROCESSES 1024

/* Written by user space: what applies to every process; one entry. All words are u64 so
 * the layout has no padding. */
struct ctx_config {
    __u64 stack_size;  /* bytes of user stack to copy (0: no registers, no stack) */
    __u64 kernel_stack; /* 1: the kernel stack too */
    __u64 wakeup_bytes; /* wake user space once this much is waiting in the ring */
    __u64 off_cpu_threshold; /* off-CPU samples of waits at least this long (ns); 0: none */
    __u64 off_cpu_chance; /* a call is followed if a random u32 is below it (1 << 32: all);
                           * user space sets (1 << 32) / N, one call in N */
    __u64 off_cpu_period; /* a wait of t shorter than this (ns, below 1 << 32) is sampled
                           * with chance t / period, standing for the period; 0: every one */
};

/* Written by user space: one target process, the value of its `targets` entry. */
struct ctx_target {
    __u64 mode;        /* MODE_* */
    __s64 tp_offset;   /* MODE_TP_OFFSET: slot = tp + tp_offset; MODE_DTV: dtv pointer at tp + tp_offset */
    __u64 module_id;   /* MODE_DTV: the module's DTV index */
    __u64 offset;      /* MODE_DTV: the slot's offset in the module's TLS block */
    __u64 entry_shift; /* MODE_DTV: log2 of the DTV entry size (glibc 16, musl 8) */
    __s64 bound_at;    /* MODE_DTV: the DTV length word at dtv + bound_at (glibc -16, musl 0) */
    __u64 generation;  /* copied into each sample: which configuration computed it */
    __u64 max_attrs;   /* largest attrs-data sent; records beyond are STATE_TOO_LARGE */
};

/* Written by user space: one Python process's offsets (`python::Offsets`), the value
 * of its `python` entry. PY_NONE marks a field the version has not. */
struct py_target {
    __u64 interpreters_head_at; /* &_PyRuntime.interpreters.head */
    __u64 threads_head;         /* PyInterpreterState.threads.head */
    __u64 tstate_next;
    __u64 tstate_native_thread_id;
    __u64 tstate_cframe;        /* 3.11: PyThreadState.cframe; else PY_NONE */
    __u64 current_frame;        /* _PyCFrame.current_frame or PyThreadState.current_frame */
    __u64 frame_code;
    __u64 frame_previous;
    __u64 frame_instr;
    __u64 frame_owner;
    __u64 frame_is_entry;       /* 3.11; else PY_NONE */
    __u64 owner_shim;           /* the smallest owner of a shim; PY_NONE in 3.11 */
    __u64 code_tag_mask;
    __u64 code_stamp_from;      /* min(co_firstlineno, co_filename), 8-aligned */
    __u64 code_firstlineno;     /* from code_stamp_from (4-aligned) */
    __u64 code_filename;        /* from code_stamp_from (8-aligned) */
    __u64 code_adaptive;
};

/* One entry of a sample's Python frames (`python::PythonFrame`). */
struct py_frame {
    __u64 frame;
    __u64 code;
    __u64 stamp;       /* co_filename ^ (co_firstlineno << 48) */
    __u32 instruction; /* code units from co_code_adaptive */
    __u32 flags;
};

/* Sent to user space. Field order keeps every field naturally aligned. */
struct ctx_sample {
    __u32 tid;
    __u32 pid;         /* the thread's process (its thread group id) */
    __u32 state;
    __u32 fault_what;  /* STATE_FAULT: FAULT_* */
    __u64 generation;
    __u64 thread_pointer;
    __u64 slot;        /* 0 when there is no slot (STATE_NO_TLS_BLOCK) */
    __u64 record;      /* the slot's value */
    __u64 fault_addr;  /* STATE_FAULT: the address that could not be read */
    __u16 attrs_len;   /* bytes of attrs-data that follow the header */
    __u8 header[HEADER_SIZE];
    __u8 attrs[MAX_ATTRS];
    __u8 pad[6];
    __u64 regs[4];     /* ip, sp, fp, lr (0 on x86_64); all 0 without a stack */
    __u32 stack_len;   /* bytes of `stack` that follow, copied from regs[1] up */
    __u16 kstack_len;  /* kernel frames in `kstack` */
    __u16 syscall;     /* an off-CPU sample: the system call it waited in, plus 1; 0 unknown */
    __u64 kstack[MAX_KSTACK_FRAMES];
    __u32 py_state;    /* PY_* */
    __u32 py_count;    /* entries of `py` */
    __u64 py_fault_addr;
    __u64 off_cpu_ns;  /* an off-CPU sample: how long the thread was away; 0: a tick's */
    struct py_frame py[MAX_PY_FRAMES];
    __u8 stack[MAX_STACK]; /* only stack_len bytes of it are sent */
};

/* The offsets `src/ebpf/wire.rs` reads. */
_Static_assert(sizeof(struct ctx_config) == 6 * 8, "ctx_config is 6 words");
_Static_assert(sizeof(struct ctx_target) == 8 * 8, "ctx_target is 8 words");
_Static_assert(__builtin_offsetof(struct ctx_sample, pid) == 4, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, state) == 8, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, fault_what) == 12, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, generation) == 16, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, fault_addr) == 48, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, attrs_len) == 56, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, header) == 58, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, attrs) == 86, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, regs) == 704, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, stack_len) == 736, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, kstack_len) == 740, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, syscall) == 742, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, kstack) == 744, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, py_state) == 1000, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, off_cpu_ns) == 1016, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, py) == 1024, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, stack) == 1024 + 32 * MAX_PY_FRAMES,
               "ctx_sample layout");
_Static_assert(sizeof(struct py_target) == 17 * 8, "py_target is 17 words");

struct {
    __uint(type, MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ctx_config);
} config SEC(".maps");

/* The processes sampled, by process id (thread group id). */
struct {
    __uint(type, MAP_TYPE_HASH);
    __uint(max_entries, MAX_PROCESSES);
    __type(key, __u32);
    __type(value, struct ctx_target);
} targets SEC(".maps");

/* The Python processes, by process id: where the walk finds their frames. */
struct {
    __uint(type, MAP_TYPE_HASH);
    __uint(max_entries, MAX_PROCESSES);
    __type(key, __u32);
    __type(value, struct py_target);
} python SEC(".maps");

/* Each Python thread's thread state, as last found (by thread id): checked against the
 * thread's id before it is used, so a stale entry only costs the walk it saves. */
struct {
    __uint(type, MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, __u64);
} py_threads SEC(".maps");

/* Counters per CPU: 0 = ticks that interrupted a target, 1 = samples lost because the
 * ring buffer was full, 2 = switches of a target's threads away from a CPU followed, 3 =
 * off-CPU samples taken (the thread was away at least the threshold). */
#define COUNT_TICKS 0
#define COUNT_LOST 1
#define COUNT_SWITCHES 2
#define COUNT_OFF_CPU 3
struct {
    __uint(type, MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

/* Each target thread's system call, in the thread's own task storage (a pointer away
 * from the task, where a hash map would cost a lookup on every switch of the host):
 * whether a call is followed, when it first left its CPU and the thread's CPU time then.
 * At the call's return, the time since less the CPU time since is the time it was away.
 * Made at a target thread's first wait in a system call, freed with the thread. */
struct away {
    __u64 active; /* AWAY_FOLLOWED or AWAY_PASSED while a call is in, 0 otherwise */
    __u64 since;  /* bpf_ktime_get_ns() when the call first left its CPU */
    __u64 ran;    /* the thread's se.sum_exec_runtime then */
};
struct {
    __uint(type, MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, MAP_NO_PREALLOC);
    __type(key, int);
    __type(value, struct away);
} away SEC(".maps");

/* struct away's `active`: the call's waits are followed; the call was passed over (one
 * in N followed: the dice are rolled once a call, at its first wait). */
#define AWAY_FOLLOWED 1
#define AWAY_PASSED 2

/* Where an off-CPU sample is built: one entry per CPU, apart from the ticks' (a tick can
 * interrupt the program at a system call's return, which is not guarded against it). */
struct {
    __uint(type, MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ctx_sample);
} off_cpu_scratch SEC(".maps");

/* bpf_ringbuf_output flags and bpf_ringbuf_query's question (UAPI numbers). */
#define RB_NO_WAKEUP 1
#define RB_FORCE_WAKEUP 2
#define RB_AVAIL_DATA 0

/* 1 MiB unless user space sizes it before loading (larger with stacks): user space is
 * woken once `wakeup_bytes` are waiting and otherwise polls with a timeout. */
struct {
    __uint(type, MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 20);
} samples SEC(".maps");

/* Where a sample is built before it is sent with its length: one entry per CPU (user
 * space sets the count before loading). A perf-event program does not nest on its CPU. */
struct {
    __uint(type, MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ctx_sample);
} scratch SEC(".maps");

static __always_inline void count(__u32 index) {
    __u64 *n = bpf_map_lookup_elem(&counters, &index);
    if (n)
        *n += 1;
}

static __always_inline int read_u64(__u64 *dst, __u64 addr) {
    return bpf_probe_read_user(dst, sizeof *dst, (const void *)addr);
}

static __always_inline void fault(struct ctx_sample *s, __u32 what, __u64 addr) {
    s->state = STATE_FAULT;
    s->fault_what = what;
    s->fault_addr = addr;
}

/* Fills `s` from the current task, which belongs to the target `c` describes. */
static __always_inline void sample_task(struct ctx_sample *s, const struct ctx_target *c) {
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    __u64 tp = 0;
#if defined(OTEL_CTX_ARCH_X86_64)
    if (BPF_CORE_READ_INTO(&tp, task, thread.fsbase)) {
#else
    if (BPF_CORE_READ_INTO(&tp, task, thread.uw.tp_value)) {
#endif
        fault(s, FAULT_THREAD_POINTER, 0);
        return;
    }
    s->thread_pointer = tp;

    __u64 slot;
    if (c->mode == MODE_TP_OFFSET) {
        slot = tp + (__u64)c->tp_offset;
    } else if (c->mode == MODE_DTV) {
        /* The same walk as `Resolution::slot_address`: the DTV pointer, its length
         * word, the module's entry; a missing DTV, a too-short DTV and an entry not yet
         * allocated (0 or -1) mean no TLS block. */
        __u64 dtv_at = tp + (__u64)c->tp_offset, dtv, bound, block;
        if (read_u64(&dtv, dtv_at)) {
            fault(s, FAULT_DTV_POINTER, dtv_at);
            return;
        }
        if (dtv == 0) {
            s->state = STATE_NO_TLS_BLOCK;
            return;
        }
        __u64 bound_at = dtv + (__u64)c->bound_at;
        if (read_u64(&bound, bound_at)) {
            fault(s, FAULT_DTV_BOUND, bound_at);
            return;
        }
        if (c->module_id > bound) {
            s->state = STATE_NO_TLS_BLOCK;
            return;
        }
        __u64 entry_at = dtv + (c->module_id << (c->entry_shift & 7));
        if (read_u64(&block, entry_at)) {
            fault(s, FAULT_DTV_ENTRY, entry_at);
            return;
        }
        if (block == 0 || block == ~0ULL) {
            s->state = STATE_NO_TLS_BLOCK;
            return;
        }
        slot = block + c->offset;
    } else {
        s->state = STATE_NO_CONFIG;
        return;
    }
    s->slot = slot;

    __u64 record;
    if (read_u64(&record, slot)) {
        fault(s, FAULT_SLOT, slot);
        return;
    }
    s->record = record;
    if (record == 0) {
        s->state = STATE_NULL;
        return;
    }
    if (record & 1) {
        s->state = STATE_MISALIGNED;
        return;
    }
    if (bpf_probe_read_user(s->header, HEADER_SIZE, (const void *)record)) {
        fault(s, FAULT_HEADER, record);
        return;
    }
    if (s->header[24] != 1) {
        s->state = STATE_INVALID;
        return;
    }
    /* attrs_data_size: native-endian u16 at offset 26 (BPF runs in the host's order). */
    __u32 size = *(__u16 *)&s->header[26];
    __u64 limit = c->max_attrs < MAX_ATTRS ? c->max_attrs : MAX_ATTRS;
    if (size > limit) {
        s->state = STATE_TOO_LARGE;
        return;
    }
    if (size > MAX_ATTRS) /* for the verifier: the copy stays inside `attrs` */
        size = MAX_ATTRS;
    if (size > 0 && bpf_probe_read_user(s->attrs, size, (const void *)(record + HEADER_SIZE))) {
        fault(s, FAULT_ATTRS, record + HEADER_SIZE);
        return;
    }
    s->attrs_len = (__u16)size;
    s->state = STATE_RECORD;
}

/* The user registers of the current task and, from its stack pointer up, at most
 * `size` bytes of its stack, a page at a time: a page that cannot be read (the end of
 * the stack's mapping, or memory swapped out) ends the copy. */
static __always_inline void sample_stack(struct ctx_sample *s, __u64 size) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
    __u64 sp;
#if defined(OTEL_CTX_ARCH_X86_64)
    if (BPF_CORE_READ_INTO(&s->regs[0], regs, ip) || BPF_CORE_READ_INTO(&sp, regs, sp) ||
        BPF_CORE_READ_INTO(&s->regs[2], regs, bp))
        return;
#else
    if (BPF_CORE_READ_INTO(&s->regs[0], regs, pc) || BPF_CORE_READ_INTO(&sp, regs, sp) ||
        BPF_CORE_READ_INTO(&s->regs[2], regs, regs[29]) ||
        BPF_CORE_READ_INTO(&s->regs[3], regs, regs[30]))
        return;
#endif
    s->regs[1] = sp;
    if (size > MAX_STACK)
        size = MAX_STACK;
    __u32 copied = 0;
    for (int i = 0; i < MAX_STACK / STACK_CHUNK + 1; i++) {
        if (copied >= size || copied > MAX_STACK - STACK_CHUNK)
            break;
        /* Up to the next page boundary, then whole pages. */
        __u64 at = sp + copied;
        __u32 chunk = STACK_CHUNK - (__u32)(at & (STACK_CHUNK - 1));
        if (chunk > size - copied)
            chunk = size - copied;
        if (chunk > STACK_CHUNK)
            chunk = STACK_CHUNK;
        if (chunk == 0)
            break;
        if (bpf_probe_read_user(&s->stack[copied & (MAX_STACK - 1)], chunk, (const void *)at))
            break;
        copied += chunk;
    }
    s->stack_len = copied;
}

static __always_inline __u64 word_at(const __u8 *bytes, __u64 at) {
    return *(const __u64 *)(bytes + (at & 0x78));
}

/* The state of one Python walk, shared with the bpf_loop callbacks below (bpf_loop
 * keeps the verifier's work per step, whatever the number of steps). */
struct py_walk {
    struct ctx_sample *s;
    const struct py_target *p;
    __u64 tstate; /* the thread state being looked at, then the thread's */
    __u64 frame;  /* the next frame to read */
    __u32 tid;
    __u32 found;  /* 1: the thread's state is `tstate`; 2: the walk is over */
};

/* One thread state of the interpreter's list: 1 (stop) once the thread's is found, the
 * list ends, or a read fails. */
static long py_thread_step(__u64 i, struct py_walk *w) {
    struct ctx_sample *s = w->s;
    const struct py_target *p = w->p;
    __u64 native, at;
    if (!w->tstate)
        return 1;
    at = w->tstate + p->tstate_native_thread_id;
    if (read_u64(&native, at)) {
        s->py_fault_addr = at;
        w->found = 2;
        return 1;
    }
    if (native == w->tid) {
        w->found = 1;
        return 1;
    }
    at = w->tstate + p->tstate_next;
    if (read_u64(&w->tstate, at)) {
        s->py_fault_addr = at;
        w->found = 2;
        return 1;
    }
    return 0;
}

/* One _PyInterpreterFrame: a shim is kept as a marker (and marks the frame above it as
 * an entry), a frame whose instruction lies before its code (not started) is left out.
 * 1 (stop) at the end of the chain, when the sample is full, or when a read fails. */
static long py_frame_step(__u64 i, struct py_walk *w) {
    struct ctx_sample *s = w->s;
    const struct py_target *p = w->p;
    __u64 frame = w->frame, at;
    if (!frame) {
        s->py_state = PY_OK;
        return 1;
    }
    __u32 n = s->py_count;
    if (n >= MAX_PY_FRAMES) {
        s->py_state = PY_TRUNCATED;
        return 1;
    }
    __u8 header[PY_FRAME_HEADER + 48];
    if (bpf_probe_read_user(header, PY_FRAME_HEADER, (const void *)frame)) {
        s->py_fault_addr = frame;
        s->py_state = PY_FAULT;
        return 1;
    }
    __u8 owner = header[p->frame_owner & 0x7f];
    __u64 previous = word_at(header, p->frame_previous);
    struct py_frame *f = &s->py[n & (MAX_PY_FRAMES - 1)];
    struct py_frame *above = &s->py[(n - 1) & (MAX_PY_FRAMES - 1)];
    if (p->owner_shim != PY_NONE && owner >= p->owner_shim) {
        if (n > 0)
            above->flags |= PY_FLAG_ENTRY;
        f->frame = frame;
        f->code = 0;
        f->stamp = 0;
        f->instruction = 0;
        f->flags = PY_FLAG_SHIM;
        s->py_count = n + 1;
    } else {
        __u64 code = word_at(header, p->frame_code) & ~p->code_tag_mask;
        __u64 instr = word_at(header, p->frame_instr);
        __u64 first = code + p->code_adaptive;
        int entry = p->frame_is_entry != PY_NONE && header[p->frame_is_entry & 0x7f];
        if (code && instr >= first) {
            __u8 stamp[PY_CODE_STAMP + 72];
            at = code + p->code_stamp_from;
            if (bpf_probe_read_user(stamp, PY_CODE_STAMP, (const void *)at)) {
                s->py_fault_addr = at;
                s->py_state = PY_FAULT;
                return 1;
            }
            __u32 line = *(const __u32 *)(stamp + (p->code_firstlineno & 0x3c));
            f->frame = frame;
            f->code = code;
            f->stamp = word_at(stamp, p->code_filename) ^ ((__u64)line << 48);
            f->instruction = (__u32)((instr - first) / 2);
            f->flags = (entry ? PY_FLAG_ENTRY : 0) |
                       (owner == PY_OWNED_BY_GENERATOR ? PY_FLAG_GENERATOR : 0);
            s->py_count = n + 1;
        } else if (entry && n > 0) {
            above->flags |= PY_FLAG_ENTRY;
        }
    }
    if (previous == frame) {
        s->py_state = PY_TRUNCATED;
        return 1;
    }
    w->frame = previous;
    return 0;
}

/* The thread `tid`'s Python frames, newest first, into `s->py`: its thread state from
 * the interpreter's list (by native thread id), then the _PyInterpreterFrame chain as
 * `PythonProcess::walk` walks it. Every read is a bpf_probe_read_user; both walks are
 * bounded (MAX_PY_THREADS, MAX_PY_FRAMES). */
static __always_inline void sample_python(struct ctx_sample *s, const struct py_target *p,
                                          __u32 tid) {
    struct py_walk w = {.s = s, .p = p, .tid = tid};
    __u64 interp, at;
    s->py_state = PY_FAULT;
    /* The thread state found last time, if it still has the thread's id. */
    const __u64 *known = bpf_map_lookup_elem(&py_threads, &tid);
    if (known) {
        w.tstate = *known;
        py_thread_step(0, &w);
    }
    if (w.found != 1) {
        w.found = 0;
        if (read_u64(&interp, p->interpreters_head_at)) {
            s->py_fault_addr = p->interpreters_head_at;
            return;
        }
        at = interp + p->threads_head;
        if (read_u64(&w.tstate, at)) {
            s->py_fault_addr = at;
            return;
        }
        bpf_loop(MAX_PY_THREADS, py_thread_step, &w, 0);
        if (w.found == 2)
            return;
        if (w.found != 1) {
            s->py_state = PY_NO_THREAD;
            return;
        }
        bpf_map_update_elem(&py_threads, &tid, &w.tstate, 0);
    }
    if (p->tstate_cframe != PY_NONE) {
        __u64 cframe;
        at = w.tstate + p->tstate_cframe;
        if (read_u64(&cframe, at)) {
            s->py_fault_addr = at;
            return;
        }
        at = cframe + p->current_frame;
    } else {
        at = w.tstate + p->current_frame;
    }
    if (read_u64(&w.frame, at)) {
        s->py_fault_addr = at;
        return;
    }
    /* A chain still going after MAX_PY_FRAMES + 1 steps is cut (or loops). */
    s->py_state = PY_TRUNCATED;
    bpf_loop(MAX_PY_FRAMES + 1, py_frame_step, &w, 0);
}

/* Builds and sends the sample of the current task, a thread of the target `t`, in this
 * CPU's entry of `buffers`: `off_cpu_ns` is 0 for a tick's sample, else the time it was
 * away from a CPU, in system call `call` - 1 (0: none). */
static __always_inline int send_sample(void *ctx, const struct ctx_config *c,
                                       const struct ctx_target *t, __u64 pid_tgid,
                                       __u64 off_cpu_ns, __u16 call, void *buffers) {
    __u32 tgid = (__u32)(pid_tgid >> 32);
    __u32 cpu = bpf_get_smp_processor_id();
    struct ctx_sample *s = bpf_map_lookup_elem(buffers, &cpu);
    if (!s)
        return 0;
    /* The scratch entry holds the last sample of this CPU: clear the fixed part (the
     * attrs and stack bytes past their lengths are never sent or read). */
    s->tid = (__u32)pid_tgid;
    s->pid = tgid;
    s->state = STATE_NO_TLS_BLOCK;
    s->generation = t->generation;
    s->thread_pointer = 0;
    s->slot = 0;
    s->record = 0;
    s->fault_addr = 0;
    s->fault_what = 0;
    s->attrs_len = 0;
    __builtin_memset(s->header, 0, HEADER_SIZE);
    __builtin_memset(s->regs, 0, sizeof s->regs);
    s->stack_len = 0;
    s->kstack_len = 0;
    s->syscall = call;
    s->py_state = PY_OFF;
    s->py_count = 0;
    s->py_fault_addr = 0;
    s->off_cpu_ns = off_cpu_ns;
    sample_task(s, t);
    const struct py_target *py = bpf_map_lookup_elem(&python, &tgid);
    if (py)
        sample_python(s, py, (__u32)pid_tgid);
    if (c->stack_size)
        sample_stack(s, c->stack_size);
    if (c->kernel_stack) {
        long n = bpf_get_stack(ctx, s->kstack, sizeof s->kstack, 0);
        if (n > 0)
            s->kstack_len = (__u16)(n / 8);
    }
    __u64 len = __builtin_offsetof(struct ctx_sample, stack) + s->stack_len;
    if (len > sizeof *s) /* for the verifier: the copy stays inside the entry */
        len = sizeof *s;
    /* Waking the reader costs an interrupt per sample: wake it only once enough is
     * waiting, and let it collect the rest when its poll times out. */
    __u64 pending = bpf_ringbuf_query(&samples, RB_AVAIL_DATA);
    if (bpf_ringbuf_output(&samples, s, len,
                           pending >= c->wakeup_bytes ? RB_FORCE_WAKEUP : RB_NO_WAKEUP))
        count(COUNT_LOST);
    return 0;
}

SEC("perf_event")
int sample_thread_context(void *ctx) {
    __u32 zero = 0;
    const struct ctx_config *c = bpf_map_lookup_elem(&config, &zero);
    if (!c)
        return 0;
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    __u32 tgid = (__u32)(pid_tgid >> 32);
    const struct ctx_target *t = bpf_map_lookup_elem(&targets, &tgid);
    if (!t)
        return 0;
    count(COUNT_TICKS);
    return send_sample(ctx, c, t, pid_tgid, 0, 0, &scratch);
}

/* The number of the system call `task` (a BTF pointer: its fields are read directly) is
 * in, negative outside one. */
static __always_inline long syscall_of(struct task_struct *task) {
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
#if defined(OTEL_CTX_ARCH_X86_64)
    return (long)regs->orig_ax;
#else
    return regs->syscallno;
#endif
}

/* Off-CPU time, in two halves, both at tracepoints (which every kernel with BTF
 * offers, where kprobes and the BPF trampoline may be missing). At the scheduler's
 * switch, a thread of a target that leaves its CPU of its own accord inside a system
 * call (to sleep, to wait for a lock, a socket, a pipe or a disk) has the time and its CPU
 * time noted, once a call. Nothing more: no work at all when a thread is preempted, one
 * look at the leaving thread's storage otherwise. The arguments of sched_switch: preempt,
 * prev, next (and prev_state since Linux 5.18). */
SEC("tp_btf/sched_switch")
int note_switch(unsigned long long *ctx) {
    /* Taken from its CPU while it runs (preempt): not a wait of its own. */
    if (ctx[0])
        return 0;
    struct task_struct *prev = (struct task_struct *)ctx[1];
    /* The idle task and the kernel's threads: never a target's. */
    if (!prev->pid || (prev->flags & PF_KTHREAD))
        return 0;
    struct away *left = bpf_task_storage_get(&away, prev, 0, 0);
    /* A call's later waits: its first one noted the start, or passed it over. */
    if (left && left->active)
        return 0;
    __u32 zero = 0;
    const struct ctx_config *c = bpf_map_lookup_elem(&config, &zero);
    if (!c || !c->off_cpu_threshold)
        return 0;
    /* Storage is made for a target's threads only: a thread without it is looked up. (A
     * process no longer followed keeps its threads' until they end; their calls are
     * followed for nothing, the return finding no target to sample for.) */
    __u32 tgid = (__u32)prev->tgid;
    if (!left && !bpf_map_lookup_elem(&targets, &tgid))
        return 0;
    /* Outside a system call (a page fault's wait) no return comes to sample it at. */
    if (syscall_of(prev) < 0)
        return 0;
    if (!left)
        left = bpf_task_storage_get(&away, prev, 0, LOCAL_STORAGE_GET_CREATE);
    if (!left)
        return 0;
    /* One system call in 1/chance is followed, whatever its number of waits; each
     * sample stands for the calls passed over too. */
    if (c->off_cpu_chance <= 0xffffffffULL && bpf_get_prandom_u32() >= c->off_cpu_chance) {
        left->active = AWAY_PASSED;
        return 0;
    }
    left->active = AWAY_FOLLOWED;
    left->since = bpf_ktime_get_ns();
    /* Brought up to date as the thread left its CPU, before this tracepoint. */
    left->ran = prev->se.sum_exec_runtime;
    count(COUNT_SWITCHES);
    return 0;
}

/* The other half: as the system call returns, on the thread itself, whose user
 * registers and stack are those it waited with, and whose thread context is the one it
 * waited under (the thread is in the kernel, where the spec allows a reader to read
 * it). The time since the call first left its CPU, less the CPU time since, is the time
 * it was away: the waits, and the waits for a CPU once woken (the CPU time since it last
 * came back, a few microseconds of the call's end not yet added to the thread's, counts
 * as away). A call away at least the threshold is sampled as a tick would sample it,
 * with that time; one away less than the period is sampled by time, as a CPU profile
 * samples: with a chance of its time in the period, standing for a whole period, so
 * that long waits are always sampled and the totals stay right. The arguments of
 * sys_exit: regs, ret. */
SEC("tp_btf/sys_exit")
int sample_off_cpu(unsigned long long *ctx) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct away *waited = bpf_task_storage_get(&away, task, 0, 0);
    if (!waited || !waited->active)
        return 0;
    __u64 followed = waited->active == AWAY_FOLLOWED;
    waited->active = 0;
    if (!followed)
        return 0;
    __u64 wall = bpf_ktime_get_ns() - waited->since;
    __u64 ran = task->se.sum_exec_runtime - waited->ran;
    __u64 total = wall > ran ? wall - ran : 0;
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    __u32 zero = 0;
    const struct ctx_config *c = bpf_map_lookup_elem(&config, &zero);
    if (!c || !c->off_cpu_threshold || total < c->off_cpu_threshold)
        return 0;
    __u64 weight = total;
    __u64 period = c->off_cpu_period;
    if (total < period) {
        /* total < period < 1 << 32: the shift cannot overflow. */
        if ((__u64)bpf_get_prandom_u32() >= (total << 32) / period)
            return 0;
        weight = period;
    }
    __u32 tgid = (__u32)(pid_tgid >> 32);
    const struct ctx_target *t = bpf_map_lookup_elem(&targets, &tgid);
    if (!t)
        return 0;
    count(COUNT_OFF_CPU);
    long call = syscall_of(task);
    __u16 named = call >= 0 && call < 0xffff ? (__u16)(call + 1) : 0;
    /* The sample stands for the calls not followed too: one in N is, N the same for the
     * whole run (the chance is (1 << 32) / N). */
    __u64 one_in = c->off_cpu_chance > 0xffffffffULL || !c->off_cpu_chance
                       ? 1
                       : 0x100000000ULL / c->off_cpu_chance;
    return send_sample(ctx, c, t, pid_tgid, weight * one_in, named, &off_cpu_scratch);
}

/* The helpers that read user memory and the current task are GPL-only: the program
 * declares the GPL, one of the two licenses it is offered under. */
char LICENSE[] SEC("license") = "GPL";
