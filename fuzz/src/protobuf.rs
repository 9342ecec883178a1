//! `protobuf_decode`: the payload decoder on arbitrary bytes.
//!
//! The input is the payload itself. It is decoded twice, with the default [`Limits`]
//! and with tight ones, and the two outcomes must agree: tighter limits accept nothing
//! the default ones refuse, and a structural error is the same under both. A payload
//! that decodes is walked completely (resource, extra attributes, every nested array
//! and kvlist, the `threadlocal.*` reference data), and must stay inside the limits it
//! was decoded with. Then its owned copy is re-encoded and decoded again: the second
//! view must hold the same values, and encoding it once more must give the same bytes.

use bumpalo::Bump;
use otel_ctx_codec::proto::{
    AnyValue, AnyValueView, DecodeError, EncodeError, KeyValue, KeyValueView, Limits,
    ProcessContext, ProcessContextView,
};
use otel_ctx_codec::threadlocal::{
    ThreadlocalError, ThreadlocalView, ATTRIBUTE_KEY_MAP_KEY, MAX_KEY_MAP_LEN, SCHEMA_VERSION_KEY,
};
use otel_ctx_reader::process::{OwnedKeyValue, OwnedProcessContext, OwnedValue};

/// Limits small enough that fuzzed inputs reach every one of them.
const TIGHT: Limits = Limits {
    max_payload_size: 1024,
    max_depth: 3,
    max_attributes: 10,
};

/// Most keys looked up by name per input: each lookup scans the whole payload.
const MAX_LOOKUPS: usize = 8;

/// Runs the decoder on `data` and checks everything described in the module docs.
pub fn check(data: &[u8]) {
    let default = ProcessContextView::decode(data, &Limits::default());
    let tight = ProcessContextView::decode(data, &TIGHT);
    match (&tight, &default) {
        (Ok(_), Ok(_)) => {}
        (Ok(_), Err(e)) => panic!("tight limits accept what the default ones refuse: {e}"),
        // The walks are the same until one of them reaches a limit, and the tight limits
        // are reached first: a structural error found under them is found under both.
        (Err(t), _) if !is_limit(t) => assert_eq!(default, tight),
        (Err(_), _) => {}
    }
    if let Ok(view) = tight {
        check_view(&view, &TIGHT);
    }
    if let Ok(view) = default {
        check_view(&view, &Limits::default());
    }
}

fn is_limit(e: &DecodeError) -> bool {
    matches!(
        e,
        DecodeError::PayloadTooLarge { .. }
            | DecodeError::TooDeep { .. }
            | DecodeError::TooManyAttributes { .. }
    )
}

fn check_view(view: &ProcessContextView<'_>, limits: &Limits) {
    let (count, depth) = walk(view);
    assert!(
        count <= limits.max_attributes,
        "{count} attributes and elements, limit {}",
        limits.max_attributes
    );
    assert!(
        depth <= limits.max_depth,
        "depth {depth}, limit {}",
        limits.max_depth
    );

    let owned = OwnedProcessContext::from_view(view);
    check_lookups(view, &owned);
    check_threadlocal(view, &owned);
    round_trip(&owned, limits);
}

/// Walks everything the view hands out; returns (key-values and elements, deepest value).
fn walk(view: &ProcessContextView<'_>) -> (usize, usize) {
    view.resource()
        .chain(view.attributes())
        .fold((0, 0), |(n, d), kv| {
            let (kn, kd) = walk_kv(&kv, 1);
            (n + kn, d.max(kd))
        })
}

fn walk_kv(kv: &KeyValueView<'_>, depth: usize) -> (usize, usize) {
    let (n, d) = walk_value(&kv.value, depth);
    (n + 1, d)
}

/// `depth` is the value's own depth (a top-level attribute's value is at 1).
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
        // A key-value without a value field reads as Empty, though nothing was decoded
        // at this depth: it counts at its parent's.
        AnyValueView::Empty => (0, depth - 1),
        AnyValueView::String(_)
        | AnyValueView::Bool(_)
        | AnyValueView::Int(_)
        | AnyValueView::Double(_)
        | AnyValueView::Bytes(_) => (0, depth),
    }
}

/// Lookups by key give the last occurrence, for the first few keys.
fn check_lookups(view: &ProcessContextView<'_>, owned: &OwnedProcessContext) {
    for kv in owned.resource.iter().take(MAX_LOOKUPS) {
        let expected = owned.resource.iter().rev().find(|o| o.key == kv.key);
        let got = view.resource_value(&kv.key).map(OwnedValue::from);
        assert!(same_option(got.as_ref(), expected.map(|o| &o.value)));
    }
    for kv in owned.attributes.iter().take(MAX_LOOKUPS) {
        let expected = owned.attributes.iter().rev().find(|o| o.key == kv.key);
        let got = view.attribute_value(&kv.key).map(OwnedValue::from);
        assert!(same_option(got.as_ref(), expected.map(|o| &o.value)));
    }
}

/// The reference data as the spec defines it, computed from the owned copy.
fn expected_threadlocal(
    owned: &OwnedProcessContext,
) -> Result<(Option<&str>, Option<Vec<&str>>), ThreadlocalError> {
    let last = |key: &str| {
        owned
            .attributes
            .iter()
            .rev()
            .find(|kv| kv.key == key)
            .map(|kv| &kv.value)
    };
    let schema = match last(SCHEMA_VERSION_KEY) {
        None => None,
        Some(OwnedValue::String(s)) => Some(s.as_str()),
        Some(_) => return Err(ThreadlocalError::SchemaVersionNotString),
    };
    let key_map = match last(ATTRIBUTE_KEY_MAP_KEY) {
        None => None,
        Some(OwnedValue::Array(items)) => {
            let mut names = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                match item {
                    OwnedValue::String(s) => names.push(s.as_str()),
                    _ => return Err(ThreadlocalError::KeyMapElementNotString { index }),
                }
            }
            if names.len() > MAX_KEY_MAP_LEN {
                return Err(ThreadlocalError::KeyMapTooLong { len: names.len() });
            }
            Some(names)
        }
        Some(_) => return Err(ThreadlocalError::KeyMapNotArray),
    };
    Ok((schema, key_map))
}

fn check_threadlocal(view: &ProcessContextView<'_>, owned: &OwnedProcessContext) {
    let expected = expected_threadlocal(owned);
    let got = ThreadlocalView::from_context(view);
    match (got, expected) {
        (Err(g), Err(e)) => {
            assert_eq!(g, e);
            assert!(!g.to_string().is_empty() && !g.kind().is_empty());
        }
        (Ok(tl), Ok((schema, names))) => {
            assert_eq!(tl.schema_version, schema);
            assert_eq!(tl.key_map_len(), names.as_ref().map_or(0, Vec::len));
            match (tl.key_map, names) {
                (None, None) => {}
                (Some(map), Some(names)) => {
                    assert_eq!(map.len(), names.len());
                    assert_eq!(map.is_empty(), names.is_empty());
                    assert!(map.iter().eq(names.iter().copied()));
                    for index in 0..=u8::MAX {
                        assert_eq!(map.get(index), names.get(usize::from(index)).copied());
                    }
                }
                (got, expected) => panic!("key map {got:?}, expected {expected:?}"),
            }
        }
        (got, expected) => panic!("threadlocal {got:?}, expected {expected:?}"),
    }
}

/// Values compare by their bits, so that NaN payloads count as equal to themselves.
fn same_value(a: &OwnedValue, b: &OwnedValue) -> bool {
    match (a, b) {
        (OwnedValue::Double(x), OwnedValue::Double(y)) => x.to_bits() == y.to_bits(),
        (OwnedValue::Array(x), OwnedValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (OwnedValue::KvList(x), OwnedValue::KvList(y)) => same_list(x, y),
        (OwnedValue::Double(_), _)
        | (OwnedValue::Array(_), _)
        | (OwnedValue::KvList(_), _)
        | (_, OwnedValue::Double(_))
        | (_, OwnedValue::Array(_))
        | (_, OwnedValue::KvList(_)) => false,
        (a, b) => a == b,
    }
}

fn same_option(a: Option<&OwnedValue>, b: Option<&OwnedValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_value(a, b),
        _ => false,
    }
}

fn same_list(a: &[OwnedKeyValue], b: &[OwnedKeyValue]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.key == b.key && same_value(&a.value, &b.value))
}

/// The encoder's input types have no `AnyValue` without a member: such a value is
/// re-encoded as an empty array, and expected back as one.
fn normalized(v: &OwnedValue) -> OwnedValue {
    match v {
        OwnedValue::Empty => OwnedValue::Array(Vec::new()),
        OwnedValue::Array(items) => OwnedValue::Array(items.iter().map(normalized).collect()),
        OwnedValue::KvList(kvs) => OwnedValue::KvList(normalized_list(kvs)),
        other => other.clone(),
    }
}

fn normalized_list(kvs: &[OwnedKeyValue]) -> Vec<OwnedKeyValue> {
    kvs.iter()
        .map(|kv| OwnedKeyValue {
            key: kv.key.clone(),
            value: normalized(&kv.value),
        })
        .collect()
}

fn borrow_value<'a>(v: &'a OwnedValue, bump: &'a Bump) -> AnyValue<'a> {
    match v {
        OwnedValue::Empty => AnyValue::Array(&[]),
        OwnedValue::String(s) => AnyValue::String(s),
        OwnedValue::Bool(b) => AnyValue::Bool(*b),
        OwnedValue::Int(i) => AnyValue::Int(*i),
        OwnedValue::Double(d) => AnyValue::Double(*d),
        OwnedValue::Bytes(b) => AnyValue::Bytes(b),
        OwnedValue::Array(items) => {
            AnyValue::Array(bump.alloc_slice_fill_iter(items.iter().map(|i| borrow_value(i, bump))))
        }
        OwnedValue::KvList(kvs) => AnyValue::KvList(borrow_list(kvs, bump)),
    }
}

fn borrow_list<'a>(kvs: &'a [OwnedKeyValue], bump: &'a Bump) -> &'a [KeyValue<'a>] {
    bump.alloc_slice_fill_iter(kvs.iter().map(|kv| KeyValue {
        key: &kv.key,
        value: borrow_value(&kv.value, bump),
    }))
}

/// Encodes `ctx` into a buffer of exactly `encoded_len()` bytes.
fn encode(ctx: &OwnedProcessContext) -> Vec<u8> {
    let bump = Bump::new();
    let ctx = ProcessContext {
        resource: borrow_list(&ctx.resource, &bump),
        attributes: borrow_list(&ctx.attributes, &bump),
    };
    let len = ctx.encoded_len();
    let mut buf = vec![0u8; len];
    assert_eq!(ctx.encode(&mut buf), Ok(len));
    if let Some(short) = len.checked_sub(1) {
        assert_eq!(
            ctx.encode(&mut buf[..short]),
            Err(EncodeError::BufferTooSmall {
                needed: len,
                available: short
            })
        );
    }
    buf
}

fn round_trip(owned: &OwnedProcessContext, limits: &Limits) {
    let expected = OwnedProcessContext {
        resource: normalized_list(&owned.resource),
        attributes: normalized_list(&owned.attributes),
    };
    let bytes = encode(&expected);
    // The canonical form has no more key-values and elements than the wire had, and no
    // deeper values, except that a key-value without a value at the deepest level now
    // carries one (an empty array) one level further down.
    let limits = Limits {
        max_payload_size: usize::MAX,
        max_depth: limits.max_depth + 1,
        max_attributes: limits.max_attributes,
    };
    let again = match ProcessContextView::decode(&bytes, &limits) {
        Ok(view) => view,
        Err(e) => panic!("the re-encoded payload does not decode: {e} ({bytes:02x?})"),
    };
    let back = OwnedProcessContext::from_view(&again);
    assert!(
        same_list(&back.resource, &expected.resource),
        "resource {:?} came back as {:?}",
        expected.resource,
        back.resource
    );
    assert!(
        same_list(&back.attributes, &expected.attributes),
        "attributes {:?} came back as {:?}",
        expected.attributes,
        back.attributes
    );
    assert_eq!(encode(&back), bytes, "encoding is not canonical");
}
