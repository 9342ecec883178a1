//! What the exporter did so far ([`Stats`]), and what its requests came to
//! ([`Delivery`], [`Loss`]).

use std::sync::{Mutex, MutexGuard};

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
    ///
    /// [`Exporter::finish`]: super::Exporter::finish
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

/// The counts, even after a panic while they were held.
pub(super) fn lock(stats: &Mutex<Stats>) -> MutexGuard<'_, Stats> {
    // A panic while holding it leaves counts, which are still worth reporting.
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
