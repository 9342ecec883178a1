//! Another process that traces or reads a target, for the fault tests.
//!
//! - `otel-ctx-stress-tracer hold <pid> <tid>`: what a thread reader does, frozen in
//!   the middle: opens a `ThreadReader` on `pid`, stops thread `tid` with the reader's own
//!   `StoppedThread`, reads its record, prints `stopped <slot state>`, and then keeps the
//!   thread stopped until it is killed (or its stdin closes).
//! - `otel-ctx-stress-tracer seize <tid>...`: attaches to each thread with `PTRACE_SEIZE`,
//!   as a debugger or another profiler would, without stopping it, prints `traced`, and
//!   stays attached until its stdin closes.
//! - `otel-ctx-stress-tracer read <pid>`: reads the process context and every thread of
//!   `pid` once, and prints one line per outcome: `process ok <service.name>` or
//!   `process error <kind>: <message>`, `threads error <message>`, and `thread <tid> ok`
//!   or `thread <tid> error <message>`.

use std::io::{Read, Write};
use std::time::Duration;

use otel_ctx_conformance_helpers::open_thread_reader;
use otel_ctx_reader::memory::{ProcessMemory, ReadMethod};
use otel_ctx_reader::thread::tls::{read_stopped, StoppedThread};
use otel_ctx_reader::{ProcessContextReader, ThreadReader};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-stress-tracer: {what}: {e}");
    std::process::exit(1);
}

fn say(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn wait_for_stdin_close() {
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
}

fn number(arg: Option<String>, what: &str) -> u32 {
    arg.and_then(|a| a.parse().ok())
        .unwrap_or_else(|| fail("usage", format!("{what} must be a number")))
}

fn hold(pid: u32, tid: u32) {
    let reader = open_thread_reader(pid, Duration::from_secs(20))
        .unwrap_or_else(|e| fail("open the thread reader", e));
    let stopped = StoppedThread::stop(tid).unwrap_or_else(|e| fail("stop the thread", e));
    let memory = ProcessMemory::new(pid, ReadMethod::Auto);
    let sample = read_stopped(&stopped, reader.resolution(), &memory, 640)
        .unwrap_or_else(|e| fail("read the stopped thread", e));
    say(&format!("stopped {:?}", sample.state));
    // The thread stays stopped for as long as `stopped` lives.
    wait_for_stdin_close();
    drop(stopped);
}

fn seize(tids: &[u32]) {
    for &tid in tids {
        let Ok(tid) = libc::pid_t::try_from(tid) else {
            fail("usage", "thread id out of range");
        };
        // SAFETY: PTRACE_SEIZE takes a thread id and no pointers (addr and data are 0).
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) } == -1 {
            fail("PTRACE_SEIZE", std::io::Error::last_os_error());
        }
    }
    say("traced");
    // Exiting detaches every tracee; a seized thread that was never stopped runs on.
    wait_for_stdin_close();
}

fn read(pid: u32) {
    match ProcessContextReader::open(pid).and_then(|mut r| r.read()) {
        Ok(snapshot) => say(&format!(
            "process ok {}",
            snapshot.context.service_name().unwrap_or("-")
        )),
        Err(e) => say(&format!("process error {}: {e}", e.kind())),
    }
    match ThreadReader::open(pid) {
        Ok(mut reader) => match reader.read_all() {
            Ok(reports) => {
                for report in reports {
                    match report.context {
                        Ok(_) => say(&format!("thread {} ok", report.tid)),
                        Err(e) => say(&format!("thread {} error {e}", report.tid)),
                    }
                }
            }
            Err(e) => say(&format!("threads error {e}")),
        },
        Err(e) => say(&format!("threads error {e}")),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("hold") => {
            let pid = number(args.next(), "pid");
            let tid = number(args.next(), "tid");
            hold(pid, tid);
        }
        Some("seize") => {
            let tids: Vec<u32> = args.map(|a| number(Some(a), "tid")).collect();
            seize(&tids);
        }
        Some("read") => read(number(args.next(), "pid")),
        _ => fail(
            "usage",
            "otel-ctx-stress-tracer hold <pid> <tid> | seize <tid>... | read <pid>",
        ),
    }
}
