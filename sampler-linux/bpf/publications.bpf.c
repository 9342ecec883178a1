// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/*
 * The publication hook: a BPF program on the `syscalls/sys_enter_prctl` tracepoint that
 * tells user space which processes name a mapping `OTEL_CTX`. OTEP 4719 has every writer
 * call `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, "OTEL_CTX")` after it
 * publishes or updates its process context, even on kernels where the call fails
 * (without CONFIG_ANON_VMA_NAME it returns EINVAL, but the tracepoint still fires on
 * entry), so that readers can learn of new and changed contexts without scanning
 * `/proc`. The program sends the calling process's id (its thread group id) through a
 * ring buffer; user space reads that process's context, as the spec's reading protocol
 * says, and trusts nothing else of the event.
 *
 * Built by clang (`-target bpf -O2 -g`); it reads only the tracepoint's own record (the
 * syscall's arguments, a stable layout) and the name string, so it needs no BTF.
 */

#include "types.h"

#include <bpf/bpf_helpers.h>

/* Map types of the kernel's UAPI (stable numbers). */
#define MAP_TYPE_PERCPU_ARRAY 6
#define MAP_TYPE_RINGBUF 27

/* prctl(2)'s option and sub-option (include/uapi/linux/prctl.h). */
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0

/* The record of a `syscalls/sys_enter_*` tracepoint: the common header, the syscall
 * number, then its six arguments as words (tracefs's `format` file lists the same
 * offsets: option at 16, arg5 at 48). */
struct syscall_enter {
    __u64 common;
    __s32 nr;
    __u32 pad;
    __u64 args[6];
};

/* "OTEL_CTX" and its terminating NUL. */
#define NAME_LEN 9

/* What user space reads: the process that named a mapping OTEL_CTX. */
struct publication {
    __u32 pid;
    __u32 tid;
};

_Static_assert(sizeof(struct publication) == 8, "publication is two words");

/* 64 KiB: 4,096 events between two reads of user space; more are lost and counted
 * (the periodic scan of user space still finds those processes). */
struct {
    __uint(type, MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 16);
} publications SEC(".maps");

/* Counters per CPU: 0 = events sent, 1 = events lost because the ring was full. */
struct {
    __uint(type, MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 index) {
    __u64 *n = bpf_map_lookup_elem(&counters, &index);
    if (n)
        *n += 1;
}

SEC("tracepoint/syscalls/sys_enter_prctl")
int on_prctl(struct syscall_enter *ctx) {
    if (ctx->args[0] != PR_SET_VMA || ctx->args[1] != PR_SET_VMA_ANON_NAME)
        return 0;
    char name[NAME_LEN + 1] = {};
    /* The length read, NUL included: exactly NAME_LEN for "OTEL_CTX", more for a longer
     * name (cut at NAME_LEN + 1), less for a shorter one, negative for a bad pointer. */
    long n = bpf_probe_read_user_str(name, sizeof name, (const void *)ctx->args[4]);
    if (n != NAME_LEN)
        return 0;
    if (name[0] != 'O' || name[1] != 'T' || name[2] != 'E' || name[3] != 'L' ||
        name[4] != '_' || name[5] != 'C' || name[6] != 'T' || name[7] != 'X')
        return 0;
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    struct publication p = {.pid = (__u32)(pid_tgid >> 32), .tid = (__u32)pid_tgid};
    if (bpf_ringbuf_output(&publications, &p, sizeof p, 0))
        count(1);
    else
        count(0);
    return 0;
}

/* bpf_probe_read_user_str is GPL-only: the program declares the GPL, one of the two
 * licenses it is offered under. */
char LICENSE[] SEC("license") = "GPL";
