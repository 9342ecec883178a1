//! The check of a live process, and the wait for a context to check.

use std::time::{Duration, Instant};

use otel_ctx_reader::procfs::comm;
use otel_ctx_reader::Error;

use super::process::ProcessSide;
use super::thread::ThreadSide;
use super::verdict::{Report, Verdicts};

/// How a check runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// How long to watch the process after the first read: updates of the process
    /// context are followed, and every thread is sampled several times. Zero reads once
    /// and samples every thread once; the rules about updates are then skipped. At most
    /// [`MAX_WINDOW`].
    pub observe: Duration,
    /// Times every thread is sampled over the window (at least 1; always 1 when
    /// `observe` is zero).
    pub thread_rounds: u32,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            observe: Duration::from_secs(1),
            thread_rounds: DEFAULT_THREAD_ROUNDS,
        }
    }
}

/// Thread sampling rounds over the window by default.
pub const DEFAULT_THREAD_ROUNDS: u32 = 10;

/// Longest observation window or wait: longer ones are cut to this (a day).
pub const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Pause between two reads of the header while watching: short enough to see each step
/// of a writer that updates every few milliseconds.
const POLL: Duration = Duration::from_millis(2);

/// Checks process `pid`: reads its process context and thread contexts, watches it for
/// [`CheckOptions::observe`], and judges every rule.
///
/// Fails only when the process cannot be inspected at all: it exited (before or during
/// the check), or reading its maps or memory is not permitted. Everything the process
/// itself does wrong is a [`Status::Fail`](super::Status::Fail) in the report.
pub fn check(pid: u32, options: &CheckOptions) -> Result<Report, Error> {
    let observe = options.observe.min(MAX_WINDOW);
    let mut verdicts = Verdicts::new();
    let mut process = ProcessSide::open(pid)?;
    // One pass over the maps serves both halves.
    let maps = process.first_read()?;
    let mut threads = ThreadSide::open(&maps);
    drop(maps);

    // Without a window, one round: several back to back would see the same contexts.
    let rounds = if observe.is_zero() {
        1
    } else {
        options.thread_rounds.max(1)
    };
    let window_start = Instant::now();
    let deadline = window_start + observe;
    let mut next_round = 0u32;
    loop {
        let now = Instant::now();
        // Rounds are spread evenly: the first at once, the last at the window's end.
        let due = if rounds == 1 {
            Duration::ZERO
        } else {
            observe / (rounds - 1) * next_round
        };
        if next_round < rounds && now >= window_start + due {
            threads.sample_round(&mut |refresh| process.key_map_len(refresh))?;
            next_round += 1;
            continue;
        }
        if now >= deadline && next_round >= rounds {
            break;
        }
        std::thread::sleep(POLL);
        if !observe.is_zero() {
            process.poll()?;
        }
    }
    let observed_for = window_start.elapsed();
    process.finish()?;

    process.judge(&mut verdicts, observe);
    threads.judge(&mut verdicts, process.summary());
    Ok(Report {
        pid,
        comm: comm(pid).unwrap_or_default(),
        observed_for,
        results: verdicts.into_results(),
        skipped_modules: threads.skipped_modules().to_vec(),
    })
}

/// Waits until process `pid` has a mapping that may hold a process context (any mapping
/// [`check`] would examine), for at most `timeout` (and at most [`MAX_WINDOW`]). `keep_waiting` is asked between
/// looks (for example whether a started program is still running); waiting stops when it
/// says no. Returns whether such a mapping appeared.
pub fn wait_for_context(
    pid: u32,
    timeout: Duration,
    keep_waiting: &mut dyn FnMut() -> bool,
) -> Result<bool, Error> {
    // Each look reads the maps and the first bytes of every anonymous mapping.
    const LOOK_EVERY: Duration = Duration::from_millis(50);
    let deadline = Instant::now() + timeout.min(MAX_WINDOW);
    let mut side = ProcessSide::open(pid)?;
    loop {
        if side.has_candidates()? {
            return Ok(true);
        }
        if Instant::now() >= deadline || !keep_waiting() {
            return Ok(false);
        }
        std::thread::sleep(LOOK_EVERY);
    }
}
