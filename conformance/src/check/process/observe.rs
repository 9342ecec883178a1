//! Reading the context over the window: the first consistent read of the primary mapping,
//! the polls that follow, and what each read changes (the updates, the order of their
//! timestamps, the growth of the key map).

use std::time::{Duration, Instant};

use otel_ctx_codec::header::{ProcessContextHeader, MAX_PAYLOAD_SIZE};
use otel_ctx_reader::process::seqlock::{read_consistent, PayloadCopy, SeqlockRead};
use otel_ctx_reader::{Error, ProcessMaps};

use super::clock::{other_time_namespace, process_start_ns};
use super::discover::choose;
use super::judge::key_map_change;
use super::{KeyMapLen, PayloadRead, Presence, ProcessSide, Seen};

/// Reads of the header made on the first look: while the timestamp is 0 or changing, the
/// checker retries for about 100 ms before it concludes.
const FIRST_READ_ATTEMPTS: u32 = 50;
/// Pause between those reads.
const FIRST_READ_PAUSE: Duration = Duration::from_millis(2);
/// Reads per poll while watching (a poll that finds the writer busy simply ends).
const POLL_ATTEMPTS: u32 = 2;

/// The outcome of a seqlock read of header and payload.
enum ReadOutcome {
    /// Header and payload, consistent with one another.
    Consistent(ProcessContextHeader, PayloadRead),
    /// `monotonic_published_at_ns` was 0 in every attempt.
    Zero,
    /// The timestamp changed during every attempt.
    Unstable,
    /// The mapping is gone.
    Unmapped,
}

impl ProcessSide {
    /// The key map's length for judging thread records; `refresh` reads the process
    /// context again first (a record may use a key added since the last read).
    pub(in crate::check) fn key_map_len(&mut self, refresh: bool) -> KeyMapLen {
        if refresh {
            // A failed read leaves the last known key map; the watch reports the failure.
            let _ = self.poll();
        }
        match self.content.as_ref().map(|c| &c.key_map) {
            Some(Presence::Valid(names)) => KeyMapLen::Known(names.len()),
            Some(Presence::Absent) => KeyMapLen::Absent,
            Some(Presence::Invalid) | None => KeyMapLen::Unknown,
        }
    }

    /// Finds the candidate mappings and makes the first consistent read of the primary
    /// one, retrying for about 100 ms while its timestamp is 0 or changing. Returns the
    /// pass over the maps, for the thread side's modules.
    pub(in crate::check) fn first_read(&mut self) -> Result<ProcessMaps, Error> {
        let (candidates, maps) = self.discover_with_maps()?;
        self.candidates = candidates;
        self.primary = choose(&self.candidates).cloned();
        let Some(primary) = self.primary.clone() else {
            return Ok(maps);
        };
        self.started_at_ns = process_start_ns(self.pid);
        self.other_time_namespace = other_time_namespace(self.pid);
        self.first_look = Some(Instant::now());
        for attempt in 0..FIRST_READ_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(FIRST_READ_PAUSE);
            }
            match self.read_consistent(primary.start, 1)? {
                ReadOutcome::Consistent(header, payload) => {
                    self.observe(header, payload);
                    break;
                }
                ReadOutcome::Zero => self.zero_seen = true,
                ReadOutcome::Unstable => self.unstable_seen = true,
                ReadOutcome::Unmapped => {
                    self.republished()?;
                    break;
                }
            }
        }
        Ok(maps)
    }

    /// One look at the header while watching: records updates and what they change.
    pub(in crate::check) fn poll(&mut self) -> Result<(), Error> {
        if self.unpublished {
            return Ok(());
        }
        let Some(start) = self.primary.as_ref().map(|p| p.start) else {
            return Ok(());
        };
        match self.read_consistent(start, POLL_ATTEMPTS)? {
            ReadOutcome::Consistent(header, payload) => self.observe(header, payload),
            ReadOutcome::Zero => self.zero_seen = true,
            ReadOutcome::Unstable => self.unstable_seen = true,
            ReadOutcome::Unmapped => self.republished()?,
        }
        Ok(())
    }

    /// The mapping went away: the context was unpublished, or published again elsewhere.
    fn republished(&mut self) -> Result<(), Error> {
        let candidates = self.discover()?;
        match choose(&candidates).filter(|c| c.signature_ok()) {
            Some(next) => self.primary = Some(next.clone()),
            None => self.unpublished = true,
        }
        Ok(())
    }

    /// The seqlock read of OTEP 4719 §Reading Protocol 3 to 7 ([`read_consistent`], the
    /// readers' own), up to `attempts` times, without the identity checks of step 2 (the
    /// checker judges headers readers would skip) and without trusting `payload_size`
    /// beyond the bound readers apply.
    fn read_consistent(&mut self, start: u64, attempts: u32) -> Result<ReadOutcome, Error> {
        let mut all_zero = true;
        for _ in 0..attempts {
            let mut bytes = Vec::new();
            let read = read_consistent(&self.memory, start, MAX_PAYLOAD_SIZE, None, &mut bytes)
                .map_err(|e| Error::from_copy(self.pid, e, "the header or payload"))?;
            match read {
                SeqlockRead::Unmapped => return Ok(ReadOutcome::Unmapped),
                SeqlockRead::Updating => {}
                SeqlockRead::Consistent { header, payload } => {
                    let payload = match payload {
                        PayloadCopy::Copied => PayloadRead::Bytes(bytes),
                        PayloadCopy::Unmapped => PayloadRead::Unmapped,
                        _ => PayloadRead::OutOfRange,
                    };
                    return Ok(ReadOutcome::Consistent(header, payload));
                }
                // Changed under the read (`Unchanged` needs a `since`, which is not given).
                _ => all_zero = false,
            }
        }
        Ok(if all_zero {
            ReadOutcome::Zero
        } else {
            ReadOutcome::Unstable
        })
    }

    /// Takes one consistent read: compares it with the previous one and judges it.
    fn observe(&mut self, header: ProcessContextHeader, payload: PayloadRead) {
        let seen = Seen {
            published_at: header.monotonic_published_at_ns,
            payload: header.payload,
            payload_size: header.payload_size,
            payload_read: payload,
        };
        if let Some(last) = &self.last {
            if seen.published_at == last.published_at {
                if seen.payload == last.payload
                    && seen.payload_size == last.payload_size
                    && seen.payload_read == last.payload_read
                {
                    return;
                }
                self.timestamp_violation.get_or_insert_with(|| {
                    format!(
                        "the payload changed (payload {:#x} -> {:#x}, payload_size {} -> {}) while \
                         monotonic_published_at_ns stayed {}: readers take the old payload as current",
                        last.payload,
                        seen.payload,
                        last.payload_size,
                        seen.payload_size,
                        seen.published_at
                    )
                });
            } else if seen.published_at < last.published_at {
                self.timestamp_violation.get_or_insert_with(|| {
                    format!(
                        "went back from {} to {} on an update: readers treat a timestamp not \
                         greater than the last seen as no update",
                        last.published_at, seen.published_at
                    )
                });
            }
            self.updates += 1;
        }
        if let Some(content) = self.judge_read(&seen) {
            self.track_key_map(&content.key_map);
            self.content = Some(content);
        }
        self.last = Some(seen);
    }

    /// Compares the key map with the one before it (OTEP 4947: append-only).
    fn track_key_map(&mut self, key_map: &Presence<Vec<String>>) {
        match key_map {
            Presence::Valid(names) => {
                self.key_map_first_len.get_or_insert(names.len());
                if let Some(before) = &self.key_map_before {
                    if names != before {
                        match key_map_change(before, names) {
                            Ok(()) => self.key_map_growths += 1,
                            Err(problem) => {
                                self.key_map_violation.get_or_insert(problem);
                            }
                        }
                    }
                }
                self.key_map_before = Some(names.clone());
            }
            Presence::Absent if self.key_map_before.is_some() => {
                self.key_map_violation.get_or_insert_with(|| {
                    "an update removed threadlocal.attribute_key_map".to_owned()
                });
            }
            Presence::Absent | Presence::Invalid => {}
        }
    }
}
