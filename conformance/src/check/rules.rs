//! The rules `otel-ctx check` applies: one table, `rules!` below, with one row per
//! rule (its stable id, the side of the check that judges it, its level, its one-line
//! title, the section of the specification it comes from, and what it requires in full).
//! The enum, the ids, the titles, the references, the levels, each side's list and the
//! table of `CHECK.md` (checked by a test here) all come from it.
//!
//! Ids are stable: scripts may match on them. `pc.*` rules are about the process context
//! (OTEP 4719), `tl.*` about the thread-context reference data it carries, and `tc.*`
//! about the thread context itself (OTEP 4947). References name the OTEPs' own sections,
//! with the step number where an OTEP numbers the steps of a section.

use std::fmt;

/// How bad breaking a rule is: its worst verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Broken, the rule FAILs (some of its cases may only WARN): readers miss or
    /// misread the contexts.
    Fail,
    /// What the rule judges is a recommendation of the specification, or a "should":
    /// broken, it WARNs, never FAILs.
    Warn,
}

/// The part of the check that judges a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// The process context: its mapping, header, payload and updates
    /// (`process/judge.rs`).
    Process,
    /// The TLS symbol, the reference data it needs and the records of the threads
    /// (`thread.rs`).
    Thread,
}

/// A rule's facts: one row of the table.
struct Rule {
    id: &'static str,
    side: Side,
    level: Level,
    title: &'static str,
    reference: &'static str,
    /// What the rule requires in full (Markdown), without the "WARN only: " that
    /// `CHECK.md` adds for the level.
    requires: &'static str,
}

/// Declares the rules, one row each, in report order: [`RuleId`] and its variants,
/// [`RuleId::ALL`] and `TABLE`.
macro_rules! rules {
    ($(
        $variant:ident {
            id: $id:literal,
            side: $side:ident,
            level: $level:ident,
            title: $title:literal,
            reference: $reference:literal,
            requires: $requires:literal,
        }
    )*) => {
        /// One rule of the checker.
        // The titles name mappings in brackets (`[anon:OTEL_CTX]`): text, not links.
        #[allow(rustdoc::broken_intra_doc_links)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RuleId {
            $(
                #[doc = concat!("`", $id, "`: ", $title, " (", $reference, ").")]
                $variant,
            )*
        }

        impl RuleId {
            /// Every rule, in report order.
            pub const ALL: [Self; [$($id),*].len()] = [$(Self::$variant),*];
        }

        /// Every rule's facts, in [`RuleId::ALL`] order.
        const TABLE: [Rule; RuleId::ALL.len()] = [$(
            Rule {
                id: $id,
                side: Side::$side,
                level: Level::$level,
                title: $title,
                reference: $reference,
                requires: $requires,
            },
        )*];
    };
}

rules! {
    PcFound {
        id: "pc.found",
        side: Process,
        level: Fail,
        title: "a process context is published",
        reference: "OTEP 4719 §Reading Protocol 1",
        requires: "a process context is published: some mapping holds an `OTEL_CTX` \
            header",
    }
    PcMappingName {
        id: "pc.mapping.name",
        side: Process,
        level: Fail,
        title: "the mapping is named [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or \
            /memfd:OTEL_CTX (optionally ' (deleted)'), exactly",
        reference: "OTEP 4719 §Reading Protocol 1",
        requires: "the mapping is named exactly `[anon_shmem:OTEL_CTX]`, \
            `[anon:OTEL_CTX]` or `/memfd:OTEL_CTX` (with or without ` (deleted)`); WARN \
            when the name only starts with one of them (`/memfd:OTEL_CTX_v2 (deleted)`: \
            OTEP 4719 readers take names that start with them, readers that compare whole \
            names do not); FAIL for near misses (`/memfd:otel_ctx`, `[anon:OTEL_CTX2]`) \
            and unnamed mappings that start with `OTEL_CTX`, which the checker also finds \
            and no reader does",
    }
    PcMappingSingle {
        id: "pc.mapping.single",
        side: Process,
        level: Fail,
        title: "one process context at a time",
        reference: "OTEP 4719 §Publication Protocol 1",
        requires: "one process context at a time",
    }
    PcMappingNotExecutable {
        id: "pc.mapping.not_executable",
        side: Process,
        level: Fail,
        title: "the mapping is not executable",
        reference: "OTEP 4719 §Publication Protocol 3",
        requires: "the mapping is not executable (readers skip executable ones)",
    }
    PcMappingPrivate {
        id: "pc.mapping.private",
        side: Process,
        level: Warn,
        title: "the mapping is private (MAP_PRIVATE), as the publish steps say",
        reference: "OTEP 4719 §Publication Protocol 3",
        requires: "the mapping is private (`p` in the permissions, `MAP_PRIVATE`), as the \
            publish steps say; they are a \"should\", and readers read a shared mapping \
            just the same",
    }
    PcMappingDontfork {
        id: "pc.mapping.dontfork",
        side: Process,
        level: Fail,
        title: "MADV_DONTFORK is in effect on the mapping",
        reference: "OTEP 4719 §Publication Protocol 5",
        requires: "`MADV_DONTFORK` is in effect: `dc` in the mapping's `VmFlags` in \
            `/proc/<pid>/smaps`",
    }
    PcHeaderSignature {
        id: "pc.header.signature",
        side: Process,
        level: Fail,
        title: "signature is exactly OTEL_CTX",
        reference: "OTEP 4719 §Header Structure, §Reading Protocol 2",
        requires: "the first 8 bytes are exactly `OTEL_CTX`",
    }
    PcHeaderVersion {
        id: "pc.header.version",
        side: Process,
        level: Fail,
        title: "version is 2 (1 only for development)",
        reference: "OTEP 4719 §Header Structure, §Reading Protocol 2",
        requires: "`version` is 2; WARN for 1 (\"1 may be used for development\", but \
            readers that support only 2 skip it)",
    }
    PcHeaderTimestamp {
        id: "pc.header.timestamp",
        side: Process,
        level: Fail,
        title: "monotonic_published_at_ns is non-zero, after the process started and not \
            in the future (CLOCK_BOOTTIME)",
        reference: "OTEP 4719 §Header Structure, §Publication Protocol 9",
        requires: "`monotonic_published_at_ns` is non-zero (not 0 in every read), not in \
            the future of `CLOCK_BOOTTIME`, and not before the process started (not \
            compared when the process is in another time namespace)",
    }
    PcHeaderPayloadSize {
        id: "pc.header.payload_size",
        side: Process,
        level: Fail,
        title: "payload_size is between 1 and 65536",
        reference: "OTEP 4719 §Reading Protocol 5 (reader limits)",
        requires: "`payload_size` is between 1 and 65536",
    }
    PcUpdateTimestampIncreases {
        id: "pc.update.timestamp_increases",
        side: Process,
        level: Fail,
        title: "every update makes monotonic_published_at_ns strictly greater",
        reference: "OTEP 4719 §Updating Protocol 6",
        requires: "every update seen in the window makes `monotonic_published_at_ns` \
            strictly greater, and the payload never changes under an unchanged timestamp; \
            SKIP when no update happened",
    }
    PcPayloadDecodes {
        id: "pc.payload.decodes",
        side: Process,
        level: Fail,
        title: "the payload decodes as a ProcessContext message",
        reference: "OTEP 4719 §Payload Format, §Reading Protocol 8",
        requires: "the payload decodes as a `ProcessContext` message",
    }
    PcResourceUniqueKeys {
        id: "pc.resource.unique_keys",
        side: Process,
        level: Fail,
        title: "resource attribute keys are unique",
        reference: "OTEP 4719 §Payload Format",
        requires: "resource attribute keys are unique",
    }
    PcResourceServiceName {
        id: "pc.resource.service_name",
        side: Process,
        level: Warn,
        title: "the resource has a service.name",
        reference: "OTEP 4719 §Payload Format",
        requires: "the resource has a non-empty string `service.name`",
    }
    TlKeysPlacement {
        id: "tl.keys.placement",
        side: Process,
        level: Fail,
        title: "threadlocal.* keys are extra attributes (field 2), not resource \
            attributes",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data",
        requires: "`threadlocal.*` keys are extra attributes (field 2), never resource \
            attributes",
    }
    TlSchemaVersion {
        id: "tl.schema_version",
        side: Process,
        level: Fail,
        title: "threadlocal.schema_version is a string: tlsdesc_v1_dev, tls_v1 or \
            go_pprof_labels_v1",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data",
        requires: "`threadlocal.schema_version` is a string; WARN when it is not \
            `tlsdesc_v1_dev`, `tls_v1` or `go_pprof_labels_v1`",
    }
    TlKeyMapShape {
        id: "tl.key_map.shape",
        side: Process,
        level: Fail,
        title: "threadlocal.attribute_key_map is an array of at most 256 strings",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data",
        requires: "`threadlocal.attribute_key_map` is an array of at most 256 strings",
    }
    TlKeyMapAppendOnly {
        id: "tl.key_map.append_only",
        side: Process,
        level: Fail,
        title: "the key map is append-only: names never change or disappear across \
            updates",
        reference: "OTEP 4947 §attribute_key_map dictionary semantics",
        requires: "across the updates seen, no name of the key map changes or disappears",
    }
    TlKeyMapSchema {
        id: "tl.key_map.schema",
        side: Process,
        level: Warn,
        title: "a non-empty threadlocal.attribute_key_map goes with a TLS schema \
            (tlsdesc_v1_dev, tls_v1), not go_pprof_labels_v1",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data, \
            §Alternative for Go support",
        requires: "a non-empty `threadlocal.attribute_key_map` goes with a TLS schema \
            (`tlsdesc_v1_dev`, `tls_v1`); WARN when published with `go_pprof_labels_v1`, \
            whose readers read pprof labels (a Go SDK publishes no key map, or an empty \
            one); SKIP without names or with an unknown schema",
    }
    TlReferenceData {
        id: "tl.reference_data",
        side: Thread,
        level: Fail,
        title: "a process that exports otel_thread_ctx_v1 publishes \
            threadlocal.schema_version and a key map",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data, \
            §Reading Protocol 1.2",
        requires: "a process that defines `otel_thread_ctx_v1` publishes \
            `threadlocal.schema_version` (readers wait for it before reading threads); \
            WARN without a key map",
    }
    TlReferenceDataSchema {
        id: "tl.reference_data.schema",
        side: Thread,
        level: Warn,
        title: "a process that exports otel_thread_ctx_v1 names a TLS schema \
            (tlsdesc_v1_dev, tls_v1) in threadlocal.schema_version",
        reference: "OTEP 4947 §Process Context: Thread-Local Reference Data, \
            §Reading Protocol 1.2",
        requires: "a process that defines `otel_thread_ctx_v1` names a TLS schema \
            (`tlsdesc_v1_dev`, `tls_v1`) in `threadlocal.schema_version`; WARN for \
            `go_pprof_labels_v1`: readers that trust the schema read pprof labels and \
            never the records; SKIP without a schema or with an unknown one",
    }
    TcSymbolDynsym {
        id: "tc.symbol.dynsym",
        side: Thread,
        level: Fail,
        title: "otel_thread_ctx_v1 is exported in .dynsym",
        reference: "OTEP 4947 §Thread-Local Variable Resolution",
        requires: "`otel_thread_ctx_v1` is in `.dynsym`; FAIL when only in `.symtab` \
            (readers that follow the spec look in `.dynsym` only); FAIL when no module \
            defines it although `threadlocal.schema_version` announces TLS records",
    }
    TcSymbolType {
        id: "tc.symbol.type",
        side: Thread,
        level: Fail,
        title: "otel_thread_ctx_v1 is an STT_TLS symbol",
        reference: "OTEP 4947 §Thread-Local Variable Resolution",
        requires: "the symbol is `STT_TLS`",
    }
    TcSymbolSize {
        id: "tc.symbol.size",
        side: Thread,
        level: Fail,
        title: "otel_thread_ctx_v1 is 8 bytes",
        reference: "OTEP 4947 §Thread-Local Variable",
        requires: "the symbol is 8 bytes",
    }
    TcSymbolBinding {
        id: "tc.symbol.binding",
        side: Thread,
        level: Fail,
        title: "otel_thread_ctx_v1 is GLOBAL",
        reference: "OTEP 4947 §Thread-Local Variable Resolution",
        requires: "the symbol is `GLOBAL`; WARN when `WEAK`",
    }
    TcAccessModel {
        id: "tc.access_model",
        side: Thread,
        level: Fail,
        title: "the TLS access model is TLSDESC (general dynamic, initial exec and local \
            exec allowed; local dynamic is not)",
        reference: "OTEP 4947 §Thread-Local Variable Resolution",
        requires: "PASS for TLSDESC and for initial or local exec in the main executable \
            (the linker's relaxation); WARN for general dynamic and for initial exec \
            compiled into a shared object; FAIL for local dynamic or when no relocation \
            reaches the variable",
    }
    TcRecordReadable {
        id: "tc.record.readable",
        side: Thread,
        level: Fail,
        title: "a non-NULL slot points at readable memory",
        reference: "OTEP 4947 §Publication Protocol 2",
        requires: "a non-NULL slot points at mapped memory",
    }
    TcRecordAligned {
        id: "tc.record.aligned",
        side: Thread,
        level: Fail,
        title: "records start at a 2-aligned address",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "records start at a 2-aligned address",
    }
    TcRecordValid {
        id: "tc.record.valid",
        side: Thread,
        level: Fail,
        title: "valid is 0 or 1",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "`valid` is 0 or 1",
    }
    TcRecordSize {
        id: "tc.record.size",
        side: Thread,
        level: Warn,
        title: "records are at most 640 bytes",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "records are at most 640 bytes (what the eBPF profiler reads)",
    }
    TcAttrsComplete {
        id: "tc.attrs.complete",
        side: Thread,
        level: Fail,
        title: "attrs-data holds only complete entries",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "`attrs_data` ends on an entry boundary",
    }
    TcAttrsKeyIndex {
        id: "tc.attrs.key_index",
        side: Thread,
        level: Fail,
        title: "every key index is inside threadlocal.attribute_key_map",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "every key index is inside `threadlocal.attribute_key_map` (the checker \
            reads the key map again before it judges an unknown index)",
    }
    TcAttrsUtf8 {
        id: "tc.attrs.utf8",
        side: Thread,
        level: Fail,
        title: "attribute values are UTF-8",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "every value is UTF-8",
    }
    TcRecordIds {
        id: "tc.record.ids",
        side: Thread,
        level: Fail,
        title: "trace_id and span_id are both set or both zero",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "`trace_id` and `span_id` are both set or both zero",
    }
    TcRecordTraceFlags {
        id: "tc.record.trace_flags",
        side: Thread,
        level: Fail,
        title: "trace_flags is 0 when there are no ids",
        reference: "OTEP 4947 §Thread-Local Context Record",
        requires: "`trace_flags` is 0 when there are no ids",
    }
}

impl RuleId {
    /// Position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        self as usize
    }

    const fn row(self) -> &'static Rule {
        &TABLE[self.index()]
    }

    /// The stable id, such as `pc.mapping.name`.
    pub const fn id(self) -> &'static str {
        self.row().id
    }

    /// What the rule requires, in one line.
    pub const fn title(self) -> &'static str {
        self.row().title
    }

    /// Where the rule comes from: OTEP number and the heading of the OTEP's section (with
    /// the step number where the OTEP numbers the section's steps).
    pub const fn reference(self) -> &'static str {
        self.row().reference
    }

    /// What the rule requires in full, with its cases (Markdown, as `CHECK.md`'s table
    /// of rules gives it).
    pub const fn requires(self) -> &'static str {
        self.row().requires
    }

    /// How bad breaking the rule is.
    pub const fn level(self) -> Level {
        self.row().level
    }

    /// Whether the rule can end in FAIL (the others end in WARN at worst: what they judge
    /// is a recommendation of the specification, or a "should").
    pub const fn can_fail(self) -> bool {
        matches!(self.level(), Level::Fail)
    }

    /// The rule with stable id `id`.
    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|rule| rule.id() == id)
    }

    /// The rules `side` judges, in report order.
    pub(super) fn of(side: Side) -> impl Iterator<Item = Self> {
        Self::ALL
            .into_iter()
            .filter(move |rule| rule.row().side == side)
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of rules in `CHECK.md`, as the rows of [`TABLE`] make it: one line per
    /// rule, `| id | requires | reference |`, "WARN only: " before what a rule of
    /// [`Level::Warn`] requires.
    fn check_md_table() -> String {
        let mut table = String::from("| id | requires | reference |\n|---|---|---|\n");
        for rule in &TABLE {
            let warn_only = match rule.level {
                Level::Warn => "WARN only: ",
                Level::Fail => "",
            };
            table.push_str(&format!(
                "| `{}` | {warn_only}{} | {} |\n",
                rule.id, rule.requires, rule.reference
            ));
        }
        table
    }

    #[test]
    fn all_lists_every_rule_once_in_index_order() {
        for (i, rule) in RuleId::ALL.into_iter().enumerate() {
            assert_eq!(rule.index(), i, "{rule}");
            assert_eq!(RuleId::from_id(rule.id()), Some(rule));
            assert!(rule.reference().starts_with("OTEP 4"), "{rule}");
            let prefix = match rule.row().side {
                Side::Process => ["pc.", "tl."],
                Side::Thread => ["tc.", "tl."],
            };
            assert!(prefix.iter().any(|p| rule.id().starts_with(p)), "{rule}");
        }
        let mut ids: Vec<&str> = RuleId::ALL.iter().map(|r| r.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RuleId::ALL.len());
        assert_eq!(RuleId::from_id("pc.nope"), None);
        // Each side's rules are a run of the report: the process side's first.
        let process: Vec<RuleId> = RuleId::of(Side::Process).collect();
        let thread: Vec<RuleId> = RuleId::of(Side::Thread).collect();
        assert_eq!([process, thread].concat(), RuleId::ALL);
    }

    /// `CHECK.md`'s table of rules is the one [`TABLE`] makes.
    /// `OTEL_CTX_WRITE_CHECK_MD=1` writes it there after a change of the table.
    #[test]
    fn check_md_lists_every_rule_as_the_table_says() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/CHECK.md");
        let doc = std::fs::read_to_string(path).expect("CHECK.md");
        let start = doc
            .find("| id | requires | reference |")
            .expect("the table's head");
        let end = doc[start..]
            .find("\n\n")
            .map_or(doc.len(), |at| start + at + 1);
        let expected = check_md_table();
        if doc[start..end] != expected && std::env::var_os("OTEL_CTX_WRITE_CHECK_MD").is_some() {
            let written = format!("{}{expected}{}", &doc[..start], &doc[end..]);
            std::fs::write(path, written).expect("CHECK.md written");
            return;
        }
        assert!(
            doc[start..end] == expected,
            "CHECK.md's table of rules differs from the table in rules.rs; run the test \
             with OTEL_CTX_WRITE_CHECK_MD=1 to write it, or make it:\n{expected}"
        );
    }
}
