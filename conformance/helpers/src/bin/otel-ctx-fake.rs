//! A hand-made process context, right or deliberately wrong, for the reader's tests.
//!
//! `otel-ctx-fake <scenario> [milliseconds]` maps a memfd named `OTEL_CTX` (it names
//! nothing with `prctl`, so it shows as `/memfd:OTEL_CTX (deleted)` on every kernel),
//! writes a header and a payload built with the codec, prints `ready <header address>` on
//! stdout, and waits until its stdin closes. Scenarios:
//!
//! | scenario | what is wrong |
//! |---|---|
//! | `good` | nothing |
//! | `bad-signature` | signature `OTEL_CTY` |
//! | `version-3` | `version` 3 |
//! | `empty-payload` | `payload_size` 0 |
//! | `payload-4gib` | `payload_size` 4 GiB - 1 |
//! | `payload-unmapped` | `payload` points to a page that was unmapped |
//! | `timestamp-zero` | `monotonic_published_at_ns` stays 0 |
//! | `deep-nesting` | the payload nests arrays 200 levels deep |
//! | `garbage-payload` | the payload has an invalid protobuf wire type |
//! | `exit-after` | nothing, but the process exits after `milliseconds` |

use std::io::{Read, Write};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use otel_ctx_codec::header::{ProcessContextHeader, HEADER_SIZE};
use otel_ctx_codec::proto::{AnyValue, KeyValue, ProcessContext};
use otel_ctx_codec::threadlocal::{reference_data, SCHEMA_TLSDESC_V1_DEV};
use otel_ctx_reader::process::boottime_ns;
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};

const MAPPING_LEN: usize = 16 * 1024;
const PAYLOAD_OFFSET: usize = 64;

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-fake: {what}: {e}");
    std::process::exit(1);
}

/// A `ProcessContext` like a real SDK's.
fn good_payload(buf: &mut [u8]) -> usize {
    let resource = [
        KeyValue {
            key: "service.name",
            value: AnyValue::String("fake-service"),
        },
        KeyValue {
            key: "service.instance.id",
            value: AnyValue::String("00000000-0000-4000-8000-000000000001"),
        },
        KeyValue {
            key: "service.version",
            value: AnyValue::String("0.0.1"),
        },
        KeyValue {
            key: "telemetry.sdk.language",
            value: AnyValue::String("rust"),
        },
        KeyValue {
            key: "fake.count",
            value: AnyValue::Int(-42),
        },
        KeyValue {
            key: "fake.bytes",
            value: AnyValue::Bytes(&[0, 1, 254, 255]),
        },
    ];
    let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route"]);
    ProcessContext {
        resource: &resource,
        attributes: &extra,
    }
    .encode(buf)
    .unwrap_or_else(|e| fail("encode", e))
}

fn varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `attributes: [{key: "deep", value: [[[...]]]}]`, `depth` arrays deep.
fn deep_payload(depth: usize) -> Vec<u8> {
    // Innermost AnyValue: an empty array_value (field 5).
    let mut any = vec![0x2a, 0x00];
    for _ in 1..depth {
        // ArrayValue { values (1): any }
        let mut array = vec![0x0a];
        varint(&mut array, any.len());
        array.extend_from_slice(&any);
        // AnyValue { array_value (5): array }
        let mut next = vec![0x2a];
        varint(&mut next, array.len());
        next.extend_from_slice(&array);
        any = next;
    }
    // KeyValue { key (1): "deep", value (2): any }
    let mut kv = vec![0x0a, 4];
    kv.extend_from_slice(b"deep");
    kv.push(0x12);
    varint(&mut kv, any.len());
    kv.extend_from_slice(&any);
    // ProcessContext { attributes (2): kv }
    let mut out = vec![0x12];
    varint(&mut out, kv.len());
    out.extend_from_slice(&kv);
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args
        .next()
        .unwrap_or_else(|| fail("usage", "otel-ctx-fake <scenario>"));
    let exit_after = args.next().and_then(|ms| ms.parse::<u64>().ok());

    let fd =
        memfd_create("OTEL_CTX", MemfdFlags::CLOEXEC).unwrap_or_else(|e| fail("memfd_create", e));
    ftruncate(&fd, MAPPING_LEN as u64).unwrap_or_else(|e| fail("ftruncate", e));
    // SAFETY: a new mapping at an address the kernel picks; nothing else refers to it.
    let base = unsafe {
        mmap(
            std::ptr::null_mut(),
            MAPPING_LEN,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
            &fd,
            0,
        )
    }
    .unwrap_or_else(|e| fail("mmap", e));
    drop(fd);
    let base = NonNull::new(base.cast::<u8>()).unwrap_or_else(|| fail("mmap", "null"));
    // SAFETY: the mapping is MAPPING_LEN bytes, readable and writable, and owned here.
    let mapping = unsafe { std::slice::from_raw_parts_mut(base.as_ptr(), MAPPING_LEN) };

    let payload_len = match scenario.as_str() {
        "deep-nesting" => {
            let deep = deep_payload(200);
            mapping[PAYLOAD_OFFSET..PAYLOAD_OFFSET + deep.len()].copy_from_slice(&deep);
            deep.len()
        }
        "garbage-payload" => {
            // Field 1 with wire type 7, which does not exist.
            mapping[PAYLOAD_OFFSET..PAYLOAD_OFFSET + 4].copy_from_slice(&[0x0f, 1, 2, 3]);
            4
        }
        _ => good_payload(&mut mapping[PAYLOAD_OFFSET..]),
    };
    let mut header = ProcessContextHeader::new(
        payload_len as u32,
        base.as_ptr() as u64 + PAYLOAD_OFFSET as u64,
    );
    match scenario.as_str() {
        "good" | "deep-nesting" | "garbage-payload" | "timestamp-zero" | "exit-after" => {}
        "bad-signature" => header.signature = *b"OTEL_CTY",
        "version-3" => header.version = 3,
        "empty-payload" => header.payload_size = 0,
        "payload-4gib" => header.payload_size = u32::MAX,
        "payload-unmapped" => {
            // SAFETY: a fresh anonymous page, unmapped at once, so its address is known
            // to be unmapped (nothing else in this single-threaded program maps memory).
            let page = unsafe {
                let page = mmap_anonymous(
                    std::ptr::null_mut(),
                    4096,
                    ProtFlags::READ,
                    MapFlags::PRIVATE,
                )
                .unwrap_or_else(|e| fail("mmap", e));
                munmap(page, 4096).unwrap_or_else(|e| fail("munmap", e));
                page
            };
            header.payload = page as u64;
        }
        other => fail("unknown scenario", other),
    }
    let bytes = zerocopy_bytes(&header);
    mapping[..HEADER_SIZE].copy_from_slice(&bytes);
    // Orders the header and payload writes above before the timestamp write below, as a
    // publisher must.
    fence(Ordering::SeqCst);
    if scenario != "timestamp-zero" {
        mapping[16..24].copy_from_slice(&boottime_ns().to_ne_bytes());
    }

    println!("ready {:#x}", base.as_ptr() as u64);
    let _ = std::io::stdout().flush();
    if scenario == "exit-after" {
        std::thread::sleep(Duration::from_millis(exit_after.unwrap_or(100)));
        std::process::exit(0);
    }
    // Wait for the test to close stdin (or to die).
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
}

/// The header's 32 bytes, timestamp included (0 here: it is written last).
fn zerocopy_bytes(h: &ProcessContextHeader) -> [u8; HEADER_SIZE] {
    let mut out = [0u8; HEADER_SIZE];
    out[0..8].copy_from_slice(&h.signature);
    out[8..12].copy_from_slice(&h.version.to_ne_bytes());
    out[12..16].copy_from_slice(&h.payload_size.to_ne_bytes());
    out[16..24].copy_from_slice(&h.monotonic_published_at_ns.to_ne_bytes());
    out[24..32].copy_from_slice(&h.payload.to_ne_bytes());
    out
}
