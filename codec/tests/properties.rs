//! Properties of the codec over random inputs:
//! - encoding then decoding is the identity, for process contexts (every `AnyValue`
//!   kind, nested a few levels, random UTF-8 keys), the reference data, headers and
//!   records (random ids, flags, up to 20 attributes of up to 255 bytes, key map lengths);
//! - with the `alloc` feature, the owned model encodes to the same bytes as the borrowed
//!   one, and encoding an owned context then copying its decoded view is the identity
//!   (`OwnedValue::Empty` included);
//! - decoding arbitrary bytes, or damaged valid payloads, never panics, and whatever the
//!   payload decoder accepts stays within its limits;
//! - the attrs-data and record encoders never leave a partial entry: on error the buffer
//!   is unchanged.

use std::collections::BTreeMap;

use otel_ctx_codec::attrs::{encode_entry, AttrsError, AttrsIter, AttrsWriter, ResolvedAttrs};
use otel_ctx_codec::header::{HeaderError, ProcessContextHeader, SIGNATURE, VERSION};
use otel_ctx_codec::proto::{
    AnyValue, AnyValueView, EncodeError, KeyValue, KeyValueView, Limits, ProcessContext,
    ProcessContextView,
};
use otel_ctx_codec::record::{encode_record, RecordError, RecordView, RECORD_HEADER_SIZE};
use otel_ctx_codec::threadlocal::{
    reference_data, ThreadlocalError, ThreadlocalView, MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV,
};
use proptest::collection::vec;
use proptest::prelude::*;
use zerocopy::IntoBytes;

/// An owned `AnyValue`, which proptest can generate and shrink.
#[derive(Clone, Debug)]
enum Value {
    String(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(Vec<Value>),
    KvList(Vec<(String, Value)>),
    StringArray(Vec<String>),
}

/// Random UTF-8, any scalar value (controls, NUL, astral planes included).
fn text() -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(Value::String),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        // Every f64: NaNs, infinities, subnormals and -0.0 included.
        any::<f64>().prop_map(Value::Double),
        vec(any::<u8>(), 0..24).prop_map(Value::Bytes),
        vec(text(), 0..4).prop_map(Value::StringArray),
    ];
    // Up to 3 levels of arrays and kvlists under a top-level value: depth 4 at most.
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec((text(), inner), 0..6).prop_map(Value::KvList),
        ]
    })
}

fn key_values() -> impl Strategy<Value = Vec<(String, Value)>> {
    vec((text(), value()), 0..8)
}

// The borrowed encoder input is a tree of slices; the test leaks each case's few
// kilobytes to give them the lifetime the tree needs.
fn borrow(v: &Value) -> AnyValue<'static> {
    match v {
        Value::String(s) => AnyValue::String(Box::leak(s.clone().into_boxed_str())),
        Value::Bool(b) => AnyValue::Bool(*b),
        Value::Int(i) => AnyValue::Int(*i),
        Value::Double(d) => AnyValue::Double(*d),
        Value::Bytes(b) => AnyValue::Bytes(Box::leak(b.clone().into_boxed_slice())),
        Value::Array(a) => AnyValue::Array(Box::leak(a.iter().map(borrow).collect())),
        Value::KvList(kvs) => AnyValue::KvList(borrow_kvs(kvs)),
        Value::StringArray(names) => AnyValue::StringArray(Box::leak(
            names
                .iter()
                .map(|s| &*Box::leak(s.clone().into_boxed_str()))
                .collect(),
        )),
    }
}

fn borrow_kvs(kvs: &[(String, Value)]) -> &'static [KeyValue<'static>] {
    Box::leak(
        kvs.iter()
            .map(|(k, v)| KeyValue {
                key: Box::leak(k.clone().into_boxed_str()),
                value: borrow(v),
            })
            .collect(),
    )
}

/// No payload-size bound: the property is about the encoding, not the reader's limit.
fn roomy() -> Limits {
    Limits {
        max_payload_size: usize::MAX,
        ..Limits::default()
    }
}

/// Walks everything a view hands out; returns (attributes and elements, deepest value).
/// `depth` is at least 1.
fn walk_value(v: &AnyValueView<'_>, depth: usize) -> (usize, usize) {
    match v {
        AnyValueView::Array(a) => a.iter().fold((0, depth), |(n, d), e| {
            let (en, ed) = walk_value(&e, depth + 1);
            (n + 1 + en, d.max(ed))
        }),
        AnyValueView::KvList(l) => l.iter().fold((0, depth), |(n, d), kv| {
            let (en, ed) = walk_kv(&kv, depth + 1);
            (n + en, d.max(ed))
        }),
        // A KeyValue without a value reads as Empty, though no value was there to be at
        // this depth: count it at its parent's depth.
        AnyValueView::Empty => (0, depth - 1),
        _ => (0, depth),
    }
}

fn walk_kv(kv: &KeyValueView<'_>, depth: usize) -> (usize, usize) {
    let (n, d) = walk_value(&kv.value, depth);
    (n + 1, d)
}

fn walk(view: &ProcessContextView<'_>) -> (usize, usize) {
    view.resource()
        .chain(view.attributes())
        .fold((0, 0), |(n, d), kv| {
            let (kn, kd) = walk_kv(&kv, 1);
            (n + kn, d.max(kd))
        })
}

/// The reader's view of attrs-data, written independently of the codec: every complete
/// entry, then the last value per key inside the key map.
fn model_resolve(attrs: &[(u8, Vec<u8>)], key_map_len: usize) -> BTreeMap<u8, Vec<u8>> {
    attrs
        .iter()
        .filter(|(k, _)| usize::from(*k) < key_map_len)
        .cloned()
        .collect()
}

fn model_entries(attrs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in attrs {
        out.push(*k);
        out.push(v.len() as u8);
        out.extend_from_slice(v);
    }
    out
}

proptest! {
    #[test]
    fn process_context_round_trips(resource in key_values(), attributes in key_values()) {
        let resource = borrow_kvs(&resource);
        let attributes = borrow_kvs(&attributes);
        let ctx = ProcessContext { resource, attributes };
        let mut buf = vec![0u8; ctx.encoded_len()];
        let n = ctx.encode(&mut buf);
        prop_assert_eq!(n, Ok(buf.len()));
        let view = ProcessContextView::decode(&buf, &roomy());
        prop_assert!(view.is_ok(), "{:?}", view);
        let view = view.unwrap();
        prop_assert!(view.resource().eq(resource.iter().copied()));
        prop_assert!(view.attributes().eq(attributes.iter().copied()));
        #[cfg(feature = "alloc")]
        {
            let owned = owned::copy(&ctx);
            let mut owned_buf = vec![0u8; owned.encoded_len()];
            prop_assert_eq!(owned.encode(&mut owned_buf), Ok(owned_buf.len()));
            prop_assert_eq!(&owned_buf, &buf, "owned and borrowed encodings differ");
        }
        if let Some(last) = buf.len().checked_sub(1) {
            prop_assert_eq!(
                ctx.encode(&mut buf[..last]),
                Err(EncodeError::BufferTooSmall { needed: last + 1, available: last })
            );
        }
    }

    #[test]
    fn reference_data_round_trips(names in vec(text(), 0..=MAX_KEY_MAP_LEN + 2)) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let extra = reference_data(SCHEMA_TLSDESC_V1_DEV, &names);
        let ctx = ProcessContext { resource: &[], attributes: &extra };
        let mut buf = vec![0u8; ctx.encoded_len()];
        prop_assert_eq!(ctx.encode(&mut buf), Ok(buf.len()));
        let view = ProcessContextView::decode(&buf, &roomy()).unwrap();
        match ThreadlocalView::from_context(&view) {
            Ok(tl) => {
                prop_assert!(names.len() <= MAX_KEY_MAP_LEN);
                prop_assert_eq!(tl.schema_version, Some(SCHEMA_TLSDESC_V1_DEV));
                prop_assert_eq!(tl.key_map_len(), names.len());
                let map = tl.key_map.unwrap();
                prop_assert!(map.iter().eq(names.iter().copied()));
                for (i, name) in names.iter().enumerate() {
                    prop_assert_eq!(map.get(i as u8), Some(*name));
                }
            }
            Err(e) => {
                prop_assert!(names.len() > MAX_KEY_MAP_LEN);
                prop_assert_eq!(e, ThreadlocalError::KeyMapTooLong { len: names.len() });
            }
        }
    }

    #[test]
    fn header_round_trips_and_checks_in_order(
        signature in prop_oneof![Just(SIGNATURE), any::<[u8; 8]>()],
        version in prop_oneof![Just(VERSION), any::<u32>()],
        payload_size in prop_oneof![Just(0u32), 1u32..=70_000, any::<u32>()],
        monotonic_published_at_ns in prop_oneof![Just(0u64), any::<u64>()],
        payload in any::<u64>(),
        max in prop_oneof![Just(65_536u32), any::<u32>()],
        extra in vec(any::<u8>(), 0..8),
    ) {
        let h = ProcessContextHeader {
            signature, version, payload_size, monotonic_published_at_ns, payload,
        };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&extra);
        prop_assert_eq!(ProcessContextHeader::read(&bytes), Ok(h));
        let want = if signature != SIGNATURE {
            Err(HeaderError::BadSignature(signature))
        } else if version != VERSION {
            Err(HeaderError::UnsupportedVersion(version))
        } else if monotonic_published_at_ns == 0 {
            Err(HeaderError::BeingUpdated)
        } else if payload_size == 0 {
            Err(HeaderError::EmptyPayload)
        } else if payload_size > max {
            Err(HeaderError::PayloadTooLarge { size: payload_size, limit: max })
        } else {
            Ok(h)
        };
        prop_assert_eq!(ProcessContextHeader::parse(&bytes, max), want);
        let cut = bytes.len().min(31);
        prop_assert_eq!(
            ProcessContextHeader::parse(&bytes[..cut], max),
            Err(HeaderError::Truncated { len: cut })
        );
    }

    #[test]
    fn record_round_trips(
        trace_id in any::<[u8; 16]>(),
        span_id in any::<[u8; 8]>(),
        trace_flags in any::<u8>(),
        attrs in vec((any::<u8>(), vec(any::<u8>(), 0..=255)), 0..=20),
        key_map_len in prop_oneof![Just(0usize), 0usize..=256, Just(256)],
    ) {
        let borrowed: Vec<(u8, &[u8])> = attrs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let attrs_data = model_entries(&attrs);
        let size = RECORD_HEADER_SIZE + attrs_data.len();
        let mut buf = vec![0x5au8; size + 3];
        prop_assert_eq!(
            encode_record(&mut buf, trace_id, span_id, trace_flags, &borrowed),
            Ok(size)
        );
        prop_assert!(buf[size..].iter().all(|&b| b == 0x5a), "wrote past the record");
        let r = RecordView::parse(&buf, size).unwrap();
        prop_assert_eq!(r.header.trace_id, trace_id);
        prop_assert_eq!(r.header.span_id, span_id);
        prop_assert!(r.header.is_valid());
        prop_assert_eq!(r.header.trace_flags, trace_flags);
        prop_assert_eq!(usize::from(r.header.attrs_data_size()), attrs_data.len());
        prop_assert_eq!(r.attrs_data, &attrs_data[..]);
        prop_assert!(r.entries().eq(borrowed.iter().copied()));

        let resolved = r.resolve(key_map_len);
        let model = model_resolve(&attrs, key_map_len);
        prop_assert!(resolved.iter().eq(model.iter().map(|(k, v)| (*k, v.as_slice()))));
        let unknown: Vec<u8> = attrs
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| usize::from(*k) >= key_map_len)
            .collect();
        prop_assert_eq!(resolved.dropped(), unknown.len());
        prop_assert_eq!(resolved.max_unknown_index(), unknown.iter().copied().max());
        prop_assert!(!resolved.incomplete());

        prop_assert_eq!(
            RecordView::parse(&buf, size - 1).map_err(|e| e.kind()),
            Err("record_too_large")
        );
        prop_assert_eq!(
            RecordView::parse(&buf[..size - 1], size).map_err(|e| e.kind()),
            if size > RECORD_HEADER_SIZE { Err("attrs_past_end") } else { Err("truncated") }
        );
    }

    #[test]
    fn record_encoder_leaves_buffer_unchanged_on_error(
        cap in 0usize..700,
        attrs in vec((any::<u8>(), vec(any::<u8>(), 0..300)), 0..6),
        fill in any::<u8>(),
    ) {
        let borrowed: Vec<(u8, &[u8])> = attrs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let mut buf = vec![fill; cap];
        match encode_record(&mut buf, [1; 16], [2; 8], 1, &borrowed) {
            Ok(n) => {
                prop_assert!(attrs.iter().all(|(_, v)| v.len() <= 255));
                prop_assert_eq!(&buf[RECORD_HEADER_SIZE..n], &model_entries(&attrs)[..]);
                prop_assert!(buf[n..].iter().all(|&b| b == fill));
            }
            Err(e) => {
                prop_assert!(buf.iter().all(|&b| b == fill), "{} left a partial record", e);
                let too_long = attrs.iter().any(|(_, v)| v.len() > 255);
                let needed = RECORD_HEADER_SIZE
                    + attrs.iter().map(|(_, v)| 2 + v.len()).sum::<usize>();
                prop_assert!(
                    too_long || needed > cap,
                    "refused a record that fits: {}", e
                );
                if cap < RECORD_HEADER_SIZE {
                    prop_assert_eq!(e, RecordError::NoRoom { available: cap });
                }
            }
        }
    }

    #[test]
    fn attrs_writer_never_writes_a_partial_entry(
        cap in 0usize..700,
        attrs in vec((any::<u8>(), vec(any::<u8>(), 0..300)), 0..12),
    ) {
        const UNTOUCHED: u8 = 0xa5;
        let mut accepted: Vec<(u8, Vec<u8>)> = Vec::new();
        for (key, value) in &attrs {
            // Replay what was accepted, then push one more, so each push is checked on a
            // buffer nobody else wrote to.
            let mut buf = vec![UNTOUCHED; cap];
            let mut w = AttrsWriter::new(&mut buf);
            for (k, v) in &accepted {
                prop_assert_eq!(w.push(*k, v), Ok(()));
            }
            let before = w.len();
            let result = w.push(*key, value);
            let after = w.len();
            match result {
                Ok(()) => {
                    prop_assert!(value.len() <= 255);
                    accepted.push((*key, value.clone()));
                }
                Err(AttrsError::ValueTooLong { len }) => {
                    prop_assert_eq!(len, value.len());
                    prop_assert!(len > 255);
                    prop_assert_eq!(after, before);
                }
                Err(AttrsError::NoRoom { needed, available }) => {
                    prop_assert_eq!(needed, 2 + value.len());
                    prop_assert_eq!(available, cap - before);
                    prop_assert!(needed > available);
                    prop_assert_eq!(after, before);
                }
            }
            let written = model_entries(&accepted);
            prop_assert_eq!(&buf[..written.len()], &written[..]);
            prop_assert!(
                buf[written.len()..].iter().all(|&b| b == UNTOUCHED),
                "a push wrote outside its entry"
            );
        }
    }

    #[test]
    fn encode_entry_leaves_buffer_unchanged_on_error(
        cap in 0usize..300,
        key in any::<u8>(),
        value in vec(any::<u8>(), 0..300),
        fill in any::<u8>(),
    ) {
        let mut buf = vec![fill; cap];
        match encode_entry(&mut buf, key, &value) {
            Ok(n) => {
                prop_assert_eq!(n, 2 + value.len());
                prop_assert_eq!(buf[0], key);
                prop_assert_eq!(usize::from(buf[1]), value.len());
                prop_assert_eq!(&buf[2..n], &value[..]);
                prop_assert!(buf[n..].iter().all(|&b| b == fill));
            }
            Err(_) => prop_assert!(buf.iter().all(|&b| b == fill)),
        }
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(
        bytes in vec(any::<u8>(), 0..400),
        key_map_len in 0usize..300,
        max in 0usize..700,
    ) {
        let _ = ProcessContextHeader::read(&bytes).map(|h| (h.check_identity(), h.validate(1)));
        let _ = ProcessContextHeader::parse(&bytes, max as u32);

        let limits = Limits { max_payload_size: max, max_depth: 3, max_attributes: 10 };
        if let Ok(view) = ProcessContextView::decode(&bytes, &limits) {
            let (count, depth) = walk(&view);
            prop_assert!(count <= limits.max_attributes && depth <= limits.max_depth);
            let _ = ThreadlocalView::from_context(&view)
                .map(|tl| tl.key_map.map(|m| (m.iter().count(), m.get(255))));
        }

        if let Ok(r) = RecordView::parse(&bytes, max) {
            prop_assert_eq!(r.attrs_data.len(), usize::from(r.header.attrs_data_size()));
            prop_assert!(r.header.record_size() <= max.min(bytes.len()));
            let _ = r.resolve(key_map_len).iter().count();
        }

        // attrs-data: complete entries plus the remainder account for every byte, and the
        // resolver agrees with the iterator on incompleteness.
        let mut it = AttrsIter::new(&bytes);
        let consumed: usize = it.by_ref().map(|(_, v)| 2 + v.len()).sum();
        prop_assert_eq!(consumed + it.remainder().len(), bytes.len());
        prop_assert!(it.remainder().len() < 2 || 2 + usize::from(it.remainder()[1]) > it.remainder().len());
        let resolved = ResolvedAttrs::resolve(&bytes, key_map_len);
        prop_assert_eq!(resolved.incomplete(), !it.remainder().is_empty());
        prop_assert!(resolved.len() <= key_map_len.min(256));
    }

    #[test]
    fn damaged_payloads_never_panic(
        resource in key_values(),
        attributes in key_values(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let ctx = ProcessContext {
            resource: borrow_kvs(&resource),
            attributes: borrow_kvs(&attributes),
        };
        let mut buf = vec![0u8; ctx.encoded_len()];
        ctx.encode(&mut buf).unwrap();
        for (at, byte) in &flips {
            let i = at.index(buf.len());
            buf[i] = *byte;
        }
        let end = cut.index(buf.len() + 1);
        let limits = Limits { max_payload_size: usize::MAX, max_depth: 3, max_attributes: 40 };
        for bytes in [&buf[..], &buf[..end]] {
            if let Ok(view) = ProcessContextView::decode(bytes, &limits) {
                let (count, depth) = walk(&view);
                prop_assert!(count <= limits.max_attributes && depth <= limits.max_depth);
                let _ = ThreadlocalView::from_context(&view);
            }
        }
    }
}

/// The owned model: its own generator, which also makes `Empty` values.
#[cfg(feature = "alloc")]
mod owned {
    use otel_ctx_codec::owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue};
    use otel_ctx_codec::proto::{EncodeError, ProcessContext, ProcessContextView};
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::{roomy, text};

    /// The owned copy of a borrowed context to encode.
    pub fn copy(ctx: &ProcessContext<'_>) -> OwnedProcessContext {
        OwnedProcessContext {
            resource: ctx.resource.iter().map(|&kv| kv.into()).collect(),
            attributes: ctx.attributes.iter().map(|&kv| kv.into()).collect(),
        }
    }

    fn value() -> impl Strategy<Value = OwnedValue> {
        let leaf = prop_oneof![
            Just(OwnedValue::Empty),
            text().prop_map(OwnedValue::String),
            any::<bool>().prop_map(OwnedValue::Bool),
            any::<i64>().prop_map(OwnedValue::Int),
            // Every f64: NaNs, infinities, subnormals and -0.0 included.
            any::<f64>().prop_map(OwnedValue::Double),
            vec(any::<u8>(), 0..24).prop_map(OwnedValue::Bytes),
        ];
        // Up to 3 levels of arrays and kvlists under a top-level value: depth 4 at most.
        leaf.prop_recursive(3, 48, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(OwnedValue::Array),
                vec(
                    (text(), inner).prop_map(|(key, value)| OwnedKeyValue { key, value }),
                    0..6
                )
                .prop_map(OwnedValue::KvList),
            ]
        })
    }

    fn key_values() -> impl Strategy<Value = Vec<OwnedKeyValue>> {
        vec(
            (text(), value()).prop_map(|(key, value)| OwnedKeyValue { key, value }),
            0..8,
        )
    }

    /// Equality with doubles compared by their bits, so that a NaN equals itself and
    /// -0.0 differs from 0.0.
    fn same_value(a: &OwnedValue, b: &OwnedValue) -> bool {
        match (a, b) {
            (OwnedValue::Double(a), OwnedValue::Double(b)) => a.to_bits() == b.to_bits(),
            (OwnedValue::Array(a), OwnedValue::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
            }
            (OwnedValue::KvList(a), OwnedValue::KvList(b)) => same_list(a, b),
            (a, b) => a == b,
        }
    }

    fn same_list(a: &[OwnedKeyValue], b: &[OwnedKeyValue]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(a, b)| a.key == b.key && same_value(&a.value, &b.value))
    }

    proptest! {
        #[test]
        fn owned_context_round_trips(resource in key_values(), attributes in key_values()) {
            let ctx = OwnedProcessContext { resource, attributes };
            let mut buf = vec![0u8; ctx.encoded_len()];
            prop_assert_eq!(ctx.encode(&mut buf), Ok(buf.len()));
            let view = ProcessContextView::decode(&buf, &roomy());
            prop_assert!(view.is_ok(), "{:?}", view);
            let back = OwnedProcessContext::from_view(&view.unwrap());
            prop_assert!(
                same_list(&back.resource, &ctx.resource)
                    && same_list(&back.attributes, &ctx.attributes),
                "decoded {:?}\nfrom {:?}", back, ctx
            );
            if let Some(last) = buf.len().checked_sub(1) {
                prop_assert_eq!(
                    ctx.encode(&mut buf[..last]),
                    Err(EncodeError::BufferTooSmall { needed: last + 1, available: last })
                );
            }
        }
    }
}
