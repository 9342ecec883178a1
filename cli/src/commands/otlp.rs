//! Delivery of OTLP profiles (`profile --otlp`, `--otlp-file`): a thread of its own takes
//! the profiles of each export interval, builds one `ExportProfilesServiceRequest` (the
//! profile layer's OTLP view), and sends it with `POST <url>/v1development/profiles`
//! (HTTP/protobuf, gzip), or appends it to a file. Nothing here blocks the sampling: the
//! sampling loop hands a batch over without waiting (a batch that finds the hand-over
//! full is dropped and counted), and while the collector is down the encoded requests
//! wait in a queue bounded in bytes, the oldest dropped and counted first. Retries back
//! off exponentially (1 s to 30 s), or as a `Retry-After` says, on a transport error and
//! on the statuses OTLP/HTTP calls retryable (429, 502, 503, 504); each new interval's
//! request also tries at once, unless the collector asked for a wait. Any other status
//! rejects the request, which is counted and not sent again.

// Without the `ebpf` feature only `parse_size` (a flag's parser) is used: the exporter
// serves `profile --all` and `--otlp`, which sample with eBPF.
#![cfg_attr(not(feature = "ebpf"), allow(dead_code))]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use otel_ctx_profile::otlp::{self, OtlpScope};
use otel_ctx_profile::Profile;
use prost::Message as _;

/// The path of the profiles signal under an OTLP/HTTP base URL.
pub const PROFILES_PATH: &str = "v1development/profiles";
/// The collector's OTLP/HTTP address when none is given (the OTLP default).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// How long one request may take, and the final flush, unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait before a retry, doubled at each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts, also the most a `Retry-After` is followed.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Batches waiting to be encoded: the hand-over between sampling and delivery.
const HANDOVER: usize = 4;
/// The most of a collector's answer read (an `ExportProfilesServiceResponse`).
const MAX_RESPONSE: u64 = 64 * 1024;

/// Where the requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// An OTLP/HTTP receiver.
    Http {
        /// The full URL of the profiles signal (`.../v1development/profiles`).
        url: String,
        /// Headers sent with every request (authentication).
        headers: Vec<(String, String)>,
        /// Gzip the body (`Content-Encoding: gzip`).
        gzip: bool,
    },
    /// A file of requests, each a 4-byte big-endian length then the protobuf bytes.
    File(PathBuf),
}

impl Destination {
    /// How the summary names it.
    pub fn describe(&self) -> String {
        match self {
            Self::Http { url, .. } => url.clone(),
            Self::File(path) => path.display().to_string(),
        }
    }
}

/// How the exporter runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the requests go.
    pub destination: Destination,
    /// The most bytes of encoded requests waiting for the collector.
    pub queue_bytes: usize,
    /// How long one request may take; also the final flush's deadline.
    pub timeout: Duration,
    /// The instrumentation scope of the profiles (this tool and its version).
    pub scope: OtlpScope,
}

/// What the exporter did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests built (one per export interval with samples).
    pub requests: u64,
    /// Requests the destination accepted.
    pub sent: u64,
    /// Bytes of those requests as sent (gzipped for HTTP).
    pub sent_bytes: u64,
    /// Samples in them.
    pub sent_samples: u64,
    /// Attempts that failed and were tried again later.
    pub retries: u64,
    /// Requests dropped: the oldest, from a full queue, or still queued at the final
    /// flush's deadline.
    pub dropped: u64,
    /// Samples in them.
    pub dropped_samples: u64,
    /// Batches dropped before they were encoded (the hand-over was full).
    pub dropped_batches: u64,
    /// Requests the destination refused with a status not worth retrying.
    pub rejected: u64,
    /// Profiles the collector said it rejected in an accepted request
    /// (`partial_success.rejected_profiles`).
    pub rejected_profiles: u64,
    /// Bytes waiting now, and the most that ever waited.
    pub queued_bytes: usize,
    /// The most bytes that waited at once.
    pub queue_peak: usize,
    /// Requests waiting now.
    pub queued: usize,
    /// The last failure, as the destination or the network said it.
    pub last_error: Option<String>,
}

/// A request ready to send.
struct Encoded {
    body: Vec<u8>,
    samples: u64,
}

enum Message {
    Batch(Vec<Profile>),
    /// Send what is queued until the deadline, then stop.
    Flush(Instant),
}

/// The delivery thread and its hand-over.
pub struct Exporter {
    sender: Option<SyncSender<Message>>,
    worker: Option<JoinHandle<()>>,
    stats: Arc<Mutex<Stats>>,
    timeout: Duration,
    destination: Destination,
}

fn lock(stats: &Mutex<Stats>) -> MutexGuard<'_, Stats> {
    // A panic while holding it leaves counts, which are still worth reporting.
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Exporter {
    /// Starts the delivery thread; a file destination is created (truncated) now, so
    /// that a path that cannot be written is said at once.
    pub fn start(options: Options) -> Result<Self, String> {
        let sink = match &options.destination {
            Destination::Http { url, headers, gzip } => Sink::Http {
                agent: ureq::Agent::config_builder()
                    .timeout_global(Some(options.timeout))
                    .http_status_as_error(false)
                    .user_agent(concat!("otel-ctx/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .into(),
                url: url.clone(),
                headers: headers.clone(),
                gzip: *gzip,
            },
            Destination::File(path) => Sink::File(BufWriter::new(
                File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?,
            )),
        };
        let (sender, receiver) = mpsc::sync_channel(HANDOVER);
        let stats = Arc::new(Mutex::new(Stats::default()));
        let worker = Worker {
            receiver,
            sink,
            queue: VecDeque::new(),
            queue_limit: options.queue_bytes,
            stats: stats.clone(),
            scope: options.scope,
            backoff: FIRST_BACKOFF,
            next_attempt: Instant::now(),
            asked_to_wait: None,
        };
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start the OTLP export thread: {e}"))?;
        Ok(Self {
            sender: Some(sender),
            worker: Some(worker),
            stats,
            timeout: options.timeout,
            destination: options.destination,
        })
    }

    /// Where the requests go.
    pub const fn destination(&self) -> &Destination {
        &self.destination
    }

    /// Hands the profiles of one interval over, without waiting; dropped and counted
    /// when the delivery thread is that far behind.
    pub fn submit(&self, profiles: Vec<Profile>) {
        if profiles.is_empty() {
            return;
        }
        let Some(sender) = &self.sender else { return };
        match sender.try_send(Message::Batch(profiles)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                lock(&self.stats).dropped_batches += 1;
            }
        }
    }

    /// What was done so far.
    pub fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Sends what is queued, for at most the request timeout, then stops the thread;
    /// what is left is counted as dropped. The final counts.
    pub fn finish(mut self) -> Stats {
        if let Some(sender) = self.sender.take() {
            // Blocks at most until the worker takes the batches before it: each is
            // encoded, not sent, on the way.
            let _ = sender.send(Message::Flush(Instant::now() + self.timeout));
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        self.stats()
    }
}

enum Sink {
    Http {
        agent: ureq::Agent,
        url: String,
        headers: Vec<(String, String)>,
        gzip: bool,
    },
    File(BufWriter<File>),
}

/// What became of one attempt.
enum Outcome {
    Sent {
        rejected_profiles: u64,
    },
    /// Worth trying again, after the wait the collector asked for if it did.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    Rejected(String),
}

struct Worker {
    receiver: Receiver<Message>,
    sink: Sink,
    queue: VecDeque<Encoded>,
    queue_limit: usize,
    stats: Arc<Mutex<Stats>>,
    scope: OtlpScope,
    backoff: Duration,
    next_attempt: Instant,
    /// Until when the collector asked not to be sent anything (`Retry-After`).
    asked_to_wait: Option<Instant>,
}

impl Worker {
    fn run(mut self) {
        let mut deadline: Option<Instant> = None;
        loop {
            let message = match (deadline, self.queue.is_empty()) {
                (Some(_), _) => None,
                (None, true) => match self.receiver.recv() {
                    Ok(message) => Some(message),
                    // The sampling side is gone without a flush: nothing more to do.
                    Err(_) => break,
                },
                (None, false) => {
                    let wait = self.next_attempt.saturating_duration_since(Instant::now());
                    match self.receiver.recv_timeout(wait) {
                        Ok(message) => Some(message),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            match message {
                Some(Message::Batch(profiles)) => {
                    self.enqueue(&profiles);
                    // A new interval tries again at once (one attempt an interval is
                    // cheap, and finds a collector that came back), unless the collector
                    // asked for a wait.
                    let now = Instant::now();
                    if self.asked_to_wait.is_none_or(|until| now >= until) {
                        self.next_attempt = now;
                    }
                }
                Some(Message::Flush(at)) => {
                    deadline = Some(at);
                    self.next_attempt = Instant::now();
                }
                None => {}
            }
            if let Some(at) = deadline {
                self.deliver(Some(at));
                if self.queue.is_empty() || Instant::now() >= at {
                    break;
                }
                std::thread::sleep(
                    self.next_attempt
                        .min(at)
                        .saturating_duration_since(Instant::now()),
                );
            } else {
                self.deliver(None);
            }
        }
        // Whatever could not be sent in time.
        let mut stats = lock(&self.stats);
        while let Some(left) = self.queue.pop_front() {
            stats.dropped += 1;
            stats.dropped_samples += left.samples;
        }
        stats.queued = 0;
        stats.queued_bytes = 0;
        if let Sink::File(file) = &mut self.sink {
            if let Err(e) = file.flush() {
                stats.last_error = Some(e.to_string());
            }
        }
    }

    /// Encodes the batch as one request and queues it, dropping the oldest requests
    /// while the queue holds more than its limit.
    fn enqueue(&mut self, profiles: &[Profile]) {
        let samples: u64 = profiles
            .iter()
            .flat_map(|p| &p.entries)
            .map(|e| e.samples)
            .sum();
        let request = otlp::export_request(profiles, &self.scope).encode_to_vec();
        let body = match &self.sink {
            Sink::Http { gzip: true, .. } => gzip(&request),
            _ => request,
        };
        let mut stats = lock(&self.stats);
        stats.requests += 1;
        self.queue.push_back(Encoded { body, samples });
        let mut queued: usize = self.queue.iter().map(|e| e.body.len()).sum();
        while queued > self.queue_limit {
            let Some(oldest) = self.queue.pop_front() else {
                break;
            };
            queued -= oldest.body.len();
            stats.dropped += 1;
            stats.dropped_samples += oldest.samples;
        }
        stats.queued = self.queue.len();
        stats.queued_bytes = queued;
        stats.queue_peak = stats.queue_peak.max(queued);
    }

    /// Sends queued requests, oldest first, while the destination takes them and the
    /// time for the next attempt has come (and the deadline, if any, has not passed).
    fn deliver(&mut self, deadline: Option<Instant>) {
        while let Some(front) = self.queue.front() {
            let now = Instant::now();
            if now < self.next_attempt || deadline.is_some_and(|d| now >= d) {
                return;
            }
            let outcome = self.sink.send(&front.body);
            let mut stats = lock(&self.stats);
            match outcome {
                Outcome::Sent { rejected_profiles } => {
                    stats.sent += 1;
                    stats.sent_bytes += front.body.len() as u64;
                    stats.sent_samples += front.samples;
                    stats.rejected_profiles += rejected_profiles;
                    self.backoff = FIRST_BACKOFF;
                    self.asked_to_wait = None;
                }
                Outcome::Rejected(error) => {
                    stats.rejected += 1;
                    stats.last_error = Some(error);
                }
                Outcome::Retry { error, after } => {
                    stats.retries += 1;
                    stats.last_error = Some(error);
                    self.asked_to_wait = after.map(|wait| Instant::now() + wait);
                    self.next_attempt = Instant::now() + after.unwrap_or(self.backoff);
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return;
                }
            }
            self.queue.pop_front();
            stats.queued = self.queue.len();
            stats.queued_bytes = self.queue.iter().map(|e| e.body.len()).sum();
        }
    }
}

impl Sink {
    fn send(&mut self, body: &[u8]) -> Outcome {
        match self {
            Self::File(file) => {
                let written = u32::try_from(body.len())
                    .map_err(|_| std::io::Error::other("a request of 4 GiB or more"))
                    .and_then(|len| file.write_all(&len.to_be_bytes()))
                    .and_then(|()| file.write_all(body))
                    .and_then(|()| file.flush());
                match written {
                    Ok(()) => Outcome::Sent {
                        rejected_profiles: 0,
                    },
                    Err(e) => Outcome::Rejected(format!("cannot write the request: {e}")),
                }
            }
            Self::Http {
                agent,
                url,
                headers,
                gzip,
            } => {
                let mut request = agent
                    .post(url.as_str())
                    .header("Content-Type", "application/x-protobuf");
                if *gzip {
                    request = request.header("Content-Encoding", "gzip");
                }
                for (key, value) in headers.iter() {
                    request = request.header(key.as_str(), value.as_str());
                }
                match request.send(body) {
                    Ok(response) => answer(response),
                    Err(e) => Outcome::Retry {
                        error: format!("POST {url}: {e}"),
                        after: None,
                    },
                }
            }
        }
    }
}

/// What the collector's answer means: the status, its `Retry-After`, and the partial
/// success of an accepted request.
fn answer(mut response: ureq::http::Response<ureq::Body>) -> Outcome {
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_vec()
        .unwrap_or_default();
    if (200..300).contains(&status) {
        let rejected_profiles =
            otlp::proto::collector::profiles::v1development::ExportProfilesServiceResponse::decode(
                &body[..],
            )
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| u64::try_from(p.rejected_profiles).unwrap_or(0));
        return Outcome::Sent { rejected_profiles };
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    let error = if text.trim().is_empty() {
        format!("the collector answered {status}")
    } else {
        format!("the collector answered {status}: {}", text.trim())
    };
    match status {
        429 | 502 | 503 | 504 => Outcome::Retry {
            error,
            after: response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after),
        },
        _ => Outcome::Rejected(error),
    }
}

/// A `Retry-After` in seconds (the form collectors send), at most [`MAX_BACKOFF`].
fn retry_after(value: &str) -> Option<Duration> {
    let seconds: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_BACKOFF))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// The process environment's OTLP settings, as the OpenTelemetry SDKs read them.
pub trait Environment {
    /// The value of variable `name`, if set and not empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// The real environment.
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

/// The destination `--otlp [URL]`, `--otlp-header` and `--otlp-file` ask for, with the
/// OpenTelemetry exporter's environment variables filling in what they leave out:
/// `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT` (the full URL) or `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (a base URL) when `--otlp` has no URL, else `http://localhost:4318`;
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_PROFILES_HEADERS`
/// (`key=value,...`, values percent-decoded), which `--otlp-header` overrides key by key;
/// `OTEL_EXPORTER_OTLP_[PROFILES_]COMPRESSION` `none` turns gzip off. `None` when neither
/// `--otlp` nor `--otlp-file` is given.
pub fn destination(
    otlp: Option<Option<&str>>,
    headers: &[String],
    file: Option<&std::path::Path>,
    env: &dyn Environment,
) -> Result<Option<Destination>, String> {
    let url = match (otlp, file) {
        (Some(_), Some(_)) => {
            return Err("give --otlp or --otlp-file, not both".to_owned());
        }
        (None, Some(path)) => return Ok(Some(Destination::File(path.to_owned()))),
        (None, None) => return Ok(None),
        (Some(Some(url)), None) => signal_url(url),
        (Some(None), None) => match (
            env.var("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"),
            env.var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            // The signal's own endpoint is used as it is, as the SDKs do.
            (Some(url), _) => url,
            (None, Some(base)) => signal_url(&base),
            (None, None) => signal_url(DEFAULT_ENDPOINT),
        },
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "--otlp {url}: give an http:// or https:// URL (OTLP over HTTP/protobuf; gRPC \
             is not supported)"
        ));
    }
    let protocol = env
        .var("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL")
        .or_else(|| env.var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if let Some(protocol) = protocol.filter(|p| p.trim() != "http/protobuf") {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: otel-ctx sends OTLP over HTTP/protobuf \
             only (the collector's port 4318)"
        ));
    }
    let mut all: Vec<(String, String)> = Vec::new();
    let mut set = |key: &str, value: String| {
        all.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        all.push((key.to_owned(), value));
    };
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
    ] {
        for pair in env.var(name).iter().flat_map(|v| v.split(',')) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("{name}: {pair:?} is not key=value"));
            };
            set(key.trim(), percent_decode(value.trim()));
        }
    }
    for header in headers {
        let Some((key, value)) = header.split_once('=') else {
            return Err(format!("--otlp-header {header:?}: give KEY=VALUE"));
        };
        if key.trim().is_empty() {
            return Err(format!("--otlp-header {header:?}: the key is empty"));
        }
        set(key.trim(), value.to_owned());
    }
    let compression = env
        .var("OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION")
        .or_else(|| env.var("OTEL_EXPORTER_OTLP_COMPRESSION"));
    let gzip = match compression.as_deref().map(str::trim) {
        None | Some("gzip") => true,
        Some("none") => false,
        Some(other) => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_COMPRESSION={other}: use gzip or none"
            ))
        }
    };
    Ok(Some(Destination::Http {
        url,
        headers: all,
        gzip,
    }))
}

/// The request timeout: `OTEL_EXPORTER_OTLP_[PROFILES_]TIMEOUT` (milliseconds), else
/// [`DEFAULT_TIMEOUT`].
pub fn timeout(env: &dyn Environment) -> Result<Duration, String> {
    for name in [
        "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ] {
        if let Some(value) = env.var(name) {
            return match value.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                _ => Err(format!("{name}={value}: give milliseconds, such as 10000")),
            };
        }
    }
    Ok(DEFAULT_TIMEOUT)
}

/// `base` with the profiles signal's path, unless it ends with it already.
fn signal_url(base: &str) -> String {
    let base = base.trim();
    if base.trim_end_matches('/').ends_with(PROFILES_PATH) {
        return base.to_owned();
    }
    format!("{}/{PROFILES_PATH}", base.trim_end_matches('/'))
}

/// `%XX` sequences decoded (the W3C baggage form the OTLP header variables use); a
/// malformed sequence is kept as it is.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `--otlp-queue`: `64MiB`, `512KiB`, `1GiB`, `64M`, `64MB` or a number of bytes.
pub fn parse_size(arg: &str) -> Result<usize, String> {
    let arg = arg.trim();
    let split = arg.find(|c: char| !c.is_ascii_digit()).unwrap_or(arg.len());
    let (number, unit) = arg.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("{arg:?} is not a size such as 64MiB, 512KiB or 1000000"))?;
    let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {arg:?}: use KiB, MiB or GiB"
            ))
        }
    };
    number
        .checked_mul(scale)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{arg:?}: use a size from 1 byte to the memory there is"))
}

/// A size for people: `812 B`, `12.4 KiB`, `64.0 MiB`.
pub fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1 << 20 {
        format!("{:.1} KiB", b / 1024.0)
    } else if bytes < 1 << 30 {
        format!("{:.1} MiB", b / (1 << 20) as f64)
    } else {
        format!("{:.1} GiB", b / (1 << 30) as f64)
    }
}

#[cfg(test)]
#[path = "otlp_tests.rs"]
mod tests;
