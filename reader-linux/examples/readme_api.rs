//! The API lines of the README, compiled with the tests so they stay true: publishes a
//! process context and a thread context, then reads the process context back.

use otel_ctx_reader::{ProcessContextReader, ThreadReader};
use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{self, ThreadContext};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (trace_id, span_id) = ([0x4b; 16], [0x00; 8]);
    let pid = std::process::id();

    // Publish: the process context, then thread contexts.
    let resource = Resource::builder()
        .service_name("checkout")
        .service_version("1.4.2")
        .build()?;
    global::publish(resource)?;
    let route = thread::register("http.route")?;
    let _guard = ThreadContext::new(trace_id, span_id, 0x01, &[(route, "/cart")])?.attach_scoped();

    // Read. (Another process reads threads; a process cannot ptrace its own threads.)
    let snapshot = ProcessContextReader::open(pid)?.read()?;
    println!(
        "service.name = {:?}, key map = {:?}",
        snapshot.context.service_name(),
        snapshot.threadlocal.as_ref().map(|t| &t.attribute_key_map)
    );
    if std::env::args().nth(1).as_deref() == Some("--threads-of") {
        let other: u32 = std::env::args().nth(2).ok_or("pid expected")?.parse()?;
        for t in ThreadReader::open(other)?.read_all()? {
            println!("{} {:?}", t.tid, t.context);
        }
    }
    Ok(())
}
