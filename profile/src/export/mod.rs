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
//!
//! [`otlp::export_request`]: crate::otlp::export_request

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::otlp::OtlpScope;
use crate::Profile;

mod destination;
mod environment;
mod error;
mod stats;
mod tls;
mod worker;

pub use destination::{Destination, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT, PROFILES_PATH};
pub use environment::{
    http_destination, parse_header, timeout, tls_settings, ConfigError, Environment,
    ProcessEnvironment,
};

pub use stats::{Delivery, Loss, Stats};
pub use tls::{ClientIdentity, Tls, Trusted};

use stats::lock;
use worker::{Message, Sink, Worker};

/// The most bytes of encoded requests that wait for the collector, unless told
/// otherwise (64 MiB).
pub const DEFAULT_QUEUE_BYTES: usize = 64 << 20;
/// Batches waiting to be encoded: the hand-over between the caller and delivery.
const HANDOVER: usize = 4;

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

impl Exporter {
    /// Starts the delivery thread; a file destination is created (truncated) now, so
    /// that a path that cannot be written is said at once.
    pub fn start(options: Options) -> Result<Self, StartError> {
        let sink = match &options.destination {
            Destination::Http {
                url,
                headers,
                gzip,
                tls,
            } => Sink::Http {
                agent: ureq::Agent::config_builder()
                    .timeout_global(Some(options.timeout))
                    .tls_config(tls.config())
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
