//! Publishes a process context through `process::global`, attaches a thread context with
//! no attributes on each of three threads, and registers no attribute key: the process
//! context still announces the thread contexts (`threadlocal.schema_version`, with an empty
//! `threadlocal.attribute_key_map`), so a reader that follows OTEP 4947 looks for the TLS
//! slot.
//!
//! ```text
//! cargo run -p otel-ctx-writer --example attach_only
//! ```
//!
//! Prints `READY <pid>` once the three contexts are attached, then runs until its standard
//! input closes.
//!
//! Readers find the slot through `.dynsym`: this package's `build.rs` exports
//! `otel_thread_ctx_v1` from its examples (a service does the same with `otel-ctx-export`,
//! see `EXPORTING.md`), and `otel-ctx check` passes the example.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};

use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::ThreadContext;

/// Threads that attach a context.
const THREADS: u8 = 3;

fn main() -> ExitCode {
    let resource = match Resource::builder()
        .service_name("otel-ctx-attach-only-example")
        .build()
    {
        Ok(resource) => resource,
        Err(e) => {
            eprintln!("cannot build the resource: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = global::publish(resource) {
        eprintln!("cannot publish the process context: {e}");
        return ExitCode::FAILURE;
    }
    // Each thread attaches, then waits until the main thread has seen stdin close.
    let attached = Arc::new(Barrier::new(usize::from(THREADS) + 1));
    let done = Arc::new(Barrier::new(usize::from(THREADS) + 1));
    let threads: Vec<_> = (1..=THREADS)
        .map(|n| {
            let attached = Arc::clone(&attached);
            let done = Arc::clone(&done);
            std::thread::Builder::new()
                .name(format!("attached-{n}"))
                .spawn(move || {
                    let context = ThreadContext::new([n; 16], [n; 8], 0x01, &[])
                        .expect("ids and flags alone always fit a record");
                    let _guard = context.attach_scoped();
                    attached.wait();
                    done.wait();
                })
                .expect("spawn a thread")
        })
        .collect();
    attached.wait();
    println!("READY {}", std::process::id());
    let _ = std::io::stdout().flush();
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    done.wait();
    for thread in threads {
        let _ = thread.join();
    }
    match global::unpublish() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot unpublish the process context: {e}");
            ExitCode::FAILURE
        }
    }
}
