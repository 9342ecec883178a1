//! OTLP profiles: the profiles of one or more processes as one
//! `ExportProfilesServiceRequest` (signal `profiles`, `v1development`), the message an
//! OpenTelemetry Collector's OTLP receiver takes ([`ExportRequest`], encoded with
//! [`ExportRequest::encode_to_vec`]), built with the generated types of
//! `opentelemetry-proto`, which stay inside this module: a program that wants to look
//! into a request decodes its bytes with the OTLP types of its choice.
//!
//! Each process is one `ResourceProfiles`: its resource is the process context's, with
//! every attribute's type (and `process.pid` when the resource has none), one
//! `ScopeProfiles` names the tool, and one `Profile` holds the samples: `samples`/`count`
//! per stack and label set, `period_type` `cpu`/`nanoseconds` (a profile of off-CPU time
//! too has two, one sample type each: `cpu`/`nanoseconds`, then
//! `off_cpu`/`nanoseconds`, the stacks and label sets with none left out). A sample's thread
//! context becomes its attributes (the record's attributes by name, `thread.id` as an
//! int, `thread.name`) and a link to its trace and span. Strings, functions, mappings,
//! locations, stacks, attributes and links are in the request's one dictionary, shared
//! by every process and without duplicates, with the zero value at index 0 of every
//! table as the format requires. A frame nothing names has no line: a backend
//! symbolizes it from its mapping's build id (`process.executable.build_id.gnu`) and
//! address.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use otel_ctx_reader::process::{OwnedKeyValue, OwnedValue};

use opentelemetry_proto::tonic as proto;
use prost::Message as _;

use proto::collector::profiles::v1development::ExportProfilesServiceRequest;
use proto::common::v1::KeyValueList;
use proto::common::v1::{any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue};
use proto::profiles::v1development as otlp;
use proto::resource::v1::Resource;

use crate::profile::{FrameKind, LabelSet, Location, Mapping, Profile, OVERFLOW_FUNCTION};

/// The semantic conventions' names this module writes.
pub mod names {
    /// The process id, added to a resource that has none.
    pub const PROCESS_PID: &str = "process.pid";
    /// A mapping's GNU build id, lowercase hex.
    pub const BUILD_ID: &str = "process.executable.build_id.gnu";
    /// A location's kind of frame.
    pub const FRAME_TYPE: &str = "profile.frame.type";
    /// The thread's id (an int attribute of the sample).
    pub const THREAD_ID: &str = "thread.id";
}

/// The instrumentation scope the profiles are reported under: the profiler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpScope {
    /// Its name, such as `otel-ctx`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// One OTLP `ExportProfilesServiceRequest`: the profiles of one or more processes and
/// their one dictionary, ready to be encoded as the body of `POST
/// /v1development/profiles`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportRequest {
    message: ExportProfilesServiceRequest,
    samples: u64,
}

impl ExportRequest {
    /// The protobuf encoding of the request.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        self.message.encode_to_vec()
    }

    /// The length of [`encode_to_vec`](Self::encode_to_vec)'s bytes, computed without
    /// encoding.
    pub fn encoded_len(&self) -> usize {
        self.message.encoded_len()
    }

    /// The samples the request counts, over all its processes.
    pub const fn samples(&self) -> u64 {
        self.samples
    }

    /// The processes in the request (its `ResourceProfiles`).
    pub fn processes(&self) -> usize {
        self.message.resource_profiles.len()
    }
}

impl Profile {
    /// This process's profile as an OTLP request of its own.
    pub fn to_otlp(&self, scope: &OtlpScope) -> ExportRequest {
        export_request(std::slice::from_ref(self), scope)
    }
}

/// The profiles of `profiles` (one per process, in that order) as one request, with one
/// dictionary for all of them.
pub fn export_request(profiles: &[Profile], scope: &OtlpScope) -> ExportRequest {
    let samples = profiles
        .iter()
        .flat_map(|p| &p.entries)
        .fold(0u64, |sum, e| sum.saturating_add(e.samples));
    let mut dictionary = Dictionary::new();
    let resource_profiles = profiles
        .iter()
        .map(|profile| otlp::ResourceProfiles {
            resource: Some(resource(profile)),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: scope.name.clone(),
                    version: scope.version.clone(),
                    ..Default::default()
                }),
                profiles: if profile.off_cpu {
                    // One sample type per `Profile`: CPU time, then off-CPU time.
                    vec![
                        dictionary.profile(profile, Values::Cpu),
                        dictionary.profile(profile, Values::OffCpu),
                    ]
                } else {
                    vec![dictionary.profile(profile, Values::Samples)]
                },
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        })
        .collect();
    ExportRequest {
        message: ExportProfilesServiceRequest {
            resource_profiles,
            dictionary: Some(dictionary.finish()),
        },
        samples,
    }
}

/// The profiles a collector says it rejected in the answer to an accepted request (the
/// `partial_success` of an `ExportProfilesServiceResponse`), with its message; `None`
/// when the answer says nothing of it or cannot be decoded (an empty body is a full
/// success).
#[cfg(feature = "http")]
pub(crate) fn partial_success(response: &[u8]) -> Option<(u64, String)> {
    use proto::collector::profiles::v1development::ExportProfilesServiceResponse;
    let partial = ExportProfilesServiceResponse::decode(response)
        .ok()?
        .partial_success?;
    let rejected = u64::try_from(partial.rejected_profiles).unwrap_or(0);
    (rejected > 0 || !partial.error_message.is_empty()).then_some((rejected, partial.error_message))
}

/// The process's resource, typed; `process.pid` added when it has none. A profile
/// without typed attributes (built by hand) gives its text ones as strings.
fn resource(profile: &Profile) -> Resource {
    let mut attributes: Vec<KeyValue> = if profile.resource_attributes.is_empty() {
        profile
            .resource
            .iter()
            .map(|(k, v)| key_value(k, string(v)))
            .collect()
    } else {
        profile.resource_attributes.iter().map(owned).collect()
    };
    if !attributes.iter().any(|kv| kv.key == names::PROCESS_PID) {
        attributes.push(key_value(names::PROCESS_PID, int(i64::from(profile.pid))));
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

fn key_value(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..Default::default()
    }
}

fn string(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    }
}

fn int(i: i64) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::IntValue(i)),
    }
}

fn owned(kv: &OwnedKeyValue) -> KeyValue {
    KeyValue {
        key: kv.key.clone(),
        value: Some(any(&kv.value)),
        ..Default::default()
    }
}

/// An `OwnedValue` as the `AnyValue` it was decoded from.
fn any(value: &OwnedValue) -> AnyValue {
    use any_value::Value;
    AnyValue {
        value: match value {
            OwnedValue::Empty => None,
            OwnedValue::String(s) => Some(Value::StringValue(s.clone())),
            OwnedValue::Bool(b) => Some(Value::BoolValue(*b)),
            OwnedValue::Int(i) => Some(Value::IntValue(*i)),
            OwnedValue::Double(d) => Some(Value::DoubleValue(*d)),
            OwnedValue::Bytes(b) => Some(Value::BytesValue(b.clone())),
            OwnedValue::Array(values) => Some(Value::ArrayValue(ArrayValue {
                values: values.iter().map(any).collect(),
            })),
            OwnedValue::KvList(entries) => Some(Value::KvlistValue(KeyValueList {
                values: entries.iter().map(owned).collect(),
            })),
        },
    }
}

/// A sample attribute's value: the labels are text, `thread.id` a number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Value {
    Str(String),
    Int(i64),
}

/// One dictionary table: its rows, and the index of each row's key. Index 0 is the zero
/// value, present from the start; a row that would take the table past `i32::MAX` is
/// given index 0 instead (never reached within the aggregate's limits).
struct Table<K, V> {
    rows: Vec<V>,
    index: HashMap<K, i32>,
}

impl<K: Hash + Eq, V: Default> Table<K, V> {
    fn new(zero: K) -> Self {
        Self {
            rows: vec![V::default()],
            index: HashMap::from([(zero, 0)]),
        }
    }

    fn get(&mut self, key: K, row: impl FnOnce() -> V) -> i32 {
        if let Some(&at) = self.index.get(&key) {
            return at;
        }
        let Ok(at) = i32::try_from(self.rows.len()) else {
            return 0;
        };
        self.rows.push(row());
        self.index.insert(key, at);
        at
    }
}

/// A location's identity: mapping, address, lines (function, line), attributes.
type LocationKey = (i32, u64, Vec<(i32, i64)>, Vec<i32>);
/// A mapping's identity: start, limit, offset, file name, attributes.
type MappingKey = (u64, u64, u64, i32, Vec<i32>);

/// The request's dictionary, being built.
struct Dictionary {
    strings: Table<String, String>,
    functions: Table<(i32, i32), otlp::Function>,
    mappings: Table<MappingKey, otlp::Mapping>,
    locations: Table<LocationKey, otlp::Location>,
    stacks: Table<Vec<i32>, otlp::Stack>,
    attributes: Table<(i32, Option<Value>), otlp::KeyValueAndUnit>,
    links: Table<Vec<u8>, otlp::Link>,
}

impl Dictionary {
    fn new() -> Self {
        Self {
            strings: Table::new(String::new()),
            functions: Table::new((0, 0)),
            mappings: Table::new((0, 0, 0, 0, Vec::new())),
            locations: Table::new((0, 0, Vec::new(), Vec::new())),
            stacks: Table::new(Vec::new()),
            attributes: Table::new((0, None)),
            links: Table::new(Vec::new()),
        }
    }

    fn finish(self) -> otlp::ProfilesDictionary {
        otlp::ProfilesDictionary {
            mapping_table: self.mappings.rows,
            location_table: self.locations.rows,
            function_table: self.functions.rows,
            link_table: self.links.rows,
            string_table: self.strings.rows,
            attribute_table: self.attributes.rows,
            stack_table: self.stacks.rows,
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        // A lookup by &str first: most strings are there already.
        if let Some(&at) = self.strings.index.get(s) {
            return at;
        }
        self.strings.get(s.to_owned(), || s.to_owned())
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> otlp::ValueType {
        otlp::ValueType {
            type_strindex: self.string(kind),
            unit_strindex: self.string(unit),
        }
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key_strindex = self.string(key);
        let any = match &value {
            Value::Str(s) => string(s),
            Value::Int(i) => int(*i),
        };
        self.attributes
            .get((key_strindex, Some(value)), || otlp::KeyValueAndUnit {
                key_strindex,
                value: Some(any),
                unit_strindex: 0,
            })
    }

    fn function(&mut self, name: &str, file: Option<&str>, start_line: i64) -> i32 {
        let name_strindex = self.string(name);
        let filename_strindex = file.map_or(0, |f| self.string(f));
        self.functions
            .get((name_strindex, filename_strindex), || otlp::Function {
                name_strindex,
                system_name_strindex: name_strindex,
                filename_strindex,
                start_line,
            })
    }

    fn mapping(&mut self, m: &Mapping) -> i32 {
        let filename_strindex = self.string(&m.path);
        let attribute_indices: Vec<i32> = m
            .build_id
            .iter()
            .map(|id| self.attribute(names::BUILD_ID, Value::Str(id.clone())))
            .collect();
        let key = (
            m.start,
            m.end,
            m.offset,
            filename_strindex,
            attribute_indices.clone(),
        );
        self.mappings.get(key, || otlp::Mapping {
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.offset,
            filename_strindex,
            attribute_indices,
        })
    }

    /// A location of kind `kind`: `lines` are (function name, file, line), innermost
    /// first.
    fn location(
        &mut self,
        mapping_index: i32,
        address: u64,
        lines: &[(&str, Option<&str>, i64)],
        kind: FrameKind,
    ) -> i32 {
        let start_line = i64::from(kind.start_line().unwrap_or(0));
        let lines: Vec<otlp::Line> = lines
            .iter()
            .map(|&(name, file, line)| otlp::Line {
                function_index: self.function(name, file, start_line),
                line,
                column: 0,
            })
            .collect();
        let attribute_indices =
            vec![self.attribute(names::FRAME_TYPE, Value::Str(kind.otel_type().into()))];
        let key = (
            mapping_index,
            address,
            lines.iter().map(|l| (l.function_index, l.line)).collect(),
            attribute_indices.clone(),
        );
        self.locations.get(key, || otlp::Location {
            mapping_index,
            address,
            lines,
            attribute_indices,
        })
    }

    fn frame(&mut self, location: &Location, mappings: &[i32]) -> i32 {
        let mapping = location
            .mapping
            .and_then(|at| mappings.get(at))
            .copied()
            .unwrap_or(0);
        let lines: Vec<(&str, Option<&str>, i64)> = location
            .symbols
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.file.as_deref(),
                    s.line.map_or(0, i64::from),
                )
            })
            .collect();
        self.location(mapping, location.address, &lines, location.kind)
    }

    fn stack(&mut self, location_indices: Vec<i32>) -> i32 {
        self.stacks.get(location_indices.clone(), || otlp::Stack {
            location_indices,
        })
    }

    fn link(&mut self, labels: &LabelSet) -> i32 {
        let id = |key: &str, len: usize| {
            let bytes = otel_ctx_codec::hex::decode(labels.get(key)?).ok()?;
            (bytes.len() == len && bytes.iter().any(|&b| b != 0)).then_some(bytes)
        };
        let (Some(trace_id), Some(span_id)) = (id("trace_id", 16), id("span_id", 8)) else {
            return 0;
        };
        let key = [trace_id.as_slice(), span_id.as_slice()].concat();
        self.links.get(key, || otlp::Link { trace_id, span_id })
    }

    /// The attributes of a label set: every label but the trace and span ids (which
    /// are the link), `thread.id` as an int. A key comes once, as the format requires of
    /// a sample's attributes: a record that repeats a key, or names one `thread.id`,
    /// keeps its first value.
    fn sample_attributes(&mut self, labels: &LabelSet) -> Vec<i32> {
        let mut keys: Vec<&str> = Vec::with_capacity(labels.labels.len());
        let mut indices = Vec::with_capacity(labels.labels.len());
        for (k, v) in &labels.labels {
            if k == "trace_id" || k == "span_id" || keys.contains(&k.as_str()) {
                continue;
            }
            keys.push(k);
            let value = match (k.as_str(), v.parse::<i64>()) {
                (names::THREAD_ID, Ok(n)) => Value::Int(n),
                _ => Value::Str(v.clone()),
            };
            indices.push(self.attribute(k, value));
        }
        indices
    }

    fn profile(&mut self, profile: &Profile, values: Values) -> otlp::Profile {
        let sample_type = match values {
            Values::Samples => self.value_type("samples", "count"),
            Values::Cpu => self.value_type("cpu", "nanoseconds"),
            Values::OffCpu => self.value_type("off_cpu", "nanoseconds"),
        };
        let period_type = self.value_type("cpu", "nanoseconds");
        let mappings: Vec<i32> = profile.mappings.iter().map(|m| self.mapping(m)).collect();
        let locations: Vec<i32> = profile
            .locations
            .iter()
            .map(|l| self.frame(l, &mappings))
            .collect();
        let mut stacks: Vec<Option<i32>> = vec![None; profile.stacks.len()];
        let mut labels: Vec<Option<(Vec<i32>, i32)>> = vec![None; profile.label_sets.len()];
        let mut samples = Vec::with_capacity(profile.entries.len());
        for entry in &profile.entries {
            let value = match values {
                Values::Samples => entry.samples,
                Values::Cpu => entry.nanos,
                Values::OffCpu => entry.off_cpu_nanos,
            };
            if value == 0 && values != Values::Samples {
                continue;
            }
            let stack_index = match entry.stack {
                Some(at) if at < stacks.len() => match stacks[at] {
                    Some(index) => index,
                    None => {
                        let ids = profile.stacks[at]
                            .iter()
                            .filter_map(|&l| locations.get(l).copied())
                            .collect();
                        let index = self.stack(ids);
                        stacks[at] = Some(index);
                        index
                    }
                },
                Some(_) => 0,
                None => {
                    let overflow =
                        self.location(0, 0, &[(OVERFLOW_FUNCTION, None, 0)], FrameKind::Native);
                    self.stack(vec![overflow])
                }
            };
            let (attribute_indices, link_index) = match labels.get_mut(entry.labels) {
                Some(Some(done)) => done.clone(),
                Some(slot) => {
                    let set = &profile.label_sets[entry.labels];
                    let done = (self.sample_attributes(set), self.link(set));
                    *slot = Some(done.clone());
                    done
                }
                None => (Vec::new(), 0),
            };
            samples.push(otlp::Sample {
                stack_index,
                attribute_indices,
                link_index,
                values: vec![i64::try_from(value).unwrap_or(i64::MAX)],
                timestamps_unix_nano: Vec::new(),
            });
        }
        let time_unix_nano = profile
            .start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        otlp::Profile {
            sample_type: Some(sample_type),
            samples,
            time_unix_nano,
            duration_nano: u64::try_from(profile.duration.as_nanos()).unwrap_or(u64::MAX),
            period_type: Some(period_type),
            period: i64::try_from(profile.period_ns).unwrap_or(i64::MAX),
            profile_id: profile_id(profile.pid, time_unix_nano),
            dropped_attributes_count: u32::try_from(profile.stats.overflow_labels)
                .unwrap_or(u32::MAX),
            original_payload_format: String::new(),
            original_payload: Vec::new(),
            attribute_indices: Vec::new(),
        }
    }
}

/// What a `Profile`'s values count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Values {
    /// Samples (`samples`/`count`): a CPU profile.
    Samples,
    /// Time on a CPU (`cpu`/`nanoseconds`), in a profile of off-CPU time too.
    Cpu,
    /// Time off a CPU (`off_cpu`/`nanoseconds`).
    OffCpu,
}

/// A random 16-byte profile id, never all zeros (which the format calls invalid).
fn profile_id(pid: u32, time_unix_nano: u64) -> Vec<u8> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut id = Vec::with_capacity(16);
    for half in 0u8..2 {
        // Each RandomState has random keys: two hashes of distinct inputs are 128
        // random bits.
        let hash = RandomState::new().hash_one((pid, time_unix_nano, n, half));
        id.extend_from_slice(&hash.to_le_bytes());
    }
    if id.iter().all(|&b| b == 0) {
        id[0] = 1;
    }
    id
}

#[cfg(test)]
#[path = "otlp_tests.rs"]
mod tests;
