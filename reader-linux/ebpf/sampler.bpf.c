// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * The thread-context sampler: a BPF program run on every tick of a CPU-clock perf event
 * (one event per CPU). When the interrupted task belongs to the target process, it finds
 * the task's `otel_thread_ctx_v1` slot with the parameters user space computed from the
 * reader's `Resolution`, follows the slot to the record, and sends the thread id, the
 * outcome, the 28-byte header and the attrs-data to user space through a ring buffer.
 *
 * The task is not running while the program runs (the tick interrupted it), so the
 * record is read as a signal handler would see it: the spec's reader protocol.
 *
 * Built by clang (`-target bpf -O2 -g`); the thread pointer is read through BTF / CO-RE
 * relocations on the minimal kernel structures below, so no vmlinux.h is needed. The
 * layout of `struct ctx_config` and `struct ctx_sample` is mirrored by
 * `reader-linux/src/ebpf/wire.rs`.
 */

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* Map types and flags of the kernel's UAPI (stable numbers). */
#define MAP_TYPE_ARRAY 2
#define MAP_TYPE_PERCPU_ARRAY 6
#define MAP_TYPE_RINGBUF 27

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

struct task_struct {
    struct thread_struct thread;
} __attribute__((preserve_access_index));

/* The record: 28-byte header, then attrs-data. The largest attrs-data sent is
 * MAX_ATTRS bytes, so records of up to 640 bytes (the size the spec recommends as the
 * readers' limit) arrive whole. */
#define HEADER_SIZE 28
#define MAX_ATTRS 612

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
#define STATE_NO_CONFIG 7    /* user space has not configured the program */

/* Which read faulted (`fault_what`). */
#define FAULT_DTV_POINTER 1
#define FAULT_DTV_BOUND 2
#define FAULT_DTV_ENTRY 3
#define FAULT_SLOT 4
#define FAULT_HEADER 5
#define FAULT_ATTRS 6
#define FAULT_THREAD_POINTER 7

/* Written by user space; one entry. All words are u64 so the layout has no padding. */
struct ctx_config {
    __u64 tgid;        /* the target process; 0 samples nothing */
    __u64 mode;        /* MODE_* */
    __s64 tp_offset;   /* MODE_TP_OFFSET: slot = tp + tp_offset; MODE_DTV: dtv pointer at tp + tp_offset */
    __u64 module_id;   /* MODE_DTV: the module's DTV index */
    __u64 offset;      /* MODE_DTV: the slot's offset in the module's TLS block */
    __u64 entry_shift; /* MODE_DTV: log2 of the DTV entry size (glibc 16, musl 8) */
    __s64 bound_at;    /* MODE_DTV: the DTV length word at dtv + bound_at (glibc -16, musl 0) */
    __u64 generation;  /* copied into each sample: which configuration computed it */
    __u64 max_attrs;   /* largest attrs-data sent; records beyond are STATE_TOO_LARGE */
};

/* Sent to user space. Field order keeps every field naturally aligned. */
struct ctx_sample {
    __u32 tid;
    __u32 state;
    __u64 generation;
    __u64 thread_pointer;
    __u64 slot;        /* 0 when there is no slot (STATE_NO_TLS_BLOCK) */
    __u64 record;      /* the slot's value */
    __u64 fault_addr;  /* STATE_FAULT: the address that could not be read */
    __u32 fault_what;  /* STATE_FAULT: FAULT_* */
    __u16 attrs_len;   /* bytes of attrs-data that follow the header */
    __u8 header[HEADER_SIZE];
    __u8 attrs[MAX_ATTRS];
    __u8 pad[2];
};

/* The offsets `src/ebpf/wire.rs` reads. */
_Static_assert(sizeof(struct ctx_config) == 9 * 8, "ctx_config is 9 words");
_Static_assert(__builtin_offsetof(struct ctx_sample, fault_what) == 48, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, attrs_len) == 52, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, header) == 54, "ctx_sample layout");
_Static_assert(__builtin_offsetof(struct ctx_sample, attrs) == 82, "ctx_sample layout");
_Static_assert(sizeof(struct ctx_sample) == 696, "ctx_sample size");

struct {
    __uint(type, MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ctx_config);
} config SEC(".maps");

/* Counters per CPU: 0 = ticks that interrupted the target, 1 = samples lost because the
 * ring buffer was full. */
struct {
    __uint(type, MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

/* bpf_ringbuf_submit flags and bpf_ringbuf_query's question (UAPI numbers). */
#define RB_NO_WAKEUP 1
#define RB_FORCE_WAKEUP 2
#define RB_AVAIL_DATA 0
#define WAKEUP_BYTES (1 << 18)

/* 1 MiB: room for over 1,500 samples between two reads by user space, which is woken
 * once WAKEUP_BYTES are waiting and otherwise polls with a timeout. */
struct {
    __uint(type, MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 20);
} samples SEC(".maps");

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

/* Fills `s` from the current task, which belongs to the target. */
static __always_inline void sample_task(struct ctx_sample *s, const struct ctx_config *c) {
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

SEC("perf_event")
int sample_thread_context(void *ctx) {
    __u32 zero = 0;
    const struct ctx_config *c = bpf_map_lookup_elem(&config, &zero);
    if (!c || c->tgid == 0)
        return 0;
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    if ((pid_tgid >> 32) != c->tgid)
        return 0;
    count(0);

    struct ctx_sample *s = bpf_ringbuf_reserve(&samples, sizeof *s, 0);
    if (!s) {
        count(1);
        return 0;
    }
    /* Ring-buffer memory is not zeroed: clear the fixed part (the attrs bytes past
     * attrs_len are never read by user space). */
    s->tid = (__u32)pid_tgid;
    s->state = STATE_NO_TLS_BLOCK;
    s->generation = c->generation;
    s->thread_pointer = 0;
    s->slot = 0;
    s->record = 0;
    s->fault_addr = 0;
    s->fault_what = 0;
    s->attrs_len = 0;
    __builtin_memset(s->header, 0, HEADER_SIZE);
    sample_task(s, c);
    /* Waking the reader costs an interrupt per sample: wake it only once a quarter of
     * the ring is used, and let it collect the rest when its poll times out. */
    __u64 pending = bpf_ringbuf_query(&samples, RB_AVAIL_DATA);
    bpf_ringbuf_submit(s, pending >= WAKEUP_BYTES ? RB_FORCE_WAKEUP : RB_NO_WAKEUP);
    return 0;
}

/* The helpers that read user memory and the current task are GPL-only: the program
 * declares the GPL, one of the two licenses it is offered under. */
char LICENSE[] SEC("license") = "GPL";
