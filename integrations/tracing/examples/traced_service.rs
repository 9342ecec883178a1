//! A service traced with `tracing` whose thread contexts follow its request spans across
//! the worker threads of a tokio runtime, for a profiler (or `otel-ctx show`) to read.
//!
//! It publishes its process context, serves fake requests on four workers (each request a
//! span with `http.route`, doing a little CPU work between awaits), and prints:
//!
//! - first `READY <pid>`;
//! - then one JSON line per finished request span:
//!   `{"trace_id":"<32 hex>","span_id":"<16 hex>","http.route":"..."}`.
//!
//! It runs until its stdin closes, or for `--duration <seconds>` (`10` or `10s`).
//!
//! ```sh
//! cargo run -p otel-ctx-tracing --example traced_service -- --duration 30 &
//! otel-ctx show --json <the pid it prints>
//! ```

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use otel_ctx_tracing::{span_ids, ThreadContextLayer};
use otel_ctx_writer::process::{global, Resource};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

const ROUTES: [&str; 4] = ["/cart", "/checkout", "/users/:id", "/search"];
/// Requests in flight at once.
const IN_FLIGHT: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let duration = parse_duration()?;
    global::publish(
        Resource::builder()
            .service_name("traced-service")
            .service_version(env!("CARGO_PKG_VERSION"))
            .build()?,
    )?;
    let layer = ThreadContextLayer::new().with_attribute("http.route")?;
    tracing_subscriber::registry().with(layer).init();

    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&stop));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("worker")
        .enable_time()
        .build()?;

    println!("READY {}", std::process::id());
    std::io::stdout().flush()?;

    let deadline = duration.map(|d| Instant::now() + d);
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        let mut next = 0usize;
        loop {
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if stop.load(Ordering::Relaxed) || expired {
                break;
            }
            while tasks.len() < IN_FLIGHT {
                tasks.spawn(request(ROUTES[next % ROUTES.len()], next as u64));
                next += 1;
            }
            let _ = tasks.join_next().await;
        }
        while tasks.join_next().await.is_some() {}
    });
    Ok(())
}

/// One fake request: a span with its route, CPU work around a few awaits (each await may
/// move the task to another worker), then its line on stdout.
async fn request(route: &'static str, n: u64) {
    let span = tracing::info_span!("request", http.route = route);
    let ids = span_ids(&span);
    async {
        for step in 0..3 {
            spin(Duration::from_micros(300 + 100 * ((n + step) % 4)));
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        spin(Duration::from_micros(200));
    }
    .instrument(span)
    .await;
    if let Some(ids) = ids {
        println!(
            "{{\"trace_id\":\"{}\",\"span_id\":\"{}\",\"http.route\":\"{}\"}}",
            hex(&ids.trace_id),
            hex(&ids.span_id),
            route
        );
    }
}

/// Busy work a sampling profiler would catch inside the span.
fn spin(duration: Duration) {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < duration {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sets `stop` when stdin reaches its end (or fails).
fn watch_stdin(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
            line.clear();
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// `--duration <seconds>` (`10` or `10s`), if given.
fn parse_duration() -> Result<Option<Duration>, String> {
    let mut args = std::env::args().skip(1);
    let mut duration = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--duration" => {
                let value = args.next().ok_or("--duration needs a number of seconds")?;
                let seconds: f64 = value
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| format!("--duration {value}: not a number of seconds"))?;
                duration = Some(Duration::from_secs_f64(seconds));
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: traced_service [--duration <seconds>]"
                ))
            }
        }
    }
    Ok(duration)
}
