//! The OTLP view's tests: the request built from the writers' example profile and from
//! two processes that share a library and labels, encoded, decoded again and checked
//! against the format's rules (zero values at index 0, no duplicates, every index in
//! range) and the profiles' contents.

use std::collections::HashSet;
use std::fmt::Debug;

use prost::Message;

use super::*;
use crate::profile::{example, Entry};

fn scope() -> OtlpScope {
    OtlpScope {
        name: "otel-ctx".to_owned(),
        version: "9.9.9".to_owned(),
    }
}

/// The request, through its wire form.
fn round_trip(profiles: &[Profile]) -> ExportProfilesServiceRequest {
    let request = export_request(profiles, &scope());
    let bytes = request.encode_to_vec();
    assert_eq!(bytes.len(), request.encoded_len());
    assert_eq!(request.processes(), profiles.len());
    ExportProfilesServiceRequest::decode(&bytes[..]).expect("a request")
}

/// Every table's entry 0 is its zero value, and no two entries are equal.
fn check_table<T: Default + PartialEq + Debug + Message>(name: &str, rows: &[T]) {
    assert!(!rows.is_empty(), "{name} has no zero value");
    assert_eq!(rows[0], T::default(), "{name}[0]");
    let encoded: HashSet<Vec<u8>> = rows.iter().map(Message::encode_to_vec).collect();
    assert_eq!(encoded.len(), rows.len(), "{name} has duplicates: {rows:?}");
}

/// The dictionary's rules, and every index in range.
fn check_dictionary(request: &ExportProfilesServiceRequest) -> &otlp::ProfilesDictionary {
    let d = request.dictionary.as_ref().expect("a dictionary");
    check_table("mapping_table", &d.mapping_table);
    check_table("location_table", &d.location_table);
    check_table("function_table", &d.function_table);
    check_table("link_table", &d.link_table);
    check_table("attribute_table", &d.attribute_table);
    check_table("stack_table", &d.stack_table);
    assert_eq!(d.string_table[0], "");
    let strings: HashSet<&String> = d.string_table.iter().collect();
    assert_eq!(strings.len(), d.string_table.len(), "duplicate strings");
    let string = |i: i32| assert!((i as usize) < d.string_table.len(), "string {i}");
    let attrs = |ids: &[i32]| {
        for &i in ids {
            assert!(
                i > 0 && (i as usize) < d.attribute_table.len(),
                "attribute {i}"
            );
        }
    };
    for m in &d.mapping_table {
        string(m.filename_strindex);
        attrs(&m.attribute_indices);
    }
    for f in &d.function_table {
        string(f.name_strindex);
        string(f.filename_strindex);
    }
    for l in &d.location_table {
        assert!((l.mapping_index as usize) < d.mapping_table.len());
        attrs(&l.attribute_indices);
        for line in &l.lines {
            assert!(
                line.function_index > 0 && (line.function_index as usize) < d.function_table.len()
            );
        }
    }
    for s in &d.stack_table {
        for &l in &s.location_indices {
            assert!(
                l > 0 && (l as usize) < d.location_table.len(),
                "location {l}"
            );
        }
    }
    for a in &d.attribute_table[1..] {
        string(a.key_strindex);
        assert!(a.key_strindex > 0 && a.value.is_some());
    }
    for rp in &request.resource_profiles {
        for p in &rp.scope_profiles[0].profiles {
            for v in [&p.sample_type, &p.period_type] {
                let v = v.as_ref().expect("a value type");
                string(v.type_strindex);
                string(v.unit_strindex);
            }
            for s in &p.samples {
                assert!(s.stack_index >= 0 && (s.stack_index as usize) < d.stack_table.len());
                assert!((s.link_index as usize) < d.link_table.len());
                attrs(&s.attribute_indices);
            }
        }
    }
    d
}

/// A sample's attributes by name.
fn attributes(d: &otlp::ProfilesDictionary, sample: &otlp::Sample) -> Vec<(String, AnyValue)> {
    sample
        .attribute_indices
        .iter()
        .map(|&i| {
            let a = &d.attribute_table[i as usize];
            (
                d.string_table[a.key_strindex as usize].clone(),
                a.value.clone().expect("a value"),
            )
        })
        .collect()
}

/// The function names of a sample's stack, leaf first, inlined frames first.
fn functions(d: &otlp::ProfilesDictionary, sample: &otlp::Sample) -> Vec<String> {
    d.stack_table[sample.stack_index as usize]
        .location_indices
        .iter()
        .flat_map(|&l| &d.location_table[l as usize].lines)
        .map(|line| {
            let f = &d.function_table[line.function_index as usize];
            d.string_table[f.name_strindex as usize].clone()
        })
        .collect()
}

fn text(value: &AnyValue) -> Option<&str> {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

#[test]
fn the_example_profile_as_otlp() {
    let request = round_trip(&[example()]);
    let d = check_dictionary(&request);
    assert_eq!(request.resource_profiles.len(), 1);
    let rp = &request.resource_profiles[0];
    let resource = &rp.resource.as_ref().expect("a resource").attributes;
    let get = |key: &str| {
        resource
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
    };
    assert_eq!(
        text(&get("service.name").unwrap()),
        Some("checkout <&> \"svc\"")
    );
    assert_eq!(text(&get("service.version").unwrap()), Some("1.2"));
    assert_eq!(get(names::PROCESS_PID).unwrap(), int(42));
    let named = rp.scope_profiles[0].scope.as_ref().expect("a scope");
    assert_eq!(
        (named.name.as_str(), named.version.as_str()),
        ("otel-ctx", "9.9.9")
    );

    let p = &rp.scope_profiles[0].profiles[0];
    let s = |i: i32| d.string_table[i as usize].as_str();
    let kind = |v: &Option<otlp::ValueType>| {
        let v = v.as_ref().unwrap();
        (s(v.type_strindex), s(v.unit_strindex))
    };
    assert_eq!(kind(&p.sample_type), ("samples", "count"));
    assert_eq!(kind(&p.period_type), ("cpu", "nanoseconds"));
    assert_eq!(p.period, 10_000_000);
    assert_eq!(p.time_unix_nano, 1_700_000_000 * 1_000_000_000);
    assert_eq!(p.duration_nano, 2_500_000_000);
    assert_eq!(p.profile_id.len(), 16);
    assert!(p.profile_id.iter().any(|&b| b != 0));

    // One sample per entry, its count as the value.
    let values: Vec<i64> = p.samples.iter().map(|s| s.values[0]).collect();
    assert_eq!(values, [3, 2, 1, 4]);
    // The first: inlined_fn inlined into outer_fn, then main;<b>; linked to its trace.
    let first = &p.samples[0];
    assert_eq!(functions(d, first), ["inlined_fn", "outer_fn", "main;<b>"]);
    let link = &d.link_table[first.link_index as usize];
    assert_eq!(link.trace_id, (1..=16).collect::<Vec<u8>>());
    assert_eq!(
        link.span_id,
        [0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8]
    );
    let attrs = attributes(d, first);
    let names: Vec<&str> = attrs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["http.route", "thread.id", "thread.name"]);
    assert_eq!(text(&attrs[0].1), Some("/cart"));
    assert_eq!(attrs[1].1, int(7), "thread.id is an int");
    // The third has the same trace and span: the same link; another label set.
    assert_eq!(p.samples[2].link_index, first.link_index);
    assert_ne!(p.samples[2].attribute_indices, first.attribute_indices);
    // Without a context: no link.
    assert_eq!(p.samples[1].link_index, 0);
    // A frame nothing names has no line, and keeps its address and mapping.
    let second_stack = &d.stack_table[p.samples[1].stack_index as usize];
    let unnamed = &d.location_table[second_stack.location_indices[0] as usize];
    assert!(unnamed.lines.is_empty());
    assert_eq!(unnamed.address, 0x1300);
    let mapping = &d.mapping_table[unnamed.mapping_index as usize];
    assert_eq!(s(mapping.filename_strindex), "/usr/lib/libx.so");
    assert_eq!(
        (mapping.memory_start, mapping.memory_limit),
        (0x1000, 0x2000)
    );
    let build_id = &d.attribute_table[mapping.attribute_indices[0] as usize];
    assert_eq!(s(build_id.key_strindex), names::BUILD_ID);
    assert_eq!(text(build_id.value.as_ref().unwrap()), Some("abcd"));
    // Outside every mapping: mapping 0.
    let outside = &d.location_table[second_stack.location_indices[1] as usize];
    assert_eq!((outside.mapping_index, outside.address), (0, 0x7fff_0000));
    // Every location says it is a native frame.
    let frame_type = &d.attribute_table[unnamed.attribute_indices[0] as usize];
    assert_eq!(s(frame_type.key_strindex), names::FRAME_TYPE);
    assert_eq!(text(frame_type.value.as_ref().unwrap()), Some("native"));
    // The overflow entry: one frame, named as pprof names it.
    assert_eq!(functions(d, &p.samples[3]), [OVERFLOW_FUNCTION]);
    // to_otlp is the same request for one profile.
    let one = example().to_otlp(&scope());
    assert_eq!(one.processes(), 1);
    assert_eq!(
        one.message.dictionary,
        export_request(&[example()], &scope()).message.dictionary
    );
    // The samples it counts: the example's entries, overflow included.
    assert_eq!(one.samples(), values.iter().sum::<i64>() as u64);
}

#[test]
fn two_processes_share_one_dictionary() {
    let a = example();
    let mut b = example();
    b.pid = 43;
    b.service_name = Some("other".to_owned());
    b.resource_attributes = vec![
        OwnedKeyValue {
            key: "service.name".to_owned(),
            value: OwnedValue::String("other".to_owned()),
        },
        OwnedKeyValue {
            key: "process.pid".to_owned(),
            value: OwnedValue::Int(4300),
        },
        OwnedKeyValue {
            key: "tags".to_owned(),
            value: OwnedValue::Array(vec![OwnedValue::Bool(true), OwnedValue::Double(0.5)]),
        },
        OwnedKeyValue {
            key: "nested".to_owned(),
            value: OwnedValue::KvList(vec![OwnedKeyValue {
                key: "raw".to_owned(),
                value: OwnedValue::Bytes(vec![1, 2]),
            }]),
        },
    ];
    let one = round_trip(std::slice::from_ref(&a));
    let both = round_trip(&[a, b]);
    let d = check_dictionary(&both);
    // Everything of the second is the first's again: no table grew but by nothing.
    let one_d = one.dictionary.as_ref().unwrap();
    assert_eq!(d.mapping_table.len(), one_d.mapping_table.len());
    assert_eq!(d.location_table.len(), one_d.location_table.len());
    assert_eq!(d.stack_table.len(), one_d.stack_table.len());
    assert_eq!(d.link_table.len(), one_d.link_table.len());
    assert_eq!(d.attribute_table.len(), one_d.attribute_table.len());
    assert_eq!(both.resource_profiles.len(), 2);
    let [first, second] = [&both.resource_profiles[0], &both.resource_profiles[1]];
    assert_eq!(
        first.scope_profiles[0].profiles[0].samples,
        second.scope_profiles[0].profiles[0].samples
    );
    assert_ne!(
        first.scope_profiles[0].profiles[0].profile_id,
        second.scope_profiles[0].profiles[0].profile_id
    );
    // The second's resource as it is typed; its own process.pid kept.
    let resource = &second.resource.as_ref().unwrap().attributes;
    let get = |key: &str| {
        resource
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
    };
    assert_eq!(get("process.pid").unwrap(), int(4300));
    assert_eq!(
        resource.iter().filter(|kv| kv.key == "process.pid").count(),
        1
    );
    use any_value::Value as V;
    match get("tags").unwrap().value {
        Some(V::ArrayValue(a)) => assert_eq!(
            a.values.iter().map(|v| v.value.clone()).collect::<Vec<_>>(),
            [Some(V::BoolValue(true)), Some(V::DoubleValue(0.5))]
        ),
        other => panic!("{other:?}"),
    }
    match get("nested").unwrap().value {
        Some(V::KvlistValue(l)) => {
            assert_eq!(l.values[0].key, "raw");
            assert_eq!(
                l.values[0].value.as_ref().unwrap().value,
                Some(V::BytesValue(vec![1, 2]))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn odd_profiles_stay_well_formed() {
    let mut p = example();
    // Text-only resource (a profile built by hand), ids that are not hex, an entry that
    // points past the stacks and label sets, and no entries at all in another.
    p.resource_attributes.clear();
    p.label_sets[0].labels[0].1 = "not hex".to_owned();
    // A record that repeats a key, and one named as the thread's id.
    p.label_sets[0]
        .labels
        .push(("http.route".to_owned(), "/again".to_owned()));
    p.label_sets[0]
        .labels
        .insert(2, ("thread.id".to_owned(), "not a number".to_owned()));
    p.entries.push(Entry {
        stack: Some(99),
        labels: 99,
        samples: u64::MAX,
        nanos: 1,
        off_cpu_nanos: 0,
    });
    let mut empty = example();
    empty.entries.clear();
    let request = round_trip(&[p, empty]);
    let d = check_dictionary(&request);
    let first = &request.resource_profiles[0];
    let resource = &first.resource.as_ref().unwrap().attributes;
    assert_eq!(resource[0].key, "service.name");
    assert_eq!(
        text(resource[0].value.as_ref().unwrap()),
        Some("checkout <&> \"svc\"")
    );
    let samples = &first.scope_profiles[0].profiles[0].samples;
    assert_eq!(
        samples[0].link_index, 0,
        "a trace id that is not hex: no link"
    );
    // Each key once, its first value.
    let attrs = attributes(d, &samples[0]);
    let keys: Vec<&str> = attrs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["thread.id", "http.route", "thread.name"]);
    assert_eq!(text(&attrs[0].1), Some("not a number"));
    assert_eq!(text(&attrs[1].1), Some("/cart"));
    let last = samples.last().unwrap();
    assert_eq!((last.stack_index, last.link_index), (0, 0));
    assert!(last.attribute_indices.is_empty());
    assert_eq!(last.values, [i64::MAX]);
    assert!(d.stack_table.len() > 1);
    assert!(request.resource_profiles[1].scope_profiles[0].profiles[0]
        .samples
        .is_empty());
}

#[test]
fn python_frames_carry_their_file_start_line_and_kind() {
    let mut p = example();
    p.locations.push(crate::profile::Location {
        mapping: None,
        address: 0x7f00_1000,
        symbols: vec![crate::Symbol {
            name: "py_leaf_hot".to_owned(),
            file: Some("/srv/service.py".to_owned()),
            line: Some(31),
        }],
        unknown: "py_leaf_hot".to_owned(),
        kind: crate::FrameKind::Python { start_line: 28 },
    });
    let python = p.locations.len() - 1;
    p.stacks[0].insert(0, python);
    let request = round_trip(&[p.clone()]);
    let d = check_dictionary(&request);
    let string = |i: i32| d.string_table[i as usize].as_str();
    let function = d
        .function_table
        .iter()
        .find(|f| string(f.name_strindex) == "py_leaf_hot")
        .expect("the Python function");
    assert_eq!(string(function.filename_strindex), "/srv/service.py");
    assert_eq!(function.start_line, 28);
    let location = d
        .location_table
        .iter()
        .find(|l| l.lines.iter().any(|line| line.line == 31))
        .expect("the Python location, with its line");
    let kinds: Vec<&str> = location
        .attribute_indices
        .iter()
        .filter_map(|&i| text(d.attribute_table[i as usize].value.as_ref()?))
        .collect();
    assert_eq!(kinds, ["cpython"]);
    // Native frames stay native.
    assert!(d
        .attribute_table
        .iter()
        .any(|a| a.value.as_ref().and_then(text) == Some("native")));
    // The folded text and the flame graph name it, with its line.
    let folded = p.folded(&crate::FoldedOptions::default());
    assert!(
        folded
            .keys()
            .any(|l| l.ends_with("py_leaf_hot (service.py:31)")),
        "{folded:?}"
    );
    let mut svg = Vec::new();
    p.write_svg(&crate::FoldedOptions::default(), &mut svg)
        .expect("an SVG");
    assert!(String::from_utf8_lossy(&svg).contains("py_leaf_hot"));
}

/// A profile of off-CPU time too: two `Profile`s per process, CPU time then off-CPU
/// time, each with the entries that have some of it, in nanoseconds.
#[test]
fn off_cpu_time_is_a_profile_of_its_own() {
    let mut p = example();
    p.off_cpu = true;
    // Entry 1 waited only; entry 2 ran only.
    p.entries[0].off_cpu_nanos = 5_000;
    p.entries[1].nanos = 0;
    p.entries[1].off_cpu_nanos = 7_000;
    let request = round_trip(&[p]);
    let d = check_dictionary(&request);
    let profiles = &request.resource_profiles[0].scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2);
    let s = |i: i32| d.string_table[i as usize].as_str();
    let kind = |v: &Option<otlp::ValueType>| {
        let v = v.as_ref().unwrap();
        (s(v.type_strindex), s(v.unit_strindex))
    };
    assert_eq!(kind(&profiles[0].sample_type), ("cpu", "nanoseconds"));
    assert_eq!(kind(&profiles[1].sample_type), ("off_cpu", "nanoseconds"));
    let values = |p: &otlp::Profile| p.samples.iter().map(|s| s.values[0]).collect::<Vec<_>>();
    assert_eq!(values(&profiles[0]), [30_000_000, 10_000_000, 40_000_000]);
    assert_eq!(values(&profiles[1]), [5_000, 7_000]);
    // The same stack and labels in both: one dictionary entry each.
    assert_eq!(
        profiles[0].samples[0].stack_index,
        profiles[1].samples[0].stack_index
    );
    assert_ne!(profiles[0].profile_id, profiles[1].profile_id);
}
