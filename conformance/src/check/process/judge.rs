//! The verdicts of this side: the mapping, the header, every consistent read, the payload
//! and the thread-context reference data it carries, and the updates over the window.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use otel_ctx_codec::header::{MAX_PAYLOAD_SIZE, SIGNATURE, VERSION};
use otel_ctx_codec::proto::{AnyValueView, Limits, ProcessContextView};
use otel_ctx_codec::threadlocal::{
    KeyMapView, ATTRIBUTE_KEY_MAP_KEY, SCHEMA_GO_PPROF_LABELS_V1, SCHEMA_TLSDESC_V1_DEV,
    SCHEMA_TLS_V1, SCHEMA_VERSION_KEY,
};
use otel_ctx_reader::process::boottime_ns;

use super::clock::clock_ticks_per_second;
use super::discover::MAX_PROBED;
use super::{Candidate, Content, Naming, PayloadRead, Presence, ProcessSide, Seen, TLS_SCHEMAS};
use crate::check::rules::RuleId;
use crate::check::rules::Side;
use crate::check::verdict::{plural, Status, Verdicts};

/// Names listed in full in an observation before it is cut short.
const NAMES_SHOWN: usize = 8;

impl ProcessSide {
    /// The rules judged on every consistent read; returns what a payload that decodes says
    /// about thread contexts.
    pub(super) fn judge_read(&mut self, seen: &Seen) -> Option<Content> {
        let v = &mut self.per_read;
        let (status, observed) = judge_timestamp(
            seen.published_at,
            boottime_ns(),
            self.started_at_ns,
            self.other_time_namespace,
        );
        v.set(RuleId::PcHeaderTimestamp, status, observed);

        let size = seen.payload_size;
        if size == 0 {
            v.fail(
                RuleId::PcHeaderPayloadSize,
                "0: readers refuse an empty payload",
            );
        } else if size > MAX_PAYLOAD_SIZE {
            v.fail(
                RuleId::PcHeaderPayloadSize,
                format!("{size}: over the {MAX_PAYLOAD_SIZE} bytes readers copy at most"),
            );
        } else {
            v.pass(RuleId::PcHeaderPayloadSize, format!("{size} bytes"));
        }

        let bytes = match &seen.payload_read {
            PayloadRead::OutOfRange => {
                v.skip(
                    RuleId::PcPayloadDecodes,
                    format!("payload_size {size} is out of range: readers do not copy the payload"),
                );
                return None;
            }
            PayloadRead::Unmapped => {
                v.fail(
                    RuleId::PcPayloadDecodes,
                    format!(
                        "the payload pointer {:#x} (payload_size {size}) points into memory the \
                         process has not mapped",
                        seen.payload
                    ),
                );
                return None;
            }
            PayloadRead::Bytes(bytes) => bytes,
        };
        let view = match ProcessContextView::decode(bytes, &Limits::default()) {
            Ok(view) => view,
            Err(e) => {
                v.fail(
                    RuleId::PcPayloadDecodes,
                    format!("{e} ({}): readers cannot use the context", e.kind()),
                );
                return None;
            }
        };
        v.pass(
            RuleId::PcPayloadDecodes,
            format!(
                "{} and {}",
                plural(view.resource().count(), "resource attribute"),
                plural(view.attributes().count(), "extra attribute")
            ),
        );
        Some(judge_content(&view, v))
    }

    /// Judges every rule of this side into `v`.
    pub(in crate::check) fn judge(&mut self, v: &mut Verdicts, observe: Duration) {
        let Some(primary) = self.primary.clone() else {
            let observed = "no mapping named [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or \
                            /memfd:OTEL_CTX, and no anonymous or memfd mapping starting with \
                            OTEL_CTX";
            match self.unprobed_note() {
                Some(note) => v.fail(
                    RuleId::PcFound,
                    format!("{observed} among those probed ({note})"),
                ),
                None => v.fail(RuleId::PcFound, observed),
            }
            v.skip_unset(RuleId::of(Side::Process), "no process context");
            return;
        };
        match self.unprobed_note() {
            Some(note) => v.pass(
                RuleId::PcFound,
                format!("{} ({note} for another header)", primary.describe()),
            ),
            None => v.pass(RuleId::PcFound, primary.describe()),
        }
        self.judge_mapping(v, &primary);
        self.judge_header(v, &primary);

        let per_read = std::mem::replace(&mut self.per_read, Verdicts::new());
        for (rule, verdict) in RuleId::ALL.into_iter().zip(per_read.results) {
            if let Some((status, observed)) = verdict {
                v.set(rule, status, observed);
            }
        }
        if self.last.is_none() {
            let waited = self
                .first_look
                .map_or(Duration::ZERO, |t| t.elapsed())
                .as_millis();
            if self.zero_seen {
                v.fail(
                    RuleId::PcHeaderTimestamp,
                    format!(
                        "0 in every read for {waited} ms: the context is never complete (the \
                         timestamp is written last, and 0 means 'being changed')"
                    ),
                );
            } else if self.unstable_seen {
                v.fail(
                    RuleId::PcHeaderTimestamp,
                    format!(
                        "changed during every read for {waited} ms: no reader gets a consistent copy"
                    ),
                );
            } else {
                v.skip(
                    RuleId::PcHeaderTimestamp,
                    "the mapping went away before the header could be read",
                );
            }
        }
        let reason = if self.last.is_none() {
            "no consistent read of the header and payload"
        } else {
            "the payload does not decode"
        };
        v.skip_unset(
            [
                RuleId::PcHeaderPayloadSize,
                RuleId::PcPayloadDecodes,
                RuleId::PcResourceUniqueKeys,
                RuleId::PcResourceServiceName,
                RuleId::TlKeysPlacement,
                RuleId::TlSchemaVersion,
                RuleId::TlKeyMapShape,
                RuleId::TlKeyMapSchema,
            ],
            reason,
        );
        self.judge_updates(v, observe);
    }

    fn judge_mapping(&self, v: &mut Verdicts, primary: &Candidate) {
        match primary.naming {
            Naming::Exact(name) if name.exact => v.pass(RuleId::PcMappingName, name.to_string()),
            Naming::Exact(_) => v.warn(
                RuleId::PcMappingName,
                format!(
                    "named {:?}: it starts with a name OTEP 4719 readers look for, so they \
                     find it, but readers that compare whole names (the OpenTelemetry eBPF \
                     profiler) miss it",
                    primary.name
                ),
            ),
            Naming::NearMiss => v.fail(
                RuleId::PcMappingName,
                format!(
                    "named {:?}: readers look for names that start with \
                     [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or /memfd:OTEL_CTX, so none \
                     finds it",
                    primary.name
                ),
            ),
            Naming::Other if primary.name.is_empty() => v.fail(
                RuleId::PcMappingName,
                "an anonymous mapping without a name starts with OTEL_CTX: no memfd named \
                 OTEL_CTX and no prctl(PR_SET_VMA_ANON_NAME) name, so no reader can find it \
                 (a publish error when both fail)",
            ),
            Naming::Other => v.fail(
                RuleId::PcMappingName,
                format!(
                    "a mapping named {:?} starts with OTEL_CTX: readers look for the OTEL_CTX \
                     names only, so none finds it",
                    primary.name
                ),
            ),
        }

        let holders: Vec<&Candidate> = self
            .candidates
            .iter()
            .filter(|c| c.signature_ok() || c.is_exact())
            .collect();
        if holders.len() > 1 {
            let list = holders
                .iter()
                .map(|c| c.describe())
                .collect::<Vec<_>>()
                .join("; ");
            v.fail(
                RuleId::PcMappingSingle,
                format!(
                    "{} mappings hold a process context: {list}; a process publishes one",
                    holders.len()
                ),
            );
        } else if let Some(note) = self.unprobed_note() {
            v.pass(
                RuleId::PcMappingSingle,
                format!("one mapping ({note} for a second header)"),
            );
        } else {
            v.pass(RuleId::PcMappingSingle, "one mapping");
        }

        let perms = primary.perms();
        if primary.perms[2] == b'x' {
            v.fail(
                RuleId::PcMappingNotExecutable,
                format!("{perms}: readers skip executable mappings (map it PROT_READ|PROT_WRITE)"),
            );
        } else {
            v.pass(RuleId::PcMappingNotExecutable, perms.clone());
        }
        let (status, observed) = judge_private(primary.perms);
        v.set(RuleId::PcMappingPrivate, status, observed);

        match &self.vm_flags {
            Ok(Some(flags)) if flags.iter().any(|f| f == "dc") => {
                v.pass(RuleId::PcMappingDontfork, "dc in VmFlags")
            }
            Ok(Some(flags)) => v.fail(
                RuleId::PcMappingDontfork,
                format!(
                    "VmFlags {}: no dc, so a forked child inherits this context until it \
                     publishes its own (call madvise(MADV_DONTFORK))",
                    flags.join(" ")
                ),
            ),
            Ok(None) => v.skip(
                RuleId::PcMappingDontfork,
                "/proc/<pid>/smaps shows no VmFlags for the mapping (kernel before 3.8)",
            ),
            Err(e) => v.skip(RuleId::PcMappingDontfork, e.clone()),
        }
    }

    /// What the probe for unnamed contexts left out, when it left anything out: only the
    /// first [`MAX_PROBED`] anonymous or memfd mappings are copied from.
    fn unprobed_note(&self) -> Option<String> {
        (self.unprobed > 0).then(|| {
            format!(
                "{} past the first {MAX_PROBED} were not probed",
                plural(self.unprobed, "anonymous or memfd mapping")
            )
        })
    }

    fn judge_header(&self, v: &mut Verdicts, primary: &Candidate) {
        let Some(header) = primary.header else {
            for rule in [RuleId::PcHeaderSignature, RuleId::PcHeaderVersion] {
                v.fail(rule, "the first 32 bytes of the mapping cannot be read");
            }
            return;
        };
        if header.signature == SIGNATURE {
            v.pass(RuleId::PcHeaderSignature, "OTEL_CTX");
        } else {
            v.fail(
                RuleId::PcHeaderSignature,
                format!(
                    "{:?}: readers compare all 8 bytes with OTEL_CTX and skip the mapping",
                    String::from_utf8_lossy(&header.signature)
                ),
            );
        }
        let (status, observed) = judge_version(header.version);
        v.set(RuleId::PcHeaderVersion, status, observed);
    }

    fn judge_updates(&self, v: &mut Verdicts, observe: Duration) {
        let window = format!("{} ms", observe.as_millis());
        if observe.is_zero() {
            for rule in [
                RuleId::PcUpdateTimestampIncreases,
                RuleId::TlKeyMapAppendOnly,
            ] {
                v.skip(rule, "not observed (observation window of 0)");
            }
            return;
        }
        let tail = if self.unpublished {
            "; the context was unpublished during the window"
        } else {
            ""
        };
        match &self.timestamp_violation {
            Some(problem) => v.fail(RuleId::PcUpdateTimestampIncreases, problem.clone()),
            None if self.updates == 0 => v.skip(
                RuleId::PcUpdateTimestampIncreases,
                format!("no update in {window}{tail}"),
            ),
            None => v.pass(
                RuleId::PcUpdateTimestampIncreases,
                format!(
                    "{} in {window}, each with a greater timestamp{tail}",
                    plural(self.updates, "update")
                ),
            ),
        }
        match (&self.key_map_violation, &self.key_map_before) {
            (Some(problem), _) => v.fail(RuleId::TlKeyMapAppendOnly, problem.clone()),
            (None, None) => v.skip(RuleId::TlKeyMapAppendOnly, "no usable key map"),
            (None, Some(_)) if self.updates == 0 => {
                v.skip(RuleId::TlKeyMapAppendOnly, format!("no update in {window}"))
            }
            (None, Some(last)) => {
                let first = self.key_map_first_len.unwrap_or(last.len());
                let change = if self.key_map_growths == 0 {
                    format!("unchanged at {}", plural(last.len(), "name"))
                } else {
                    format!(
                        "grew {} from {first} to {}",
                        plural(self.key_map_growths, "time"),
                        plural(last.len(), "name")
                    )
                };
                v.pass(
                    RuleId::TlKeyMapAppendOnly,
                    format!("{} in {window}; {change}", plural(self.updates, "update")),
                );
            }
        }
    }
}

/// Judges `monotonic_published_at_ns` against `now` (`CLOCK_BOOTTIME`) and the process's
/// start.
fn judge_timestamp(
    published_at: u64,
    now: u64,
    started_at: Option<u64>,
    other_time_namespace: bool,
) -> (Status, String) {
    if other_time_namespace {
        return (
            Status::Pass,
            format!(
                "{published_at} (non-zero; the process is in another time namespace, so its \
                 CLOCK_BOOTTIME is not compared with this one's)"
            ),
        );
    }
    if published_at > now {
        let mut observed = format!(
            "{published_at}: {} in the future of CLOCK_BOOTTIME ({now})",
            seconds(published_at - now)
        );
        if published_at > 1_000_000_000_000_000_000 {
            observed.push_str("; a CLOCK_REALTIME time? Use CLOCK_BOOTTIME");
        }
        return (Status::Fail, observed);
    }
    if let Some(started) = started_at {
        // /proc/<pid>/stat has the start in clock ticks: allow one tick of rounding.
        let tick = 1_000_000_000 / clock_ticks_per_second();
        if published_at.saturating_add(tick) < started {
            return (
                Status::Fail,
                format!(
                    "{published_at}: {} before the process started ({started} ns after boot); \
                     a clock other than CLOCK_BOOTTIME (CLOCK_MONOTONIC stops during suspend)?",
                    seconds(started - published_at)
                ),
            );
        }
    }
    (
        Status::Pass,
        format!(
            "{published_at} ns after boot, {} ago",
            seconds(now.saturating_sub(published_at))
        ),
    )
}

fn seconds(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// Judges the header's `version`. OTEP 4719 defines 2 and says "1 may be used for
/// development": a 1 is allowed, but readers that check for 2 (reading step 2) skip it.
fn judge_version(version: u32) -> (Status, String) {
    match version {
        VERSION => (Status::Pass, VERSION.to_string()),
        1 => (
            Status::Warn,
            format!(
                "1: the development version OTEP 4719 allows; readers that support only \
                 {VERSION} skip the mapping, so publish {VERSION} outside development"
            ),
        ),
        other => (
            Status::Fail,
            format!("{other}: readers require {VERSION} and skip the mapping"),
        ),
    }
}

/// Judges the sharing flag of the mapping's permissions (`p` or `s`). OTEP 4719's publish
/// steps, which map the memfd `MAP_PRIVATE`, are a "should", and readers find and read a
/// shared mapping just the same: a warning, not a failure.
fn judge_private(perms: [u8; 4]) -> (Status, String) {
    let shown = String::from_utf8_lossy(&perms).into_owned();
    if perms[3] == b'p' {
        (Status::Pass, shown)
    } else {
        (
            Status::Warn,
            format!(
                "{shown}: a shared mapping (MAP_SHARED); the publish steps map the memfd \
                 MAP_PRIVATE (readers still find it)"
            ),
        )
    }
}

/// The rules judged on a decoded payload; returns what it says about thread contexts.
fn judge_content(view: &ProcessContextView<'_>, v: &mut Verdicts) -> Content {
    let mut keys = HashSet::new();
    let mut repeated: Vec<&str> = Vec::new();
    let mut count = 0;
    for kv in view.resource() {
        count += 1;
        if !keys.insert(kv.key) && !repeated.contains(&kv.key) {
            repeated.push(kv.key);
        }
    }
    if repeated.is_empty() {
        v.pass(
            RuleId::PcResourceUniqueKeys,
            format!("{}, all distinct", plural(count, "key")),
        );
    } else {
        v.fail(
            RuleId::PcResourceUniqueKeys,
            format!(
                "repeated: {}; resource keys must be unique",
                names_list(repeated.iter().copied())
            ),
        );
    }

    match view.resource_value("service.name") {
        Some(AnyValueView::String(name)) if !name.is_empty() => {
            v.pass(RuleId::PcResourceServiceName, format!("{name:?}"))
        }
        Some(AnyValueView::String(_)) => v.warn(
            RuleId::PcResourceServiceName,
            "an empty string: readers cannot tell the service",
        ),
        Some(other) => v.warn(
            RuleId::PcResourceServiceName,
            format!(
                "{} value; semantic conventions make it a string",
                a_type(other.type_name())
            ),
        ),
        None => v.warn(
            RuleId::PcResourceServiceName,
            "missing: readers cannot tell which service this process is",
        ),
    }

    let misplaced: Vec<&str> = view
        .resource()
        .map(|kv| kv.key)
        .filter(|key| key.starts_with("threadlocal."))
        .collect();
    let placed: Vec<&str> = view
        .attributes()
        .map(|kv| kv.key)
        .filter(|key| key.starts_with("threadlocal."))
        .collect();
    if !misplaced.is_empty() {
        v.fail(
            RuleId::TlKeysPlacement,
            format!(
                "{} in the resource: readers look for threadlocal.* keys in the extra \
                 attributes (ProcessContext field 2) only",
                names_list(misplaced.iter().copied())
            ),
        );
    } else if placed.is_empty() {
        v.skip(RuleId::TlKeysPlacement, "no threadlocal.* keys");
    } else {
        let mut distinct = placed.clone();
        distinct.dedup();
        v.pass(
            RuleId::TlKeysPlacement,
            format!(
                "{} in the extra attributes",
                names_list(distinct.iter().copied())
            ),
        );
    }

    let schema = match view.attribute_value(SCHEMA_VERSION_KEY) {
        None => {
            v.skip(RuleId::TlSchemaVersion, "no threadlocal.schema_version");
            Presence::Absent
        }
        Some(AnyValueView::String(s)) => {
            if [
                SCHEMA_TLSDESC_V1_DEV,
                SCHEMA_TLS_V1,
                SCHEMA_GO_PPROF_LABELS_V1,
            ]
            .contains(&s)
            {
                v.pass(RuleId::TlSchemaVersion, format!("{s:?}"));
            } else {
                v.warn(
                    RuleId::TlSchemaVersion,
                    format!(
                        "{s:?}: not a schema readers know ({SCHEMA_TLSDESC_V1_DEV}, \
                         {SCHEMA_TLS_V1}, {SCHEMA_GO_PPROF_LABELS_V1})"
                    ),
                );
            }
            Presence::Valid(s.to_owned())
        }
        Some(other) => {
            v.fail(
                RuleId::TlSchemaVersion,
                format!("{} value, not a string", a_type(other.type_name())),
            );
            Presence::Invalid
        }
    };

    let key_map = match view.attribute_value(ATTRIBUTE_KEY_MAP_KEY) {
        None => {
            v.skip(RuleId::TlKeyMapShape, "no threadlocal.attribute_key_map");
            Presence::Absent
        }
        Some(AnyValueView::Array(array)) => match KeyMapView::new(array) {
            Ok(map) => {
                let names: Vec<String> = map.iter().map(str::to_owned).collect();
                v.pass(
                    RuleId::TlKeyMapShape,
                    format!(
                        "{}: {}",
                        plural(names.len(), "name"),
                        names_list(names.iter().map(String::as_str))
                    ),
                );
                Presence::Valid(names)
            }
            Err(e) => {
                v.fail(RuleId::TlKeyMapShape, e.to_string());
                Presence::Invalid
            }
        },
        Some(other) => {
            v.fail(
                RuleId::TlKeyMapShape,
                format!(
                    "{} value, not an array of strings",
                    a_type(other.type_name())
                ),
            );
            Presence::Invalid
        }
    };
    let (status, observed) = judge_key_map_schema(&schema, &key_map);
    v.set(RuleId::TlKeyMapSchema, status, observed);
    Content { schema, key_map }
}

/// Judges whether a key map goes with the schema it is published with. The key map names
/// the key indexes of TLS records; OTEP 4947 asks a Go SDK, whose `go_pprof_labels_v1`
/// readers read pprof labels instead, for no key map or an empty one. A key map it
/// publishes anyway is harmless but unused, and says the process has records it has not.
fn judge_key_map_schema(
    schema: &Presence<String>,
    key_map: &Presence<Vec<String>>,
) -> (Status, String) {
    let names = match key_map {
        Presence::Valid(names) => names.len(),
        Presence::Absent => 0,
        Presence::Invalid => {
            return (
                Status::Skip,
                "the key map is malformed (see tl.key_map.shape)".to_owned(),
            )
        }
    };
    let Presence::Valid(schema) = schema else {
        return (
            Status::Skip,
            "no usable threadlocal.schema_version".to_owned(),
        );
    };
    let schema = schema.as_str();
    if schema == SCHEMA_GO_PPROF_LABELS_V1 {
        return match (key_map, names) {
            (Presence::Absent, _) => (Status::Pass, format!("{schema:?} without a key map")),
            (_, 0) => (Status::Pass, format!("{schema:?} with an empty key map")),
            (_, n) => (
                Status::Warn,
                format!(
                    "{} with {schema:?}: the key map is for the TLS schema's records, and \
                     readers of {schema} read pprof labels instead; publish no key map, or an \
                     empty one",
                    plural(n, "name")
                ),
            ),
        };
    }
    if !TLS_SCHEMAS.contains(&schema) {
        return (
            Status::Skip,
            format!("{schema:?} is not a schema readers know (see tl.schema_version)"),
        );
    }
    match names {
        0 => (
            Status::Skip,
            format!("no names in a key map to judge ({schema:?})"),
        ),
        n => (
            Status::Pass,
            format!("{} with {schema:?}", plural(n, "name")),
        ),
    }
}

/// `a string`, `an int`: the article for a protobuf value type name.
fn a_type(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {type_name}")
}

/// `Ok` when `after` keeps every name of `before` at its index; otherwise what changed.
pub(super) fn key_map_change(before: &[String], after: &[String]) -> Result<(), String> {
    for (index, old) in before.iter().enumerate() {
        match after.get(index) {
            Some(new) if new == old => {}
            Some(new) => {
                return Err(format!(
                    "index {index} changed from {old:?} to {new:?} in an update; key indexes \
                     must keep their names"
                ))
            }
            None => {
                return Err(format!(
                    "shrank from {} to {} in an update ({} removed); the key map is append-only",
                    plural(before.len(), "name"),
                    plural(after.len(), "name"),
                    names_list(before[after.len()..].iter().map(String::as_str))
                ))
            }
        }
    }
    Ok(())
}

/// Up to [`NAMES_SHOWN`] names, comma-separated, then how many more.
fn names_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    let mut more = 0;
    for (i, name) in names.enumerate() {
        if i >= NAMES_SHOWN {
            more += 1;
            continue;
        }
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
    }
    if more > 0 {
        let _ = write!(out, " and {more} more");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::discover::naming_of;
    use super::*;
    use otel_ctx_codec::header::ProcessContextHeader;
    use otel_ctx_codec::proto::{AnyValue, KeyValue, ProcessContext};
    use otel_ctx_codec::threadlocal::reference_data;

    fn verdict(v: &Verdicts, rule: RuleId) -> (Status, String) {
        v.results[rule.index()].clone().expect("judged")
    }

    #[test]
    fn timestamps() {
        let s = 1_000_000_000;
        let (status, observed) = judge_timestamp(5 * s, 7 * s, Some(2 * s), false);
        assert_eq!(status, Status::Pass, "{observed}");
        assert!(observed.contains("2.000s ago"), "{observed}");
        let (status, observed) = judge_timestamp(8 * s, 7 * s, Some(2 * s), false);
        assert_eq!(status, Status::Fail);
        assert!(observed.contains("in the future"), "{observed}");
        let realtime = 1_700_000_000 * s;
        let (_, observed) = judge_timestamp(realtime, 7 * s, None, false);
        assert!(observed.contains("CLOCK_REALTIME"), "{observed}");
        let (status, observed) = judge_timestamp(1, 7 * s, Some(2 * s), false);
        assert_eq!(status, Status::Fail);
        assert!(
            observed.contains("before the process started"),
            "{observed}"
        );
        // Within one tick of the start: rounding, not an error.
        let (status, _) = judge_timestamp(2 * s - 1000, 7 * s, Some(2 * s), false);
        assert_eq!(status, Status::Pass);
        let (status, _) = judge_timestamp(8 * s, 7 * s, Some(2 * s), true);
        assert_eq!(status, Status::Pass);
    }

    #[test]
    fn key_map_changes() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(key_map_change(&names(&["a"]), &names(&["a", "b"])), Ok(()));
        let shrank = key_map_change(&names(&["a", "b"]), &names(&["a"])).unwrap_err();
        assert!(shrank.contains("shrank from 2 names to 1 name"), "{shrank}");
        assert!(shrank.contains("(b removed)"), "{shrank}");
        let changed = key_map_change(&names(&["a", "b"]), &names(&["a", "c", "b"])).unwrap_err();
        assert!(
            changed.contains("index 1 changed from \"b\" to \"c\""),
            "{changed}"
        );
    }

    #[test]
    fn names_are_cut_short() {
        let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        assert_eq!(
            names_list(many.iter().map(String::as_str)),
            "k0, k1, k2, k3, k4, k5, k6, k7 and 2 more"
        );
        assert_eq!(names_list(["a"].into_iter()), "a");
    }

    fn judged(resource: &[KeyValue<'_>], extra: &[KeyValue<'_>]) -> (Verdicts, Content) {
        let ctx = ProcessContext {
            resource,
            attributes: extra,
        };
        let mut buf = vec![0u8; ctx.encoded_len()];
        let n = ctx.encode(&mut buf).unwrap();
        let view = ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        let mut v = Verdicts::new();
        let content = judge_content(&view, &mut v);
        (v, content)
    }

    #[test]
    fn content_of_a_good_payload() {
        let resource = [KeyValue {
            key: "service.name",
            value: AnyValue::String("checkout"),
        }];
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &["http.route", "user.id"]);
        let (v, content) = judged(&resource, &extra);
        for rule in [
            RuleId::PcResourceUniqueKeys,
            RuleId::PcResourceServiceName,
            RuleId::TlKeysPlacement,
            RuleId::TlSchemaVersion,
            RuleId::TlKeyMapShape,
        ] {
            let (status, observed) = verdict(&v, rule);
            assert_eq!(status, Status::Pass, "{rule}: {observed}");
        }
        assert_eq!(
            content.key_map,
            Presence::Valid(vec!["http.route".into(), "user.id".into()])
        );
        assert_eq!(content.schema, Presence::Valid("tlsdesc_v1_dev".into()));
    }

    #[test]
    fn content_of_a_bad_payload() {
        let resource = [
            KeyValue {
                key: "host.name",
                value: AnyValue::String("a"),
            },
            KeyValue {
                key: "host.name",
                value: AnyValue::String("b"),
            },
            KeyValue {
                key: SCHEMA_VERSION_KEY,
                value: AnyValue::String("tls_v1"),
            },
        ];
        let extra = [
            KeyValue {
                key: SCHEMA_VERSION_KEY,
                value: AnyValue::Int(1),
            },
            KeyValue {
                key: ATTRIBUTE_KEY_MAP_KEY,
                value: AnyValue::String("http.route"),
            },
        ];
        let (v, content) = judged(&resource, &extra);
        let fail = |rule| {
            let (status, observed) = verdict(&v, rule);
            assert_eq!(status, Status::Fail, "{rule}: {observed}");
            observed
        };
        assert!(fail(RuleId::PcResourceUniqueKeys).contains("host.name"));
        assert!(fail(RuleId::TlKeysPlacement).contains("threadlocal.schema_version"));
        assert!(fail(RuleId::TlSchemaVersion).contains("an int value"));
        assert!(fail(RuleId::TlKeyMapShape).contains("string"));
        assert_eq!(verdict(&v, RuleId::PcResourceServiceName).0, Status::Warn);
        assert_eq!(content.schema, Presence::Invalid);
        assert_eq!(content.key_map, Presence::Invalid);

        let extra = [KeyValue {
            key: SCHEMA_VERSION_KEY,
            value: AnyValue::String("tls_v9"),
        }];
        let (v, _) = judged(&[], &extra);
        assert_eq!(verdict(&v, RuleId::TlSchemaVersion).0, Status::Warn);
        assert_eq!(verdict(&v, RuleId::TlKeyMapShape).0, Status::Skip);
    }

    /// A mapping as the checker found it, to judge without a live context.
    fn candidate(name: &str, perms: &[u8; 4], version: u32) -> Candidate {
        Candidate {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0000_1000,
            perms: *perms,
            name: name.to_owned(),
            naming: naming_of(name.as_bytes()).unwrap_or(Naming::Other),
            header: Some(ProcessContextHeader {
                signature: SIGNATURE,
                version,
                payload_size: 10,
                monotonic_published_at_ns: 1,
                payload: 0x1000,
            }),
        }
    }

    fn judge_candidate(c: &Candidate) -> Verdicts {
        let side = ProcessSide::open(std::process::id()).expect("own process");
        let mut v = Verdicts::new();
        side.judge_mapping(&mut v, c);
        side.judge_header(&mut v, c);
        v
    }

    #[test]
    fn rules_that_rest_on_the_probe_say_what_it_left_out() {
        let mut side = ProcessSide::open(std::process::id()).expect("own process");
        side.unprobed = 5000;
        let mut v = Verdicts::new();
        side.judge(&mut v, Duration::ZERO);
        let (status, observed) = verdict(&v, RuleId::PcFound);
        assert_eq!(status, Status::Fail, "{observed}");
        assert!(
            observed.ends_with(
                "among those probed (5000 anonymous or memfd mappings past the first 4096 \
                 were not probed)"
            ),
            "{observed}"
        );

        let good = candidate("/memfd:OTEL_CTX (deleted)", b"rw-p", 2);
        side.candidates = vec![good.clone()];
        side.primary = Some(good);
        let mut v = Verdicts::new();
        side.judge(&mut v, Duration::ZERO);
        for rule in [RuleId::PcFound, RuleId::PcMappingSingle] {
            let (status, observed) = verdict(&v, rule);
            assert_eq!(status, Status::Pass, "{rule}: {observed}");
            assert!(
                observed.contains(
                    "5000 anonymous or memfd mappings past the first 4096 were not probed"
                ),
                "{rule}: {observed}"
            );
        }

        // Everything probed: nothing to add.
        side.unprobed = 0;
        let mut v = Verdicts::new();
        side.judge(&mut v, Duration::ZERO);
        assert_eq!(verdict(&v, RuleId::PcMappingSingle).1, "one mapping");
    }

    #[test]
    fn version_1_is_for_development() {
        let good = "/memfd:OTEL_CTX (deleted)";
        let v = judge_candidate(&candidate(good, b"rw-p", 2));
        assert_eq!(verdict(&v, RuleId::PcHeaderVersion).0, Status::Pass);
        // OTEP 4719: "1 may be used for development".
        let v = judge_candidate(&candidate(good, b"rw-p", 1));
        let (status, observed) = verdict(&v, RuleId::PcHeaderVersion);
        assert_eq!(status, Status::Warn, "{observed}");
        assert!(observed.contains("development"), "{observed}");
        for other in [0, 3] {
            let v = judge_candidate(&candidate(good, b"rw-p", other));
            assert_eq!(verdict(&v, RuleId::PcHeaderVersion).0, Status::Fail);
        }
    }

    #[test]
    fn a_shared_mapping_warns() {
        // The publish steps (MAP_PRIVATE among them) are a "should".
        let v = judge_candidate(&candidate("/memfd:OTEL_CTX (deleted)", b"rw-s", 2));
        let (status, observed) = verdict(&v, RuleId::PcMappingPrivate);
        assert_eq!(status, Status::Warn, "{observed}");
        assert!(observed.contains("MAP_SHARED"), "{observed}");
        assert!(!RuleId::PcMappingPrivate.can_fail());
        let v = judge_candidate(&candidate("/memfd:OTEL_CTX (deleted)", b"rw-p", 2));
        assert_eq!(verdict(&v, RuleId::PcMappingPrivate).0, Status::Pass);
    }

    #[test]
    fn names_that_start_with_a_spec_name_warn() {
        // OTEP 4719 reading step 1 takes names that start with one of the three.
        for name in [
            "/memfd:OTEL_CTX_v2 (deleted)",
            "[anon:OTEL_CTX]2",
            "[anon_shmem:OTEL_CTX] extra",
        ] {
            let v = judge_candidate(&candidate(name, b"rw-p", 2));
            let (status, observed) = verdict(&v, RuleId::PcMappingName);
            assert_eq!(status, Status::Warn, "{name}: {observed}");
        }
        for name in ["/memfd:OTEL_CTX (deleted)", "[anon:OTEL_CTX]"] {
            let v = judge_candidate(&candidate(name, b"rw-p", 2));
            assert_eq!(verdict(&v, RuleId::PcMappingName).0, Status::Pass, "{name}");
        }
        for name in ["/memfd:otel_ctx (deleted)", "[anon:OTEL_CTX2]", ""] {
            let v = judge_candidate(&candidate(name, b"rw-p", 2));
            assert_eq!(
                verdict(&v, RuleId::PcMappingName).0,
                Status::Fail,
                "{name:?}"
            );
        }
    }

    #[test]
    fn a_key_map_goes_with_a_tls_schema() {
        let rule = RuleId::TlKeyMapSchema;
        let judge = |extra: &[KeyValue<'_>]| verdict(&judged(&[], extra).0, rule);
        let keys = ["http.route"];
        let (status, observed) = judge(&reference_data(SCHEMA_GO_PPROF_LABELS_V1, &keys));
        assert_eq!(status, Status::Warn, "{observed}");
        assert!(observed.contains("pprof labels"), "{observed}");
        // OTEP 4947: a Go SDK publishes no key map, or an empty one.
        assert_eq!(
            judge(&reference_data(SCHEMA_GO_PPROF_LABELS_V1, &[])).0,
            Status::Pass
        );
        let go_only = [KeyValue {
            key: SCHEMA_VERSION_KEY,
            value: AnyValue::String(SCHEMA_GO_PPROF_LABELS_V1),
        }];
        assert_eq!(judge(&go_only).0, Status::Pass);
        for schema in TLS_SCHEMAS {
            assert_eq!(judge(&reference_data(schema, &keys)).0, Status::Pass);
        }
        assert_eq!(judge(&reference_data("tls_v9", &keys)).0, Status::Skip);
        assert_eq!(judge(&[]).0, Status::Skip);
    }
}
