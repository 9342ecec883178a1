//! Test target for the eBPF sampler, written with `otel-ctx-writer`: publishes a process
//! context with a key map, then three threads attach distinct records and one thread
//! attaches nothing, and all four spin on the CPU (a CPU-clock tick samples only running
//! threads). Each thread prints `thread <tid> tp=<hex> slot=<hex> record=<hex>` (the lines
//! of the C fixtures), then the program prints `ready` and runs until its standard input
//! closes. With the argument `--reversed-keys` it registers the same keys in the other
//! order: the same attributes under other key indices (another key map).

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::{Arc, Barrier, Mutex};

use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{
    attached_record_address, register_all, tls_slot_address, ThreadContext,
};

fn thread_pointer() -> usize {
    let tp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads the thread control block's self pointer at %fs:0; no memory is written.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads the thread pointer register; no memory is touched.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem))
    };
    tp
}

fn main() {
    let resource = Resource::builder()
        .service_name("ebpf-busy-fixture")
        .build()
        .expect("build the resource");
    global::publish(resource).expect("publish the process context");
    let [route, method] = if std::env::args().any(|a| a == "--reversed-keys") {
        let [method, route] =
            register_all(["http.request.method", "http.route"]).expect("register the keys");
        [route, method]
    } else {
        register_all(["http.route", "http.request.method"]).expect("register the keys")
    };
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let barrier = Arc::new(Barrier::new(5));
    for n in 0u8..4 {
        let (out, barrier) = (out.clone(), barrier.clone());
        std::thread::Builder::new()
            .name(format!("busy-{n}"))
            .spawn(move || {
                if n > 0 {
                    let routes = ["/checkout", "/cart", "/search"];
                    let context = ThreadContext::new(
                        [n * 16; 16],
                        [0x80 + n * 8; 8],
                        1,
                        &[(route, routes[usize::from(n % 3)]), (method, "GET")],
                    )
                    .expect("build the record");
                    // The slot owns it from here, for the thread's whole life.
                    let _ = context.attach();
                }
                let line = format!(
                    "thread {} tp={:x} slot={:x} record={:x}\n",
                    rustix::thread::gettid().as_raw_nonzero(),
                    thread_pointer(),
                    tls_slot_address() as usize,
                    attached_record_address() as usize,
                );
                out.lock()
                    .expect("stdout lock")
                    .write_all(line.as_bytes())
                    .ok();
                barrier.wait();
                let mut iterations = 0u64;
                loop {
                    iterations = black_box(iterations.wrapping_add(1));
                }
            })
            .expect("spawn a thread");
    }
    barrier.wait();
    {
        let mut out = out.lock().expect("stdout lock");
        out.write_all(b"ready\n").ok();
        out.flush().ok();
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
}
