//! pprof: the gzipped `profile.proto` that `go tool pprof` reads. Sample types
//! `samples/count` and `cpu/nanoseconds`, and `off_cpu/nanoseconds` in a profile of
//! off-CPU time too (`go tool pprof -sample_index=off_cpu`); the labels of each sample as string labels,
//! with the process's resource attributes on every sample and in the comments.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};
use std::time::UNIX_EPOCH;

use prost::Message;

use crate::profile::{Profile, OVERFLOW_FUNCTION};

/// The messages of pprof's `profile.proto` (github.com/google/pprof, proto3), with
/// its field numbers.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The string table: index 0 is the empty string, as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Self {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), id);
        id
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Profile {
    /// The profile as a `profile.proto` message, before compression.
    fn to_proto(&self) -> proto::Profile {
        let mut strings = Strings::new();
        let mut value_type = |kind: &str, unit: &str| proto::ValueType {
            r#type: strings.id(kind),
            unit: strings.id(unit),
        };
        let mut sample_type = vec![
            value_type("samples", "count"),
            value_type("cpu", "nanoseconds"),
        ];
        if self.off_cpu {
            sample_type.push(value_type("off_cpu", "nanoseconds"));
        }
        let period_type = value_type("cpu", "nanoseconds");

        // Which mappings have frames with a file and line (and inlined frames).
        let mut has_lines = vec![false; self.mappings.len()];
        let mut has_inlines = vec![false; self.mappings.len()];
        for l in &self.locations {
            if let Some(m) = l.mapping.filter(|&m| m < self.mappings.len()) {
                has_lines[m] |= l.symbols.iter().any(|s| s.line.is_some());
                has_inlines[m] |= l.symbols.len() > 1;
            }
        }
        let mapping = self
            .mappings
            .iter()
            .enumerate()
            .map(|(at, m)| proto::Mapping {
                id: at as u64 + 1,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: m.offset,
                filename: strings.id(&m.path),
                build_id: m.build_id.as_deref().map_or(0, |id| strings.id(id)),
                // Every location has a function (named `[unknown] ...` when nothing
                // names it), so pprof never looks for the file itself.
                has_functions: true,
                has_filenames: has_lines[at],
                has_line_numbers: has_lines[at],
                has_inline_frames: has_inlines[at],
            })
            .collect();

        let mut functions: Vec<proto::Function> = Vec::new();
        let mut function_ids: HashMap<(i64, i64), u64> = HashMap::new();
        // A function by its full name (its system name) and file; shown by its readable
        // name.
        let mut function = |strings: &mut Strings, name: &str, file: Option<&str>, start: u32| {
            let key = (strings.id(name), file.map_or(0, |f| strings.id(f)));
            *function_ids.entry(key).or_insert_with(|| {
                functions.push(proto::Function {
                    id: functions.len() as u64 + 1,
                    name: strings.id(&readable(name)),
                    system_name: key.0,
                    filename: key.1,
                    start_line: i64::from(start),
                });
                functions.len() as u64
            })
        };
        let mut location: Vec<proto::Location> = self
            .locations
            .iter()
            .enumerate()
            .map(|(at, l)| {
                let line = if l.symbols.is_empty() {
                    vec![proto::Line {
                        function_id: function(&mut strings, &l.unknown, None, 0),
                        line: 0,
                        column: 0,
                    }]
                } else {
                    l.symbols
                        .iter()
                        .map(|s| proto::Line {
                            function_id: function(
                                &mut strings,
                                &s.name,
                                s.file.as_deref(),
                                l.kind.start_line().unwrap_or(0),
                            ),
                            line: s.line.map_or(0, i64::from),
                            column: 0,
                        })
                        .collect()
                };
                proto::Location {
                    id: at as u64 + 1,
                    mapping_id: l.mapping.map_or(0, |m| m as u64 + 1),
                    address: l.address,
                    line,
                    is_folded: false,
                }
            })
            .collect();
        let overflow_location = if self.entries.iter().any(|e| e.stack.is_none()) {
            let id = location.len() as u64 + 1;
            location.push(proto::Location {
                id,
                mapping_id: 0,
                address: 0,
                line: vec![proto::Line {
                    function_id: function(&mut strings, OVERFLOW_FUNCTION, None, 0),
                    line: 0,
                    column: 0,
                }],
                is_folded: false,
            });
            id
        } else {
            0
        };

        let resource: Vec<(i64, i64)> = self
            .resource
            .iter()
            .map(|(k, v)| (strings.id(k), strings.id(v)))
            .collect();
        let label = |key: i64, value: i64| proto::Label {
            key,
            str: value,
            num: 0,
            num_unit: 0,
        };
        let sample = self
            .entries
            .iter()
            .map(|entry| {
                let location_id = match entry.stack.and_then(|s| self.stacks.get(s)) {
                    Some(stack) => stack.iter().map(|&at| at as u64 + 1).collect(),
                    None => vec![overflow_location],
                };
                let mut labels: Vec<proto::Label> = Vec::new();
                if let Some(set) = self.label_sets.get(entry.labels) {
                    for (k, v) in &set.labels {
                        labels.push(label(strings.id(k), strings.id(v)));
                    }
                }
                // The resource on every sample, unless the sample says otherwise.
                for &(k, v) in &resource {
                    if !labels.iter().any(|l| l.key == k) {
                        labels.push(label(k, v));
                    }
                }
                proto::Sample {
                    location_id,
                    value: if self.off_cpu {
                        vec![
                            signed(entry.samples),
                            signed(entry.nanos),
                            signed(entry.off_cpu_nanos),
                        ]
                    } else {
                        vec![signed(entry.samples), signed(entry.nanos)]
                    },
                    label: labels,
                }
            })
            .collect();

        let comment = self
            .resource
            .iter()
            .map(|(k, v)| strings.id(&format!("{k}={v}")))
            .collect();
        let time_nanos = self
            .start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| signed(d.as_nanos().try_into().unwrap_or(u64::MAX)));
        // pprof shows the last sample type unless told: CPU time stays the first view
        // when off-CPU time follows it.
        let default_sample_type = if self.off_cpu { strings.id("cpu") } else { 0 };
        proto::Profile {
            sample_type,
            sample,
            mapping,
            location,
            function: functions,
            string_table: strings.table,
            drop_frames: 0,
            keep_frames: 0,
            time_nanos,
            duration_nanos: signed(self.duration.as_nanos().try_into().unwrap_or(u64::MAX)),
            period_type: Some(period_type),
            period: signed(self.period_ns),
            comment,
            default_sample_type,
        }
    }

    /// Writes the profile as pprof: `profile.proto`, gzipped.
    pub fn write_pprof(&self, out: impl Write) -> io::Result<()> {
        let bytes = self.to_proto().encode_to_vec();
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?;
        Ok(())
    }
}

/// A function's name as pprof's default view shows it whole: Rust's qualified paths
/// `<Type>::f` and `<Type as Trait>::f` become `Type::f`. pprof takes a name equal to
/// its system name for one it may simplify, and cuts anything between angle brackets
/// as C++ template arguments (`<std::time::Instant>::now` was shown as `::now`); the
/// full name stays the function's system name, which pprof shows as it is.
fn readable(name: &str) -> Cow<'_, str> {
    let Some(rest) = name.strip_prefix('<') else {
        return Cow::Borrowed(name);
    };
    // The `>` that closes the leading `<`, and a top-level ` as ` inside it (an arrow's
    // `>` closes nothing).
    let (mut depth, mut split) = (1usize, None);
    let bytes = rest.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' if at > 0 && bytes[at - 1] == b'-' => {}
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    let ty = &rest[..split.unwrap_or(at)];
                    return Cow::Owned(format!("{}{}", readable(ty), &rest[at + 1..]));
                }
            }
            b' ' if depth == 1 && split.is_none() && rest[at..].starts_with(" as ") => {
                split = Some(at);
            }
            _ => {}
        }
    }
    Cow::Borrowed(name)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::profile::example;

    fn decoded() -> proto::Profile {
        let mut gz = Vec::new();
        example().write_pprof(&mut gz).unwrap();
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut bytes)
            .unwrap();
        proto::Profile::decode(&bytes[..]).unwrap()
    }

    #[test]
    fn rust_names_read_well_in_pprof() {
        for (full, shown) in [
            (
                "<std::sys::pal::unix::time::Timespec>::sub_timespec",
                "std::sys::pal::unix::time::Timespec::sub_timespec",
            ),
            (
                "<std::time::Instant as core::ops::arith::Sub>::sub",
                "std::time::Instant::sub",
            ),
            (
                "<alloc::vec::Vec<u8> as core::ops::drop::Drop>::drop",
                "alloc::vec::Vec<u8>::drop",
            ),
            (
                "<<a::B as c::D>::E as f::G>::h::{{closure}}",
                "a::B::E::h::{{closure}}",
            ),
            (
                "<fn() -> u8 as core::ops::function::FnOnce<()>>::call_once",
                "fn() -> u8::call_once",
            ),
            ("main", "main"),
            ("std::rt::lang_start", "std::rt::lang_start"),
            ("<unbalanced", "<unbalanced"),
            ("[unknown] libx.so+0x300", "[unknown] libx.so+0x300"),
        ] {
            assert_eq!(readable(full), shown, "{full}");
        }
    }

    #[test]
    fn off_cpu_time_is_a_third_value() {
        let mut profile = example();
        profile.off_cpu = true;
        profile.entries[0].off_cpu_nanos = 5_000;
        let p = profile.to_proto();
        let s = |id: i64| p.string_table[id as usize].as_str();
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        let cpu = ("cpu", "nanoseconds");
        assert_eq!(
            types,
            [("samples", "count"), cpu, ("off_cpu", "nanoseconds")]
        );
        assert_eq!(p.sample[0].value, [3, 30_000_000, 5_000]);
        assert!(p.sample.iter().all(|s| s.value.len() == 3));
        // CPU time stays pprof's first view.
        assert_eq!(s(p.default_sample_type), "cpu");
        // A CPU profile has two values, and pprof's own default.
        let p = example().to_proto();
        assert_eq!((p.sample_type.len(), p.default_sample_type), (2, 0));
    }

    #[test]
    fn pprof_has_the_fields_pprof_reads() {
        let p = decoded();
        let s = |id: i64| p.string_table[id as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let period = p.period_type.unwrap();
        assert_eq!((s(period.r#type), s(period.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.time_nanos, 1_700_000_000 * 1_000_000_000);
        assert_eq!(p.duration_nanos, 2_500_000_000);
        let comments: Vec<&str> = p.comment.iter().map(|&c| s(c)).collect();
        assert_eq!(
            comments,
            ["service.name=checkout <&> \"svc\"", "service.version=1.2"]
        );
        assert_eq!(p.mapping.len(), 1);
        assert_eq!(s(p.mapping[0].filename), "/usr/lib/libx.so");
        assert_eq!(s(p.mapping[0].build_id), "abcd");
        assert!(p.mapping[0].has_functions && p.mapping[0].has_inline_frames);

        // Four locations and the overflow's; every one has a function.
        assert_eq!(p.location.len(), 5);
        let function = |id: u64| &p.function[id as usize - 1];
        let names = |l: &proto::Location| -> Vec<(String, i64)> {
            l.line
                .iter()
                .map(|line| (s(function(line.function_id).name).to_owned(), line.line))
                .collect()
        };
        assert_eq!(
            names(&p.location[0]),
            [("inlined_fn".to_owned(), 3), ("outer_fn".to_owned(), 10)]
        );
        assert_eq!(
            s(function(p.location[0].line[0].function_id).filename),
            "/src/a.c"
        );
        assert_eq!(
            names(&p.location[2]),
            [("[unknown] libx.so+0x300".to_owned(), 0)]
        );
        assert_eq!(
            (p.location[3].mapping_id, p.location[3].address),
            (0, 0x7fff_0000)
        );
        assert_eq!(p.location[0].mapping_id, 1);

        // Samples: locations leaf first, both values, labels and the resource.
        assert_eq!(p.sample.len(), 4);
        assert_eq!(p.sample[0].location_id, [1, 2]);
        assert_eq!(p.sample[0].value, [3, 30_000_000]);
        let labels = |sample: &proto::Sample| -> Vec<(String, String)> {
            sample
                .label
                .iter()
                .map(|l| (s(l.key).to_owned(), s(l.str).to_owned()))
                .collect()
        };
        let first = labels(&p.sample[0]);
        for (k, v) in [
            ("trace_id", "0102030405060708090a0b0c0d0e0f10"),
            ("span_id", "a1a2a3a4a5a6a7a8"),
            ("http.route", "/cart"),
            ("thread.id", "7"),
            ("thread.name", "w"),
            ("service.name", "checkout <&> \"svc\""),
            ("service.version", "1.2"),
        ] {
            assert!(
                first.contains(&(k.to_owned(), v.to_owned())),
                "{k}={v} in {first:?}"
            );
        }
        assert_eq!(first.len(), 7);
        assert_eq!(p.sample[3].location_id, [5]);
        assert_eq!(names(&p.location[4]), [(OVERFLOW_FUNCTION.to_owned(), 0)]);
    }
}
