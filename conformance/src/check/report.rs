//! A report as people and programs read it: the text `otel-ctx check` prints, and the
//! JSON document of `check --json` (its shape is in the tool's `JSON.md`, section
//! `check`), for any test that runs the checker as a library.

use std::fmt::Write as _;

use serde::Serialize;

use super::rules::RuleId;
use super::verdict::{Report, Status};

impl Report {
    /// The text report: a heading, one line per rule (status, id, what was seen, the
    /// specification's section), the counts, and the modules left out.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let comm = if self.comm.is_empty() {
            "?"
        } else {
            &self.comm
        };
        let _ = writeln!(
            out,
            "otel-ctx check: process {} ({comm}), watched for {:.2}s",
            self.pid,
            self.observed_for.as_secs_f64()
        );
        let width = RuleId::ALL.iter().map(|r| r.id().len()).max().unwrap_or(0);
        for r in &self.results {
            let observed = r.observed.replace(['\n', '\r'], " ");
            let _ = writeln!(
                out,
                "{}  {:width$}  {observed}  [{}]",
                r.status,
                r.rule.id(),
                r.rule.reference()
            );
        }
        let _ = writeln!(
            out,
            "{} rules: {} PASS, {} WARN, {} FAIL, {} SKIP",
            self.results.len(),
            self.count(Status::Pass),
            self.count(Status::Warn),
            self.count(Status::Fail),
            self.count(Status::Skip)
        );
        for skipped in &self.skipped_modules {
            let _ = writeln!(out, "skipped {skipped}");
        }
        out
    }

    /// The JSON document of the report; `command` describes a program the caller started
    /// for the check (`null` when it checked a running process).
    pub fn document<C: Serialize>(&self, command: Option<C>) -> Document<'_, C> {
        Document {
            pid: self.pid,
            comm: &self.comm,
            command,
            observed_ms: u64::try_from(self.observed_for.as_millis()).unwrap_or(u64::MAX),
            passed: self.passed(),
            summary: Summary {
                pass: self.count(Status::Pass),
                warn: self.count(Status::Warn),
                fail: self.count(Status::Fail),
                skip: self.count(Status::Skip),
            },
            results: self
                .results
                .iter()
                .map(|r| RuleJson {
                    id: r.rule.id(),
                    status: r.status.json_name(),
                    reference: r.rule.reference(),
                    title: r.rule.title(),
                    observed: &r.observed,
                })
                .collect(),
            skipped_modules: &self.skipped_modules,
        }
    }
}

/// The JSON document of a report ([`Report::document`]).
#[derive(Debug, Serialize)]
pub struct Document<'a, C> {
    pid: u32,
    comm: &'a str,
    command: Option<C>,
    observed_ms: u64,
    passed: bool,
    summary: Summary,
    results: Vec<RuleJson<'a>>,
    skipped_modules: &'a [String],
}

/// The number of results with each status.
#[derive(Debug, Serialize)]
struct Summary {
    pass: usize,
    warn: usize,
    fail: usize,
    skip: usize,
}

/// One rule's result.
#[derive(Debug, Serialize)]
struct RuleJson<'a> {
    id: &'static str,
    status: &'static str,
    reference: &'static str,
    title: &'static str,
    observed: &'a str,
}
