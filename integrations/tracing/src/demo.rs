//! A demo service traced the way a Rust service is: `tracing` spans, `tracing-opentelemetry`
//! over the OpenTelemetry SDK, and [`ThreadContextLayer`], on a
//! 4-worker tokio runtime (feature `demo-service`).
//!
//! It is the service of the `traced_service` example and of `otel-ctx demo`:
//!
//! - the process context is the SDK's `Resource` (`service.name=demo-checkout`,
//!   `service.version`, `deployment.environment.name=demo`, `host.arch`, `process.pid`),
//!   published by `otel-ctx-opentelemetry`'s `ProcessContextProcessor` when the tracer
//!   provider is built; every second the extra attribute `demo.requests_served` is updated
//!   with the number of request spans exported so far;
//! - fake requests for a few routes run on four worker threads named `demo-worker-<n>`,
//!   a few in flight at once; each is a span `request` with the fields `http.route`,
//!   `http.request.method` and, recorded halfway through, `user.tier`, all three mapped to
//!   thread-context attributes of the same names. A request does CPU work between awaits,
//!   so a task can move to another worker in the middle of its span;
//! - the SDK exports each finished span to an in-process exporter (no network), which
//!   counts it and, when asked ([`Options::print`]), prints it on stdout as one JSON line:
//!   `{"trace_id":"<32 hex>","span_id":"<16 hex>","http.route":"..."}`, after a first line
//!   `READY <pid>`.
//!
//! It runs until its stdin closes or [`Options::duration`] has passed, then finishes the
//! requests in flight, shuts the tracer provider down and unpublishes its context.

use std::error::Error;
use std::fmt::{self, Write as _};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use otel_ctx_opentelemetry::ProcessContextProcessor;
use otel_ctx_writer::process::{global, OwnedValue};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

use crate::ThreadContextLayer;

/// The routes served, with their methods.
pub const ROUTES: [(&str, &str); 5] = [
    ("GET", "/api/cart"),
    ("POST", "/api/cart/items"),
    ("GET", "/api/products/:id"),
    ("POST", "/api/checkout"),
    ("GET", "/healthz"),
];
/// The values of `user.tier`.
pub const TIERS: [&str; 3] = ["free", "pro", "enterprise"];
/// The span fields recorded as thread-context attributes (under the same key names).
pub const ATTRIBUTES: [&str; 3] = ["http.route", "http.request.method", "user.tier"];
/// The function that does each route's work (in the order of [`ROUTES`]), as a profile
/// names it.
pub const HANDLERS: [&str; 5] = [
    "cart_handler",
    "cart_items_handler",
    "product_handler",
    "checkout_handler",
    "health_handler",
];
/// Worker threads of the runtime.
pub const WORKERS: usize = 4;
/// Requests in flight at once.
const IN_FLIGHT: usize = 8;

/// How the service runs.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Print `READY <pid>` first, then one JSON line per exported request span.
    pub print: bool,
    /// Stop after this long (also when stdin closes).
    pub duration: Option<Duration>,
}

impl Options {
    /// `--duration <seconds>` (`10` or `10s`), the only argument, if given.
    pub fn parse_duration(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = args.into_iter();
        let mut options = Self::default();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--duration" => {
                    let value = args.next().ok_or("--duration needs a number of seconds")?;
                    let seconds: f64 = value
                        .trim_end_matches('s')
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| format!("--duration {value}: not a number of seconds"))?;
                    options.duration = Some(Duration::from_secs_f64(seconds));
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(options)
    }
}

/// Why the service could not run.
#[derive(Debug)]
pub struct DemoError(String);

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for DemoError {}

fn fail(what: &str) -> impl FnOnce(&dyn fmt::Display) -> DemoError + '_ {
    move |e| DemoError(format!("{what}: {e}"))
}

/// Runs the service until stdin closes or `options.duration` has passed.
///
/// It installs the process's global `tracing` subscriber: call it once per process.
pub fn run(options: Options) -> Result<(), DemoError> {
    let exported = Arc::new(AtomicU64::new(0));
    let resource = Resource::builder()
        .with_attributes([
            KeyValue::new("service.name", "demo-checkout"),
            KeyValue::new("service.version", "1.4.2"),
            KeyValue::new("deployment.environment.name", "demo"),
            KeyValue::new("host.arch", std::env::consts::ARCH),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ])
        .build();
    let publisher = ProcessContextProcessor::new();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(publisher.clone())
        .with_simple_exporter(SpanLines {
            print: options.print,
            exported: Arc::clone(&exported),
        })
        .build();
    if let Some(e) = publisher.last_error() {
        return Err(DemoError(format!(
            "cannot publish the process context: {e}"
        )));
    }

    let mut layer = ThreadContextLayer::new();
    for field in ATTRIBUTES {
        layer = layer
            .with_attribute(field)
            .map_err(|e| fail("cannot register a thread-context key")(&e))?;
    }
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("demo-service")))
        .with(layer)
        .try_init()
        .map_err(|e| fail("cannot install the tracing subscriber")(&e))?;

    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&stop));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name_fn({
            let next = AtomicU64::new(0);
            move || format!("demo-worker-{}", next.fetch_add(1, Ordering::Relaxed))
        })
        .enable_time()
        .build()
        .map_err(|e| fail("cannot start the runtime")(&e))?;

    if options.print {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "READY {}", std::process::id())
            .and_then(|()| stdout.flush())
            .map_err(|e| fail("cannot write to stdout")(&e))?;
    }

    let started = Instant::now();
    let deadline = options.duration.map(|d| started + d);
    let result = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        let mut next = 0u64;
        let mut updates = 0u64;
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
                break;
            }
            if now >= started + Duration::from_secs(updates + 1) {
                updates += 1;
                let count = i64::try_from(exported.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
                global::update(|_, extra| {
                    extra.set("demo.requests_served", OwnedValue::Int(count));
                })
                .map_err(|e| fail("cannot update the process context")(&e))?;
            }
            while tasks.len() < IN_FLIGHT {
                tasks.spawn(request(next));
                next += 1;
            }
            let _ = tasks.join_next().await;
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    });
    drop(runtime);
    provider
        .shutdown()
        .map_err(|e| fail("cannot shut the tracer provider down")(&e))?;
    global::unpublish().map_err(|e| fail("cannot unpublish the process context")(&e))?;
    result
}

/// One fake request: a span with its route and method, CPU work around a few awaits
/// (each await may move the task to another worker), `user.tier` recorded halfway.
async fn request(n: u64) {
    let mix = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let (method, route) = ROUTES[(mix >> 32) as usize % ROUTES.len()];
    let tier = TIERS[(mix >> 40) as usize % TIERS.len()];
    let span = tracing::info_span!(
        "request",
        http.route = route,
        http.request.method = method,
        user.tier = tracing::field::Empty,
    );
    let recorder = span.clone();
    async move {
        for step in 0..3u64 {
            handle(route, Duration::from_micros(200 + 100 * ((n + step) % 4)));
            if step == 1 {
                recorder.record("user.tier", tier);
            }
            tokio::task::yield_now().await;
        }
        // Waiting on something else: the worker runs other tasks, or nothing.
        tokio::time::sleep(Duration::from_millis(4 + (mix >> 48) % 4)).await;
        handle(route, Duration::from_micros(200));
    }
    .instrument(span)
    .await;
}

/// The work of one request, in a function of its route's own: a profile of the service
/// shows each route's samples under its handler.
fn handle(route: &str, duration: Duration) {
    match route {
        "/api/cart" => cart_handler(duration),
        "/api/cart/items" => cart_items_handler(duration),
        "/api/products/:id" => product_handler(duration),
        "/api/checkout" => checkout_handler(duration),
        _ => health_handler(duration),
    }
}

/// `GET /api/cart`.
#[inline(never)]
pub fn cart_handler(duration: Duration) {
    spin(duration);
}

/// `POST /api/cart/items`.
#[inline(never)]
pub fn cart_items_handler(duration: Duration) {
    spin(duration);
}

/// `GET /api/products/:id`.
#[inline(never)]
pub fn product_handler(duration: Duration) {
    spin(duration);
}

/// `POST /api/checkout`.
#[inline(never)]
pub fn checkout_handler(duration: Duration) {
    spin(duration);
}

/// `GET /healthz`.
#[inline(never)]
pub fn health_handler(duration: Duration) {
    spin(duration);
}

/// Busy work a sampling profiler would catch inside the span.
#[inline(never)]
fn spin(duration: Duration) {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < duration {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
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

/// The SDK's exporter of this service: counts the spans, and prints them if asked.
#[derive(Debug)]
struct SpanLines {
    print: bool,
    exported: Arc<AtomicU64>,
}

impl SpanExporter for SpanLines {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.exported
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let result = if self.print {
            let mut out = String::new();
            for span in &batch {
                span_line(&mut out, span);
            }
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(|e| opentelemetry_sdk::error::OTelSdkError::InternalFailure(e.to_string()))
        } else {
            Ok(())
        };
        std::future::ready(result)
    }
}

/// `{"trace_id":"<32 hex>","span_id":"<16 hex>","http.route":"..."}` and a newline.
fn span_line(out: &mut String, span: &SpanData) {
    let context = &span.span_context;
    let _ = write!(
        out,
        "{{\"trace_id\":\"{}\",\"span_id\":\"{}\"",
        context.trace_id(),
        context.span_id()
    );
    let route = span
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "http.route");
    if let Some(KeyValue {
        value: Value::String(route),
        ..
    }) = route
    {
        out.push_str(",\"http.route\":");
        json_string(out, route.as_str());
    }
    out.push_str("}\n");
}

/// `value` as a JSON string.
fn json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        json_string(&mut out, "a\"b\\c\nd/é");
        assert_eq!(out, r#""a\"b\\c\u000ad/é""#);
        assert_eq!(
            serde_json::from_str::<String>(&out).unwrap(),
            "a\"b\\c\nd/é"
        );
    }

    #[test]
    fn durations_parse_and_bad_ones_are_refused() {
        let parse = |args: &[&str]| Options::parse_duration(args.iter().map(|s| s.to_string()));
        assert_eq!(
            parse(&["--duration", "2.5s"]).unwrap().duration,
            Some(Duration::from_millis(2500))
        );
        assert_eq!(parse(&[]).unwrap().duration, None);
        assert!(parse(&["--duration"]).is_err());
        assert!(parse(&["--duration", "soon"]).is_err());
        assert!(parse(&["--duration", "-1"]).is_err());
        assert!(parse(&["--other"]).is_err());
    }
}
