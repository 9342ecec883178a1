// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
/* The kernel's fixed-size integer types, which libbpf's helper headers expect to be
 * defined before them (no vmlinux.h, no kernel headers). */
#ifndef OTEL_CTX_BPF_TYPES_H
#define OTEL_CTX_BPF_TYPES_H

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

#endif
