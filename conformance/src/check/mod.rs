//! The checker: runs every rule of [`RuleId`] against a live process and says, rule by
//! rule, what it saw.
//!
//! The check reads the process as any reader would (maps, `process_vm_readv`, ptrace
//! stops), but looks further than a reader: it also finds mappings readers would miss
//! (a name that is almost right, an unnamed mapping that starts with `OTEL_CTX`, an
//! executable one), judges headers and payloads that readers would refuse, and watches
//! the process for [`CheckOptions::observe`] to see updates and to sample every thread a
//! few times. The process is never written to; each thread is stopped only for the few
//! copies of one sample.

mod process;
mod program;
mod report;
mod rules;
mod smaps;
mod thread;

use std::fmt;
use std::time::{Duration, Instant};

use otel_ctx_reader::procfs::comm;
use otel_ctx_reader::Error;

pub use program::{
    check_command, ProgramError, Stage, StopReason, Stopped, STDIN_GRACE, TERM_GRACE,
};
pub use report::Document;
pub use rules::{Level, RuleId};

use process::ProcessSide;
use thread::ThreadSide;

/// A rule's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The process follows the rule.
    Pass,
    /// Allowed, but not what the specification recommends, or a risk for some readers.
    Warn,
    /// The process breaks the rule: readers will miss or misread its contexts.
    Fail,
    /// The rule could not apply (for example, no thread had a context attached).
    Skip,
}

impl Status {
    /// `PASS`, `WARN`, `FAIL` or `SKIP`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
            Self::Skip => "SKIP",
        }
    }

    /// `pass`, `warn`, `fail` or `skip`, as in JSON.
    pub const fn json_name(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "fail",
            Self::Skip => "skip",
        }
    }

    /// Order used when a rule is judged several times: the worst verdict stands.
    const fn severity(self) -> u8 {
        match self {
            Self::Skip => 0,
            Self::Pass => 1,
            Self::Warn => 2,
            Self::Fail => 3,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleResult {
    /// The rule.
    pub rule: RuleId,
    /// The verdict.
    pub status: Status,
    /// What the checker saw, such as `version 3` or why the rule was skipped.
    pub observed: String,
}

/// The outcome of a check: one result per rule, in [`RuleId::ALL`] order.
#[derive(Clone, Debug)]
pub struct Report {
    /// The process checked.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`), empty if it could not be read.
    pub comm: String,
    /// How long the process was watched for updates and thread samples.
    pub observed_for: Duration,
    /// One result per rule.
    pub results: Vec<RuleResult>,
    /// Executable mappings whose files the check did not analyse, as `path: reason`
    /// (a file that could not be opened safely, or that costs more than the budget).
    pub skipped_modules: Vec<String>,
}

impl Report {
    /// Number of results with `status`.
    pub fn count(&self, status: Status) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
    }

    /// Whether no rule failed.
    pub fn passed(&self) -> bool {
        self.count(Status::Fail) == 0
    }

    /// The result of `rule`.
    pub fn result(&self, rule: RuleId) -> Option<&RuleResult> {
        self.results.iter().find(|r| r.rule == rule)
    }
}

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

/// Verdicts collected while checking; a rule judged again keeps its worst verdict.
#[derive(Debug)]
struct Verdicts {
    results: Vec<Option<(Status, String)>>,
}

impl Verdicts {
    fn new() -> Self {
        Self {
            results: vec![None; RuleId::ALL.len()],
        }
    }

    /// Records a verdict unless the rule already has a worse one. Of equal verdicts, a
    /// FAIL or WARN keeps the first observation (the first counter-example), a PASS or
    /// SKIP takes the latest (what the process looks like now).
    /// A rule of [`Level::Warn`] given FAIL is recorded as WARN: the table of rules
    /// says how bad breaking each one is.
    fn set(&mut self, rule: RuleId, status: Status, observed: impl Into<String>) {
        let status = match (status, rule.level()) {
            (Status::Fail, Level::Warn) => Status::Warn,
            (status, _) => status,
        };
        let slot = &mut self.results[rule.index()];
        let replace = match slot {
            None => true,
            Some((old, _)) if status.severity() == old.severity() => {
                matches!(status, Status::Pass | Status::Skip)
            }
            Some((old, _)) => status.severity() > old.severity(),
        };
        if replace {
            *slot = Some((status, observed.into()));
        }
    }

    fn pass(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Pass, observed);
    }

    fn warn(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Warn, observed);
    }

    fn fail(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Fail, observed);
    }

    fn skip(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Skip, observed);
    }

    /// The rule is broken: FAIL, or WARN for a rule of [`Level::Warn`].
    fn broken(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Fail, observed);
    }

    /// Skips every rule in `rules` that has no verdict yet.
    fn skip_unset(&mut self, rules: impl IntoIterator<Item = RuleId>, observed: &str) {
        for rule in rules {
            if self.results[rule.index()].is_none() {
                self.skip(rule, observed);
            }
        }
    }

    fn into_results(self) -> Vec<RuleResult> {
        RuleId::ALL
            .into_iter()
            .zip(self.results)
            .map(|(rule, verdict)| {
                // Every path of the check judges every rule; this only guards the report's
                // shape should a path forget one.
                let (status, observed) = verdict
                    .unwrap_or_else(|| (Status::Skip, "not judged by this check".to_owned()));
                RuleResult {
                    rule,
                    status,
                    observed,
                }
            })
            .collect()
    }
}

/// Checks process `pid`: reads its process context and thread contexts, watches it for
/// [`CheckOptions::observe`], and judges every rule.
///
/// Fails only when the process cannot be inspected at all: it exited (before or during
/// the check), or reading its maps or memory is not permitted. Everything the process
/// itself does wrong is a [`Status::Fail`] in the report.
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

/// `1 unit` or `n units`; in `record with attributes` or `record without ids`, the
/// noun before `with` or `without` takes the plural.
fn plural(n: usize, unit: &str) -> String {
    if n == 1 {
        return format!("1 {unit}");
    }
    for joint in [" with ", " without "] {
        if let Some((noun, rest)) = unit.split_once(joint) {
            return format!("{n} {noun}s{joint}{rest}");
        }
    }
    format!("{n} {unit}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_verdict_stands() {
        let mut v = Verdicts::new();
        v.pass(RuleId::PcFound, "first pass");
        v.pass(RuleId::PcFound, "second pass");
        v.skip(RuleId::PcFound, "skip");
        v.fail(RuleId::PcMappingName, "first fail");
        v.warn(RuleId::PcMappingName, "warn");
        v.fail(RuleId::PcMappingName, "second fail");
        v.warn(RuleId::PcMappingSingle, "warn");
        v.fail(RuleId::PcMappingSingle, "fail");
        v.skip_unset([RuleId::PcFound, RuleId::TcRecordIds], "nothing");
        let results = v.into_results();
        assert_eq!(results.len(), RuleId::ALL.len());
        let get = |rule: RuleId| &results[rule.index()];
        assert_eq!(get(RuleId::PcFound).status, Status::Pass);
        assert_eq!(get(RuleId::PcFound).observed, "second pass");
        assert_eq!(get(RuleId::PcMappingName).status, Status::Fail);
        assert_eq!(get(RuleId::PcMappingName).observed, "first fail");
        assert_eq!(get(RuleId::PcMappingSingle).observed, "fail");
        assert_eq!(get(RuleId::TcRecordIds).status, Status::Skip);
        assert_eq!(get(RuleId::TcRecordIds).observed, "nothing");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "thread"), "1 thread");
        assert_eq!(plural(0, "thread"), "0 threads");
        assert_eq!(plural(3, "sample"), "3 samples");
        assert_eq!(plural(2, "resource attribute"), "2 resource attributes");
        assert_eq!(plural(2, "record without ids"), "2 records without ids");
        assert_eq!(
            plural(2, "record with attributes"),
            "2 records with attributes"
        );
    }
}
