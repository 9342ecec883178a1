//! The delivery thread: the queue bounded in bytes, the attempts and their backoff, and
//! what each answer of the destination means.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::stats::{lock, Stats};
use crate::otlp::{self, OtlpScope};
use crate::Profile;

/// The first wait before a retry, doubled at each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts, also the most a `Retry-After` is followed.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The most of a collector's answer read (an `ExportProfilesServiceResponse`).
const MAX_RESPONSE: u64 = 64 * 1024;

/// What the caller hands the thread.
pub(super) enum Message {
    /// The profiles of one interval: one request.
    Batch(Vec<Profile>),
    /// Send what is queued until the deadline, then stop.
    Flush(Instant),
}

/// A request ready to send.
struct Encoded {
    body: Vec<u8>,
    samples: u64,
}

/// Where the bytes go.
pub(super) enum Sink {
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
        /// The collector's `partial_success`: profiles rejected, and its message.
        partial: Option<(u64, String)>,
    },
    /// Worth trying again, after the wait the collector asked for if it did.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    Rejected(String),
}

pub(super) struct Worker {
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
    pub(super) fn new(
        receiver: Receiver<Message>,
        sink: Sink,
        queue_limit: usize,
        stats: Arc<Mutex<Stats>>,
        scope: OtlpScope,
    ) -> Self {
        Self {
            receiver,
            sink,
            queue: VecDeque::new(),
            queue_limit,
            stats,
            scope,
            backoff: FIRST_BACKOFF,
            next_attempt: Instant::now(),
            asked_to_wait: None,
        }
    }

    pub(super) fn run(mut self) {
        let mut deadline: Option<Instant> = None;
        loop {
            let message = match (deadline, self.queue.is_empty()) {
                (Some(_), _) => None,
                (None, true) => match self.receiver.recv() {
                    Ok(message) => Some(message),
                    // The caller is gone without a flush: nothing more to do.
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
                let error = format!("cannot write the requests: {e}");
                stats.first_error.get_or_insert_with(|| error.clone());
                stats.last_error = Some(error);
            }
        }
    }

    /// Encodes the batch as one request and queues it, dropping the oldest requests
    /// while the queue holds more than its limit.
    fn enqueue(&mut self, profiles: &[Profile]) {
        let request = otlp::export_request(profiles, &self.scope);
        let samples = request.samples();
        let body = match &self.sink {
            Sink::Http { gzip: true, .. } => gzip(&request.encode_to_vec()),
            _ => request.encode_to_vec(),
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
                Outcome::Sent { partial } => {
                    stats.sent += 1;
                    stats.sent_bytes += front.body.len() as u64;
                    stats.sent_samples += front.samples;
                    if let Some((rejected, message)) = partial {
                        stats.rejected_profiles += rejected;
                        // A message without rejected profiles is a warning (OTLP's
                        // partial success), still worth showing.
                        stats.last_error = Some(match (rejected, message.is_empty()) {
                            (0, _) => format!("the collector warned: {message}"),
                            (n, true) => format!("the collector rejected {n} profiles"),
                            (n, false) => {
                                format!("the collector rejected {n} profiles: {message}")
                            }
                        });
                    }
                    self.backoff = FIRST_BACKOFF;
                    self.asked_to_wait = None;
                }
                Outcome::Rejected(error) => {
                    stats.rejected += 1;
                    stats.rejected_samples += front.samples;
                    stats.first_error.get_or_insert_with(|| error.clone());
                    stats.last_error = Some(error);
                }
                Outcome::Retry { error, after } => {
                    stats.retries += 1;
                    stats.first_error.get_or_insert_with(|| error.clone());
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
                    Ok(()) => Outcome::Sent { partial: None },
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
                        error: e.to_string(),
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
        return Outcome::Sent {
            partial: otlp::partial_success(&body),
        };
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
pub(super) fn retry_after(value: &str) -> Option<Duration> {
    let seconds: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_BACKOFF))
}

/// `bytes` gzipped, as the body of a request with `Content-Encoding: gzip`.
pub(super) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}
