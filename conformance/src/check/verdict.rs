//! A rule's verdict, the verdicts a check collects (a rule judged again keeps its worst),
//! and the report it ends with.

use std::fmt;
use std::time::Duration;

use super::rules::{Level, RuleId};

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

/// Verdicts collected while checking; a rule judged again keeps its worst verdict.
#[derive(Debug)]
pub(super) struct Verdicts {
    pub(super) results: Vec<Option<(Status, String)>>,
}

impl Verdicts {
    pub(super) fn new() -> Self {
        Self {
            results: vec![None; RuleId::ALL.len()],
        }
    }

    /// Records a verdict unless the rule already has a worse one. Of equal verdicts, a
    /// FAIL or WARN keeps the first observation (the first counter-example), a PASS or
    /// SKIP takes the latest (what the process looks like now).
    /// A rule of [`Level::Warn`] given FAIL is recorded as WARN: the table of rules
    /// says how bad breaking each one is.
    pub(super) fn set(&mut self, rule: RuleId, status: Status, observed: impl Into<String>) {
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

    pub(super) fn pass(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Pass, observed);
    }

    pub(super) fn warn(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Warn, observed);
    }

    pub(super) fn fail(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Fail, observed);
    }

    pub(super) fn skip(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Skip, observed);
    }

    /// The rule is broken: FAIL, or WARN for a rule of [`Level::Warn`].
    pub(super) fn broken(&mut self, rule: RuleId, observed: impl Into<String>) {
        self.set(rule, Status::Fail, observed);
    }

    /// Skips every rule in `rules` that has no verdict yet.
    pub(super) fn skip_unset(&mut self, rules: impl IntoIterator<Item = RuleId>, observed: &str) {
        for rule in rules {
            if self.results[rule.index()].is_none() {
                self.skip(rule, observed);
            }
        }
    }

    pub(super) fn into_results(self) -> Vec<RuleResult> {
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

/// `1 unit` or `n units`; in `record with attributes` or `record without ids`, the
/// noun before `with` or `without` takes the plural.
pub(super) fn plural(n: usize, unit: &str) -> String {
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
