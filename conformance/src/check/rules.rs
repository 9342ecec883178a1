//! The rules `otel-ctx check` applies, each with a stable id and the section of the
//! specification it comes from.
//!
//! Ids are stable: scripts may match on them. `pc.*` rules are about the process context
//! (OTEP 4719), `tl.*` about the thread-context reference data it carries, and `tc.*`
//! about the thread context itself (OTEP 4947). References name the OTEPs' own sections,
//! with the step number where an OTEP numbers the steps of a section.

use std::fmt;

/// One rule of the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// A process context is published: some mapping holds an `OTEL_CTX` header.
    PcFound,
    /// The mapping's name is exactly one of the names readers match (a name that only
    /// starts with one of them warns).
    PcMappingName,
    /// At most one process context at a time.
    PcMappingSingle,
    /// The mapping is not executable (readers skip executable mappings).
    PcMappingNotExecutable,
    /// The mapping is private (`MAP_PRIVATE`); a shared one warns, as the publish steps are
    /// a "should".
    PcMappingPrivate,
    /// `MADV_DONTFORK` is in effect, so a forked child does not inherit the context.
    PcMappingDontfork,
    /// The header's signature is exactly `OTEL_CTX`.
    PcHeaderSignature,
    /// The header's version is 2 (1, for development, warns).
    PcHeaderVersion,
    /// `monotonic_published_at_ns` is non-zero and a plausible `CLOCK_BOOTTIME` time.
    PcHeaderTimestamp,
    /// `payload_size` is in `1..=65536`.
    PcHeaderPayloadSize,
    /// Every update seen makes `monotonic_published_at_ns` strictly greater.
    PcUpdateTimestampIncreases,
    /// The payload decodes as a `ProcessContext` message.
    PcPayloadDecodes,
    /// Resource attribute keys are unique.
    PcResourceUniqueKeys,
    /// The resource has a `service.name`.
    PcResourceServiceName,
    /// `threadlocal.*` keys are extra attributes (field 2), never resource attributes.
    TlKeysPlacement,
    /// `threadlocal.schema_version` is a string naming a known schema.
    TlSchemaVersion,
    /// `threadlocal.attribute_key_map` is an array of at most 256 strings.
    TlKeyMapShape,
    /// The key map only grows: no name changes or disappears across updates.
    TlKeyMapAppendOnly,
    /// A non-empty key map goes with a TLS schema, not with `go_pprof_labels_v1`.
    TlKeyMapSchema,
    /// A process that exports the TLS symbol publishes the reference data.
    TlReferenceData,
    /// A process that exports the TLS symbol names a TLS schema in
    /// `threadlocal.schema_version`.
    TlReferenceDataSchema,
    /// `otel_thread_ctx_v1` is in `.dynsym`.
    TcSymbolDynsym,
    /// The symbol is `STT_TLS`.
    TcSymbolType,
    /// The symbol is 8 bytes.
    TcSymbolSize,
    /// The symbol is `STB_GLOBAL`.
    TcSymbolBinding,
    /// The TLS access model is one readers support, preferably TLSDESC.
    TcAccessModel,
    /// A non-NULL slot points at readable memory.
    TcRecordReadable,
    /// Records start at a 2-aligned address.
    TcRecordAligned,
    /// `valid` is 0 or 1.
    TcRecordValid,
    /// Records are at most 640 bytes.
    TcRecordSize,
    /// attrs-data ends on an entry boundary.
    TcAttrsComplete,
    /// Every key index is inside the key map.
    TcAttrsKeyIndex,
    /// Every value is UTF-8.
    TcAttrsUtf8,
    /// Trace and span ids are both set or both zero.
    TcRecordIds,
    /// `trace_flags` is 0 when there are no ids.
    TcRecordTraceFlags,
}

impl RuleId {
    /// Every rule, in report order.
    pub const ALL: [Self; 35] = [
        Self::PcFound,
        Self::PcMappingName,
        Self::PcMappingSingle,
        Self::PcMappingNotExecutable,
        Self::PcMappingPrivate,
        Self::PcMappingDontfork,
        Self::PcHeaderSignature,
        Self::PcHeaderVersion,
        Self::PcHeaderTimestamp,
        Self::PcHeaderPayloadSize,
        Self::PcUpdateTimestampIncreases,
        Self::PcPayloadDecodes,
        Self::PcResourceUniqueKeys,
        Self::PcResourceServiceName,
        Self::TlKeysPlacement,
        Self::TlSchemaVersion,
        Self::TlKeyMapShape,
        Self::TlKeyMapAppendOnly,
        Self::TlKeyMapSchema,
        Self::TlReferenceData,
        Self::TlReferenceDataSchema,
        Self::TcSymbolDynsym,
        Self::TcSymbolType,
        Self::TcSymbolSize,
        Self::TcSymbolBinding,
        Self::TcAccessModel,
        Self::TcRecordReadable,
        Self::TcRecordAligned,
        Self::TcRecordValid,
        Self::TcRecordSize,
        Self::TcAttrsComplete,
        Self::TcAttrsKeyIndex,
        Self::TcAttrsUtf8,
        Self::TcRecordIds,
        Self::TcRecordTraceFlags,
    ];

    /// Position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The stable id, such as `pc.mapping.name`.
    pub const fn id(self) -> &'static str {
        match self {
            Self::PcFound => "pc.found",
            Self::PcMappingName => "pc.mapping.name",
            Self::PcMappingSingle => "pc.mapping.single",
            Self::PcMappingNotExecutable => "pc.mapping.not_executable",
            Self::PcMappingPrivate => "pc.mapping.private",
            Self::PcMappingDontfork => "pc.mapping.dontfork",
            Self::PcHeaderSignature => "pc.header.signature",
            Self::PcHeaderVersion => "pc.header.version",
            Self::PcHeaderTimestamp => "pc.header.timestamp",
            Self::PcHeaderPayloadSize => "pc.header.payload_size",
            Self::PcUpdateTimestampIncreases => "pc.update.timestamp_increases",
            Self::PcPayloadDecodes => "pc.payload.decodes",
            Self::PcResourceUniqueKeys => "pc.resource.unique_keys",
            Self::PcResourceServiceName => "pc.resource.service_name",
            Self::TlKeysPlacement => "tl.keys.placement",
            Self::TlSchemaVersion => "tl.schema_version",
            Self::TlKeyMapShape => "tl.key_map.shape",
            Self::TlKeyMapAppendOnly => "tl.key_map.append_only",
            Self::TlKeyMapSchema => "tl.key_map.schema",
            Self::TlReferenceData => "tl.reference_data",
            Self::TlReferenceDataSchema => "tl.reference_data.schema",
            Self::TcSymbolDynsym => "tc.symbol.dynsym",
            Self::TcSymbolType => "tc.symbol.type",
            Self::TcSymbolSize => "tc.symbol.size",
            Self::TcSymbolBinding => "tc.symbol.binding",
            Self::TcAccessModel => "tc.access_model",
            Self::TcRecordReadable => "tc.record.readable",
            Self::TcRecordAligned => "tc.record.aligned",
            Self::TcRecordValid => "tc.record.valid",
            Self::TcRecordSize => "tc.record.size",
            Self::TcAttrsComplete => "tc.attrs.complete",
            Self::TcAttrsKeyIndex => "tc.attrs.key_index",
            Self::TcAttrsUtf8 => "tc.attrs.utf8",
            Self::TcRecordIds => "tc.record.ids",
            Self::TcRecordTraceFlags => "tc.record.trace_flags",
        }
    }

    /// What the rule requires, in one line.
    pub const fn title(self) -> &'static str {
        match self {
            Self::PcFound => "a process context is published",
            Self::PcMappingName => {
                "the mapping is named [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or /memfd:OTEL_CTX (optionally ' (deleted)'), exactly"
            }
            Self::PcMappingSingle => "one process context at a time",
            Self::PcMappingNotExecutable => "the mapping is not executable",
            Self::PcMappingPrivate => "the mapping is private (MAP_PRIVATE), as the publish steps say",
            Self::PcMappingDontfork => "MADV_DONTFORK is in effect on the mapping",
            Self::PcHeaderSignature => "signature is exactly OTEL_CTX",
            Self::PcHeaderVersion => "version is 2 (1 only for development)",
            Self::PcHeaderTimestamp => {
                "monotonic_published_at_ns is non-zero, after the process started and not in the future (CLOCK_BOOTTIME)"
            }
            Self::PcHeaderPayloadSize => "payload_size is between 1 and 65536",
            Self::PcUpdateTimestampIncreases => {
                "every update makes monotonic_published_at_ns strictly greater"
            }
            Self::PcPayloadDecodes => "the payload decodes as a ProcessContext message",
            Self::PcResourceUniqueKeys => "resource attribute keys are unique",
            Self::PcResourceServiceName => "the resource has a service.name",
            Self::TlKeysPlacement => {
                "threadlocal.* keys are extra attributes (field 2), not resource attributes"
            }
            Self::TlSchemaVersion => {
                "threadlocal.schema_version is a string: tlsdesc_v1_dev, tls_v1 or go_pprof_labels_v1"
            }
            Self::TlKeyMapShape => {
                "threadlocal.attribute_key_map is an array of at most 256 strings"
            }
            Self::TlKeyMapAppendOnly => {
                "the key map is append-only: names never change or disappear across updates"
            }
            Self::TlKeyMapSchema => {
                "a non-empty threadlocal.attribute_key_map goes with a TLS schema (tlsdesc_v1_dev, tls_v1), not go_pprof_labels_v1"
            }
            Self::TlReferenceData => {
                "a process that exports otel_thread_ctx_v1 publishes threadlocal.schema_version and a key map"
            }
            Self::TlReferenceDataSchema => {
                "a process that exports otel_thread_ctx_v1 names a TLS schema (tlsdesc_v1_dev, tls_v1) in threadlocal.schema_version"
            }
            Self::TcSymbolDynsym => "otel_thread_ctx_v1 is exported in .dynsym",
            Self::TcSymbolType => "otel_thread_ctx_v1 is an STT_TLS symbol",
            Self::TcSymbolSize => "otel_thread_ctx_v1 is 8 bytes",
            Self::TcSymbolBinding => "otel_thread_ctx_v1 is GLOBAL",
            Self::TcAccessModel => {
                "the TLS access model is TLSDESC (general dynamic, initial exec and local exec allowed; local dynamic is not)"
            }
            Self::TcRecordReadable => "a non-NULL slot points at readable memory",
            Self::TcRecordAligned => "records start at a 2-aligned address",
            Self::TcRecordValid => "valid is 0 or 1",
            Self::TcRecordSize => "records are at most 640 bytes",
            Self::TcAttrsComplete => "attrs-data holds only complete entries",
            Self::TcAttrsKeyIndex => "every key index is inside threadlocal.attribute_key_map",
            Self::TcAttrsUtf8 => "attribute values are UTF-8",
            Self::TcRecordIds => "trace_id and span_id are both set or both zero",
            Self::TcRecordTraceFlags => "trace_flags is 0 when there are no ids",
        }
    }

    /// Where the rule comes from: OTEP number and the heading of the OTEP's section (with
    /// the step number where the OTEP numbers the section's steps).
    pub const fn reference(self) -> &'static str {
        match self {
            Self::PcFound | Self::PcMappingName => "OTEP 4719 §Reading Protocol 1",
            Self::PcMappingSingle => "OTEP 4719 §Publication Protocol 1",
            Self::PcMappingNotExecutable | Self::PcMappingPrivate => {
                "OTEP 4719 §Publication Protocol 3"
            }
            Self::PcMappingDontfork => "OTEP 4719 §Publication Protocol 5",
            Self::PcHeaderSignature | Self::PcHeaderVersion => {
                "OTEP 4719 §Header Structure, §Reading Protocol 2"
            }
            Self::PcHeaderTimestamp => "OTEP 4719 §Header Structure, §Publication Protocol 9",
            Self::PcHeaderPayloadSize => "OTEP 4719 §Reading Protocol 5 (reader limits)",
            Self::PcUpdateTimestampIncreases => "OTEP 4719 §Updating Protocol 6",
            Self::PcPayloadDecodes => "OTEP 4719 §Payload Format, §Reading Protocol 8",
            Self::PcResourceUniqueKeys | Self::PcResourceServiceName => {
                "OTEP 4719 §Payload Format"
            }
            Self::TlKeysPlacement | Self::TlSchemaVersion | Self::TlKeyMapShape => {
                "OTEP 4947 §Process Context: Thread-Local Reference Data"
            }
            Self::TlKeyMapAppendOnly => "OTEP 4947 §attribute_key_map dictionary semantics",
            Self::TlKeyMapSchema => {
                "OTEP 4947 §Process Context: Thread-Local Reference Data, §Alternative for Go support"
            }
            Self::TlReferenceData | Self::TlReferenceDataSchema => {
                "OTEP 4947 §Process Context: Thread-Local Reference Data, §Reading Protocol 1.2"
            }
            Self::TcSymbolDynsym
            | Self::TcSymbolType
            | Self::TcSymbolBinding
            | Self::TcAccessModel => "OTEP 4947 §Thread-Local Variable Resolution",
            Self::TcSymbolSize => "OTEP 4947 §Thread-Local Variable",
            Self::TcRecordReadable => "OTEP 4947 §Publication Protocol 2",
            Self::TcRecordAligned
            | Self::TcRecordValid
            | Self::TcRecordSize
            | Self::TcAttrsComplete
            | Self::TcAttrsKeyIndex
            | Self::TcAttrsUtf8
            | Self::TcRecordIds
            | Self::TcRecordTraceFlags => "OTEP 4947 §Thread-Local Context Record",
        }
    }

    /// Whether the rule can end in FAIL (the others end in WARN at worst: what they judge
    /// is a recommendation of the specification, or a "should").
    pub const fn can_fail(self) -> bool {
        !matches!(
            self,
            Self::PcMappingPrivate
                | Self::PcResourceServiceName
                | Self::TlKeyMapSchema
                | Self::TlReferenceDataSchema
                | Self::TcRecordSize
        )
    }

    /// The rule with stable id `id`.
    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|rule| rule.id() == id)
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

    #[test]
    fn all_lists_every_rule_once_in_index_order() {
        for (i, rule) in RuleId::ALL.into_iter().enumerate() {
            assert_eq!(rule.index(), i, "{rule}");
            assert_eq!(RuleId::from_id(rule.id()), Some(rule));
            assert!(rule.reference().starts_with("OTEP 4"), "{rule}");
        }
        let mut ids: Vec<&str> = RuleId::ALL.iter().map(|r| r.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RuleId::ALL.len());
        assert_eq!(RuleId::from_id("pc.nope"), None);
    }

    #[test]
    fn check_md_lists_every_rule_with_its_reference() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/CHECK.md"));
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), RuleId::ALL.len());
        for (row, rule) in rows.iter().zip(RuleId::ALL) {
            assert!(row.starts_with(&format!("| `{}` |", rule.id())), "{row}");
            assert!(row.ends_with(&format!("| {} |", rule.reference())), "{row}");
            assert_eq!(row.contains("WARN only"), !rule.can_fail(), "{row}");
        }
    }
}
