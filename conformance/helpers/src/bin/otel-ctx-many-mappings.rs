//! A publisher with very many mappings, for the benchmarks of a reader's cost as the
//! target grows.
//!
//! `otel-ctx-many-mappings <n>` publishes a process context (service `many-mappings`, key
//! `http.route`), attaches a record on two threads, then maps `n` one-page regions (one
//! region of `n` pages whose every other page is made read-only: the kernel keeps each
//! page its own mapping), prints `ready <lines of its maps>` and runs until its standard
//! input closes. More than 65530 mappings need `vm.max_map_count` raised (as root:
//! `sysctl vm.max_map_count=2100000`).

use std::io::{BufRead, Write};

use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{register, ThreadContext};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-many-mappings: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| fail("usage", "otel-ctx-many-mappings <number of mappings>"));
    let resource = Resource::builder()
        .service_name("many-mappings")
        .build()
        .unwrap_or_else(|e| fail("resource", e));
    global::publish(resource).unwrap_or_else(|e| fail("publish", e));
    let route = register("http.route").unwrap_or_else(|e| fail("register", e));
    for n in 1u8..=2 {
        std::thread::spawn(move || {
            let context = ThreadContext::new([n; 16], [n; 8], 1, &[(route, "/many")])
                .unwrap_or_else(|e| fail("record", e));
            let _attached = context.attach();
            loop {
                std::thread::park();
            }
        });
    }
    let page = rustix::param::page_size();
    let len = n.max(1) * page;
    // SAFETY: a fresh anonymous private mapping at an address the kernel picks, never
    // read or written by this program (it exists to be seen in /proc/<pid>/maps).
    let base = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
        )
    }
    .unwrap_or_else(|e| fail("mmap", e));
    for i in (1..n).step_by(2) {
        // SAFETY: the page lies inside the mapping made above, which nothing uses.
        let page_at = unsafe { base.cast::<u8>().add(i * page) };
        // SAFETY: changes the protection of one page of that mapping only.
        unsafe { rustix::mm::mprotect(page_at.cast(), page, rustix::mm::MprotectFlags::READ) }
            .unwrap_or_else(|e| fail("mprotect (more mappings than vm.max_map_count allows?)", e));
    }
    let lines = std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.lines().count())
        .unwrap_or(0);
    println!("ready {lines}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {
        line.clear();
    }
}
