//! A process that changes its contexts as fast as it can, for the stress and fault tests.
//!
//! `otel-ctx-stress-target [--threads N] [--churn] [--nice N]` publishes a process context
//! and
//! registers three attribute keys (`stress.n`, `stress.thread`, `stress.hex`), starts `N`
//! writer threads (default 2), prints `thread <i> <tid>` for each, then `ready`, and from
//! then on:
//!
//! - the main thread updates the process context in a loop. Version `v` is
//!   self-checking: `stress.counter` (int), `stress.counter.decimal` and, in the extra
//!   attributes, `stress.counter.hex` and `stress.counter.bytes` all hold `v`, and
//!   `stress.padding` has `v % 97` bytes, so the payload size changes with `v`;
//! - writer thread `i` changes its record in a loop, counter `n` = 1, 2, ...: in-place
//!   updates, appends, truncations, swaps with a second record, detach and re-attach
//!   (the slot is NULL only between those two).
//!   Every record it attaches is self-checking: `trace_id` is `n` then `!n` (big endian),
//!   `span_id` is `n ^ ((i + 1) << 56)`, `trace_flags` is `n as u8`, attribute `stress.n`
//!   is `n` in decimal, `stress.thread` is `i`, and `stress.hex`, when present, is `n` in
//!   hex (see `record_for` below, and the checks in `tests/stress_cross_process.rs`);
//! - with `--churn`, one more thread starts short-lived threads one after the other,
//!   each of which attaches a record (thread index 1000 and up) and exits with it
//!   attached, for readers that meet threads exiting.
//!
//! `--nice N` lowers the priority of the thread that updates the process context by `N`
//! (as `nice`): it still updates as fast as it can, with every cycle the readers and the
//! writer threads leave free. (The writer threads keep their priority: a reader that stops
//! one with ptrace waits until the scheduler runs it.)
//!
//! A line `exit` on stdin makes the process exit at once (`exit_group`, whatever its
//! threads are doing, even stopped by a tracer); the end of stdin makes it exit too.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use otel_ctx_writer::process::{global, OwnedValue, Resource};
use otel_ctx_writer::thread::{self, register_all, Key, ThreadContext};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-stress-target: {what}: {e}");
    std::process::exit(1);
}

/// The three keys every record uses.
#[derive(Clone, Copy)]
struct Keys {
    n: Key,
    thread: Key,
    hex: Key,
}

/// The ids and flags of thread `i`'s record number `n`.
fn record_for(i: u64, n: u64) -> ([u8; 16], [u8; 8], u8) {
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&n.to_be_bytes());
    trace_id[8..].copy_from_slice(&(!n).to_be_bytes());
    let span_id = (n ^ ((i + 1) << 56)).to_be_bytes();
    (trace_id, span_id, n as u8)
}

/// Record `n` of thread `i`, with or without `stress.hex`, into `context`.
fn fill(context: &mut ThreadContext, keys: Keys, i: u64, n: u64, hex: bool) {
    let (trace_id, span_id, flags) = record_for(i, n);
    let (decimal, thread, hex_value) = (n.to_string(), i.to_string(), format!("{n:x}"));
    let mut attrs = vec![(keys.n, decimal.as_str()), (keys.thread, thread.as_str())];
    if hex {
        attrs.push((keys.hex, hex_value.as_str()));
    }
    context
        .update(trace_id, span_id, flags, &attrs)
        .unwrap_or_else(|e| fail("update a detached record", e));
}

/// Record `n` of thread `i`, written in place into the attached record.
fn update_attached(keys: Keys, i: u64, n: u64, hex: bool) {
    let (trace_id, span_id, flags) = record_for(i, n);
    let (decimal, thread, hex_value) = (n.to_string(), i.to_string(), format!("{n:x}"));
    let mut attrs = vec![(keys.n, decimal.as_str()), (keys.thread, thread.as_str())];
    if hex {
        attrs.push((keys.hex, hex_value.as_str()));
    }
    thread::update(trace_id, span_id, flags, &attrs)
        .unwrap_or_else(|e| fail("update the attached record", e));
}

/// Writer thread `i`: every protocol path of the thread-context writer, in a loop.
fn writer(keys: Keys, i: u64, operations: &AtomicU64) -> ! {
    let mut first = ThreadContext::with_capacity(ThreadContext::CAPACITY)
        .unwrap_or_else(|e| fail("allocate a record", e));
    fill(&mut first, keys, i, 1, false);
    let _ = first.attach();
    let mut spare = ThreadContext::with_capacity(ThreadContext::CAPACITY)
        .unwrap_or_else(|e| fail("allocate a record", e));
    // The `n` of the attached record, which `stress.hex` must repeat when appended.
    let mut attached_n = 1;
    for n in 2u64.. {
        match n % 8 {
            0..=2 => {
                update_attached(keys, i, n, false);
                attached_n = n;
            }
            3 => {
                // Grows the record by one entry, then publishes the new size.
                let hex = format!("{attached_n:x}");
                if thread::append(keys.hex, &hex).is_err() {
                    fail("append", "the record is full");
                }
            }
            4 => {
                // Shrinks it back to two entries.
                let _ = thread::truncate_attrs(2);
            }
            5 => {
                // Builds the next record aside, swaps it in: the old one becomes the spare.
                fill(&mut spare, keys, i, n, true);
                spare = spare
                    .attach()
                    .and_then(thread::Attached::into_context)
                    .unwrap_or_else(|| fail("swap", "no record of ours was attached"));
                attached_n = n;
            }
            6 => {
                // Detaches (the slot is NULL for a moment), then attaches it again.
                let context =
                    thread::detach().unwrap_or_else(|| fail("detach", "no record was attached"));
                let _ = context.attach();
            }
            _ => {
                update_attached(keys, i, n, true);
                attached_n = n;
            }
        }
        operations.fetch_add(1, Ordering::Relaxed);
        // As fast as it can, but not long ahead of a reader waiting for the CPU; seldom
        // enough that most stops land inside the writes rather than in this system call.
        if n % 8 == 0 {
            std::thread::yield_now();
        }
    }
    unreachable!("the counter of a writer thread never ends")
}

/// Starts short-lived threads one after the other; each exits with a record attached.
fn churn(keys: Keys) -> ! {
    for i in 1000u64.. {
        let spawned = std::thread::Builder::new()
            .name(format!("churn-{i}"))
            .spawn(move || {
                let mut context = ThreadContext::with_capacity(ThreadContext::COMPACT_CAPACITY)
                    .unwrap_or_else(|e| fail("allocate a record", e));
                fill(&mut context, keys, i, 1, false);
                let _ = context.attach();
                for n in 2..200 {
                    update_attached(keys, i, n, false);
                }
                // Exits with the record attached: the exit hook detaches and frees it.
            });
        match spawned {
            Ok(handle) => {
                let _ = handle.join();
            }
            Err(e) => fail("spawn a thread", e),
        }
    }
    unreachable!("the churn never ends")
}

/// Version `v` of the process context.
fn publish_version(v: u64) {
    let result = global::update(|resource, attributes| {
        resource.set("stress.counter", v as i64);
        resource.set("stress.counter.decimal", v.to_string());
        resource.set("stress.padding", "x".repeat((v % 97) as usize));
        attributes.set("stress.counter.hex", format!("{v:x}"));
        attributes.set(
            "stress.counter.bytes",
            OwnedValue::Bytes(v.to_le_bytes().to_vec()),
        );
    });
    result.unwrap_or_else(|e| fail("update the process context", e));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut threads = 2u64;
    let mut with_churn = false;
    let mut nice = 0;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => {
                threads = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| fail("usage", "--threads takes a number"));
            }
            "--churn" => with_churn = true,
            "--nice" => {
                nice = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| fail("usage", "--nice takes a number"));
            }
            other => fail(
                "usage",
                format!("otel-ctx-stress-target [--threads N] [--churn] [--nice N], not {other}"),
            ),
        }
    }

    let resource = Resource::builder()
        .service_name("stress-target")
        .build()
        .unwrap_or_else(|e| fail("resource", e));
    global::publish(resource).unwrap_or_else(|e| fail("publish", e));
    publish_version(0);
    let [n, thread, hex] = register_all(["stress.n", "stress.thread", "stress.hex"])
        .unwrap_or_else(|e| fail("register the keys", e));
    let keys = Keys { n, thread, hex };

    let out = Arc::new(Mutex::new(std::io::stdout()));
    let started = Arc::new(Barrier::new(threads as usize + 1));
    let operations = Arc::new(AtomicU64::new(0));
    for i in 0..threads {
        let (out, started, operations) = (out.clone(), started.clone(), operations.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("writer-{i}"))
            .spawn(move || {
                // `/proc/thread-self` links to `<pid>/task/<tid>`.
                let tid = std::fs::read_link("/proc/thread-self")
                    .ok()
                    .and_then(|link| link.file_name()?.to_str()?.parse::<u32>().ok())
                    .unwrap_or_else(|| fail("thread id", "cannot read /proc/thread-self"));
                {
                    let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = writeln!(out, "thread {i} {tid}");
                    let _ = out.flush();
                }
                started.wait();
                writer(keys, i, &operations)
            });
        if let Err(e) = spawned {
            fail("spawn a writer thread", e);
        }
    }
    started.wait();
    if with_churn {
        if let Err(e) = std::thread::Builder::new()
            .name("churn".into())
            .spawn(move || churn(keys))
        {
            fail("spawn the churn thread", e);
        }
    }
    // Stdin: `exit` or its end stops the process, whatever the other threads are doing.
    std::thread::spawn(|| {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) if line.trim() == "exit" => std::process::exit(3),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        std::process::exit(0);
    });
    if nice != 0 {
        // On Linux this sets the nice value of the calling thread only, after the other
        // threads were started with the process's own.
        rustix::process::setpriority_process(None, nice).unwrap_or_else(|e| fail("setpriority", e));
    }
    {
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    }
    for v in 1u64.. {
        publish_version(v);
    }
}
