//! Delivery of OTLP profiles (feature `http`): a thread of its own takes the profiles of
//! each export interval, builds one request ([`otlp::export_request`]), and sends it
//! with `POST <url>/v1development/profiles` (HTTP/protobuf, gzip), or appends it to a
//! file.
//!
//! ```no_run
//! # use otel_ctx_profile::export::{self, Exporter, Options, ProcessEnvironment};
//! # use otel_ctx_profile::otlp::OtlpScope;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> { let profiles = Vec::new();
//! // OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _COMPRESSION, as the SDKs read them.
//! let destination = export::http_destination(None, Vec::new(), &ProcessEnvironment)?;
//! let scope = OtlpScope { name: "my-profiler".into(), version: "1.0".into() };
//! let exporter = Exporter::start(
//!     Options::new(destination, scope).with_timeout(export::timeout(&ProcessEnvironment)?),
//! )?;
//! // Every interval: the profiles of each process, `Profiler::profile`.
//! exporter.submit(profiles);
//! // At the end: what is queued is sent, for at most the timeout.
//! let stats = exporter.finish();
//! println!("{} requests sent, {} dropped", stats.sent, stats.dropped);
//! match stats.delivery() {
//!     export::Delivery::Failed(loss) => eprintln!("nothing delivered: {loss}"),
//!     export::Delivery::Partial(loss) => eprintln!("{loss}"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```
//!
//! Nothing here blocks the caller: [`Exporter::submit`] hands a batch over without
//! waiting (a batch that finds the hand-over full is dropped and counted), and while
//! the collector is down the encoded requests wait in a queue bounded in bytes, the
//! oldest dropped and counted first. Retries back off exponentially (1 s to 30 s), or as
//! a `Retry-After` says, on a transport error and on the statuses OTLP/HTTP calls
//! retryable (429, 502, 503, 504); each new interval's request also tries at once,
//! unless the collector asked for a wait. Any other status rejects the request, which is
//! counted and not sent again. An accepted request's `partial_success` is counted
//! ([`Stats::rejected_profiles`]). The first failure is kept as it happens
//! ([`Stats::first_error`]), and [`Stats::delivery`] says what the requests came to:
//! all delivered, part of them or none, and how much was lost ([`Loss`]).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::otlp::{self, OtlpScope};
use crate::Profile;

mod environment;
mod worker;

pub use environment::{
    http_destination, parse_header, timeout, ConfigError, Environment, ProcessEnvironment,
};

use worker::{Message, Sink, Worker};

/// The path of the profiles signal under an OTLP/HTTP base URL.
pub const PROFILES_PATH: &str = "v1development/profiles";
/// The collector's OTLP/HTTP address when none is given (the OTLP default).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// How long one request may take, and the final flush, unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of encoded requests that wait for the collector, unless told
/// otherwise (64 MiB).
pub const DEFAULT_QUEUE_BYTES: usize = 64 << 20;
/// Batches waiting to be encoded: the hand-over between the caller and delivery.
const HANDOVER: usize = 4;

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
    /// How a summary names it: the URL or the path.
    pub fn describe(&self) -> String {
        match self {
            Self::Http { url, .. } => url.clone(),
            Self::File(path) => path.display().to_string(),
        }
    }
}

/// How the exporter runs: [`Options::new`], then the builder methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Where the requests go.
    pub destination: Destination,
    /// The most bytes of encoded requests waiting for the collector. Default
    /// [`DEFAULT_QUEUE_BYTES`].
    pub queue_bytes: usize,
    /// How long one request may take; also the final flush's deadline. Default
    /// [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// The instrumentation scope of the profiles: the profiler and its version.
    pub scope: OtlpScope,
    /// The `User-Agent` of the HTTP requests. Default `otel-ctx-profile/<version>`.
    pub user_agent: String,
}

impl Options {
    /// Requests to `destination`, under `scope`, with the default bound, timeout and
    /// user agent.
    pub fn new(destination: Destination, scope: OtlpScope) -> Self {
        Self {
            destination,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            timeout: DEFAULT_TIMEOUT,
            scope,
            user_agent: concat!("otel-ctx-profile/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }

    /// The most bytes of encoded requests waiting for the collector.
    #[must_use]
    pub const fn with_queue_bytes(mut self, bytes: usize) -> Self {
        self.queue_bytes = bytes;
        self
    }

    /// How long one request may take, and the final flush.
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `User-Agent` of the HTTP requests.
    #[must_use]
    pub fn with_user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }
}

/// What the exporter did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests built (one per batch with profiles).
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
    /// Samples in them.
    pub rejected_samples: u64,
    /// Profiles the collector said it rejected in an accepted request
    /// (`partial_success.rejected_profiles`).
    pub rejected_profiles: u64,
    /// Bytes waiting now.
    pub queued_bytes: usize,
    /// The most bytes that waited at once.
    pub queue_peak: usize,
    /// Requests waiting now.
    pub queued: usize,
    /// The last failure, as the destination or the network said it (or the message of
    /// a collector's partial success).
    pub last_error: Option<String>,
    /// The first attempt that failed (retried or rejected), as the destination or the
    /// network said it: set once, when it happens, so that a caller that looks at the
    /// counts now and then can say it at once.
    pub first_error: Option<String>,
}

impl Stats {
    /// What the requests came to so far (after [`Exporter::finish`]: in the end), for a
    /// tool's exit status: nothing to send, all delivered, part of them, or none.
    /// Requests still queued count as neither delivered nor lost.
    pub fn delivery(&self) -> Delivery {
        let loss = Loss {
            requests: self.dropped + self.rejected,
            of: self.requests,
            samples: self.dropped_samples + self.rejected_samples,
            batches: self.dropped_batches,
            profiles: self.rejected_profiles,
        };
        if self.requests == 0 && self.dropped_batches == 0 {
            Delivery::NothingToSend
        } else if self.sent == 0 {
            Delivery::Failed(loss)
        } else if loss.requests + loss.batches + loss.profiles > 0 {
            Delivery::Partial(loss)
        } else {
            Delivery::Complete
        }
    }
}

/// What an exporter's requests came to ([`Stats::delivery`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// No batch was submitted with a profile in it: nothing to send.
    NothingToSend,
    /// Every request built was delivered, every profile in them accepted.
    Complete,
    /// Some requests were delivered; the loss says what was not.
    Partial(Loss),
    /// There was something to send, and nothing was delivered; the loss says how much.
    Failed(Loss),
}

/// What did not reach the destination: requests dropped or rejected, batches dropped
/// before they were encoded, profiles the collector rejected in requests it accepted.
/// Its `Display` says it in a few words: `2 of 5 requests not delivered (180 samples)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Loss {
    /// Requests not delivered: dropped (from a full queue, or left at the final flush's
    /// deadline) or rejected by the destination.
    pub requests: u64,
    /// Requests built in all.
    pub of: u64,
    /// Samples in the requests not delivered.
    pub samples: u64,
    /// Batches dropped before they were encoded (the hand-over was full).
    pub batches: u64,
    /// Profiles the collector rejected in requests it accepted.
    pub profiles: u64,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.requests > 0 || (self.batches == 0 && self.profiles == 0) {
            parts.push(format!(
                "{} of {} requests not delivered ({} samples)",
                self.requests, self.of, self.samples
            ));
        }
        if self.batches > 0 {
            parts.push(format!("{} batches dropped before encoding", self.batches));
        }
        if self.profiles > 0 {
            parts.push(format!(
                "{} profiles rejected by the collector",
                self.profiles
            ));
        }
        f.write_str(&parts.join(", "))
    }
}

impl std::fmt::Display for Stats {
    /// The counts as text: requests built, sent (bytes, samples, bytes a sample), retried,
    /// dropped, rejected; the queue now and at its peak; the last error on a line of its
    /// own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |bytes: u64| bytesize::ByteSize(bytes).display().iec().to_string();
        let per_sample = match self.sent_samples {
            0 => String::new(),
            n => format!(", {:.1} bytes a sample", self.sent_bytes as f64 / n as f64),
        };
        write!(
            f,
            "{} requests built, {} sent ({}, {} samples{per_sample}), {} retries, {} dropped \
             ({} samples; {} batches before encoding), {} rejected, {} profiles rejected by \
             the collector; queue {} now, peak {}",
            self.requests,
            self.sent,
            size(self.sent_bytes),
            self.sent_samples,
            self.retries,
            self.dropped,
            self.dropped_samples,
            self.dropped_batches,
            self.rejected,
            self.rejected_profiles,
            size(self.queued_bytes as u64),
            size(self.queue_peak as u64),
        )?;
        match &self.last_error {
            Some(error) => write!(f, "\nlast error: {error}"),
            None => Ok(()),
        }
    }
}

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The file destination could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateFile {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The delivery thread could not be started.
    #[error("cannot start the OTLP export thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The delivery thread and its hand-over.
#[derive(Debug)]
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
    pub fn start(options: Options) -> Result<Self, StartError> {
        let sink = match &options.destination {
            Destination::Http { url, headers, gzip } => Sink::Http {
                agent: ureq::Agent::config_builder()
                    .timeout_global(Some(options.timeout))
                    .http_status_as_error(false)
                    .user_agent(options.user_agent.as_str())
                    .build()
                    .into(),
                url: url.clone(),
                headers: headers.clone(),
                gzip: *gzip,
            },
            Destination::File(path) => {
                Sink::File(BufWriter::new(File::create(path).map_err(|source| {
                    StartError::CreateFile {
                        path: path.clone(),
                        source,
                    }
                })?))
            }
        };
        let (sender, receiver) = mpsc::sync_channel(HANDOVER);
        let stats = Arc::new(Mutex::new(Stats::default()));
        let worker = Worker::new(
            receiver,
            sink,
            options.queue_bytes,
            stats.clone(),
            options.scope,
        );
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || worker.run())
            .map_err(StartError::Thread)?;
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

    /// Hands the profiles of one interval (one per process) over, without waiting; they
    /// become one request. Dropped and counted when the delivery thread is that far
    /// behind.
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

    /// Starts the final flush without waiting for it: what is queued is sent for at
    /// most the request timeout, then the thread stops ([`is_done`](Self::is_done)), what
    /// is left counted as dropped. Batches submitted after it are dropped and counted.
    /// The counts go on meanwhile ([`stats`](Self::stats)); [`finish`](Self::finish)
    /// waits for the end.
    pub fn close(&mut self) {
        if let Some(sender) = self.sender.take() {
            // Blocks at most until the worker takes the batches before it: each is
            // encoded, not sent, on the way.
            let _ = sender.send(Message::Flush(Instant::now() + self.timeout));
        }
    }

    /// Whether the delivery thread has stopped: after [`close`](Self::close), once the
    /// flush is over.
    pub fn is_done(&self) -> bool {
        self.worker.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Sends what is queued, for at most the request timeout, then stops the thread;
    /// what is left is counted as dropped ([`close`](Self::close), then the wait). The
    /// final counts.
    pub fn finish(mut self) -> Stats {
        self.close();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        self.stats()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
