//! Encoding owned attributes into the `ProcessContext` payload through the codec.
//!
//! The codec encodes from borrowed values whose arrays and key-value lists are slices of
//! further borrowed values. Those slices are built one nesting level at a time, deepest
//! first, each level borrowing the one below it: no arena, no `unsafe`.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use otel_ctx_codec::header::MAX_PAYLOAD_SIZE;
use otel_ctx_codec::proto::{AnyValue, DecodeError, KeyValue, Limits, ProcessContext};

use super::value::{Attribute, Attributes, Value};
use super::Error;

/// The values at one nesting depth, in the order their parents list them: first the
/// elements of arrays, then the entries of key-value lists (and of the top level).
#[derive(Default)]
struct Level<'v> {
    elements: Vec<&'v Value>,
    entries: Vec<&'v Attribute>,
}

impl<'v> Level<'v> {
    fn values(&self) -> impl Iterator<Item = &'v Value> + '_ {
        self.elements
            .iter()
            .copied()
            .chain(self.entries.iter().map(|a| &a.value))
    }

    /// The children of this level's arrays and key-value lists, in the same order.
    fn children(&self) -> Self {
        let mut next = Self::default();
        for value in self.values() {
            match value {
                Value::Array(values) => next.elements.extend(values),
                Value::KvList(entries) => next.entries.extend(entries),
                _ => {}
            }
        }
        next
    }

    fn is_empty(&self) -> bool {
        self.elements.is_empty() && self.entries.is_empty()
    }
}

/// Encodes `resource` (field 1) and `attributes` (field 2) into a new heap buffer, after
/// checking that readers with default [`Limits`] accept them (size, depth and number of
/// attributes; every string is UTF-8 by construction).
pub(crate) fn encode_payload(
    resource: &Attributes,
    attributes: &Attributes,
) -> Result<Box<[u8]>, Error> {
    let limits = Limits::default();
    let mut levels = vec![Level {
        elements: Vec::new(),
        entries: resource.iter().chain(attributes.iter()).collect(),
    }];
    while let Some(last) = levels.last() {
        let next = last.children();
        if next.is_empty() {
            break;
        }
        // Level `i` holds values at depth `i + 1`, as readers count it.
        if levels.len() >= limits.max_depth {
            return Err(Error::Unreadable(DecodeError::TooDeep {
                limit: limits.max_depth,
            }));
        }
        levels.push(next);
    }
    // Readers count every key-value pair and array element, at any depth: exactly the
    // items of all levels.
    let count: usize = levels
        .iter()
        .map(|l| l.elements.len() + l.entries.len())
        .sum();
    if count > limits.max_attributes {
        return Err(Error::Unreadable(DecodeError::TooManyAttributes {
            limit: limits.max_attributes,
        }));
    }
    let resource_len = resource.len();
    lower(&levels, &mut |_, entries| {
        let (resource, attributes) = entries.split_at(resource_len);
        encode_context(&ProcessContext {
            resource,
            attributes,
        })
    })
}

fn encode_context(context: &ProcessContext<'_>) -> Result<Box<[u8]>, Error> {
    let size = context.encoded_len();
    if size > MAX_PAYLOAD_SIZE as usize {
        return Err(Error::PayloadTooLarge {
            size,
            limit: MAX_PAYLOAD_SIZE,
        });
    }
    let mut payload = vec![0u8; size].into_boxed_slice();
    context.encode(&mut payload)?;
    Ok(payload)
}

/// Lowers `levels[0]` into borrowed codec values and hands them to `k`, after lowering
/// every deeper level the same way.
fn lower<R>(levels: &[Level<'_>], k: &mut dyn FnMut(&[AnyValue<'_>], &[KeyValue<'_>]) -> R) -> R {
    let Some((level, deeper)) = levels.split_first() else {
        return k(&[], &[]);
    };
    lower(deeper, &mut |below_elements, below_entries| {
        let mut cursor = Cursor {
            elements: below_elements,
            entries: below_entries,
        };
        let elements: Vec<AnyValue<'_>> = level
            .elements
            .iter()
            .map(|v| cursor.lower_value(v))
            .collect();
        let entries: Vec<KeyValue<'_>> = level
            .entries
            .iter()
            .map(|a| KeyValue {
                key: &a.key,
                value: cursor.lower_value(&a.value),
            })
            .collect();
        k(&elements, &entries)
    })
}

/// The not yet claimed part of the level below, claimed by each array and key-value list
/// in the order [`Level::children`] listed their children.
struct Cursor<'a> {
    elements: &'a [AnyValue<'a>],
    entries: &'a [KeyValue<'a>],
}

impl<'a> Cursor<'a> {
    fn lower_value(&mut self, value: &'a Value) -> AnyValue<'a> {
        match value {
            Value::String(s) => AnyValue::String(s),
            Value::Bool(b) => AnyValue::Bool(*b),
            Value::Int(i) => AnyValue::Int(*i),
            Value::Double(d) => AnyValue::Double(*d),
            Value::Bytes(b) => AnyValue::Bytes(b),
            // The level below was built from exactly these children in this order, so
            // the split points are always in range.
            Value::Array(values) => {
                let (mine, rest) = self.elements.split_at(values.len());
                self.elements = rest;
                AnyValue::Array(mine)
            }
            Value::KvList(entries) => {
                let (mine, rest) = self.entries.split_at(entries.len());
                self.entries = rest;
                AnyValue::KvList(mine)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_codec::proto::{AnyValueView, ProcessContextView};

    fn nested(depth: usize) -> Value {
        let mut value = Value::Array(Vec::new());
        for _ in 1..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn nested_values_round_trip() {
        let resource: Attributes = [
            ("s", Value::from("text")),
            (
                "a",
                Value::Array(vec![
                    Value::Int(1),
                    Value::KvList(vec![Attribute::new("inner", vec![Value::Bool(true)])]),
                    Value::string_array(["x", "y"]),
                ]),
            ),
            (
                "m",
                Value::KvList(vec![
                    Attribute::new("d", 2.5),
                    Attribute::new("b", vec![0u8, 255]),
                ]),
            ),
        ]
        .into_iter()
        .collect();
        let extra = Attributes::new().with("e", Value::Array(vec![Value::Array(vec![])]));
        let payload = encode_payload(&resource, &extra).unwrap();
        let view = ProcessContextView::decode(&payload, &Limits::default()).unwrap();
        let keys: Vec<&str> = view.resource().map(|kv| kv.key).collect();
        assert_eq!(keys, ["s", "a", "m"]);
        let Some(AnyValueView::Array(a)) = view.resource_value("a") else {
            panic!("a is not an array")
        };
        let items: Vec<AnyValueView<'_>> = a.iter().collect();
        assert_eq!(items[0], AnyValueView::Int(1));
        let AnyValueView::KvList(kv) = items[1] else {
            panic!("a[1] is not a kvlist")
        };
        let inner: Vec<_> = kv.iter().collect();
        assert_eq!(inner[0].key, "inner");
        assert!(inner[0].value == AnyValue::Array(&[AnyValue::Bool(true)]));
        assert!(items[2] == AnyValue::StringArray(&["x", "y"]));
        let Some(AnyValueView::KvList(m)) = view.resource_value("m") else {
            panic!("m is not a kvlist")
        };
        let m: Vec<_> = m.iter().collect();
        assert_eq!(m[0].value, AnyValueView::Double(2.5));
        assert_eq!(m[1].value, AnyValueView::Bytes(&[0, 255]));
        assert!(view.attribute_value("e").unwrap() == AnyValue::Array(&[AnyValue::Array(&[])]));
    }

    #[test]
    fn depth_limit_matches_readers() {
        let limit = Limits::default().max_depth;
        let ok = Attributes::new().with("k", nested(limit));
        assert!(encode_payload(&ok, &Attributes::new()).is_ok());
        let deep = Attributes::new().with("k", nested(limit + 1));
        assert_eq!(
            encode_payload(&deep, &Attributes::new()),
            Err(Error::Unreadable(DecodeError::TooDeep { limit }))
        );
    }

    #[test]
    fn size_and_count_limits() {
        let big = Attributes::new().with("k", Value::Bytes(vec![7; MAX_PAYLOAD_SIZE as usize]));
        assert!(matches!(
            encode_payload(&big, &Attributes::new()),
            Err(Error::PayloadTooLarge {
                limit: MAX_PAYLOAD_SIZE,
                ..
            })
        ));
        // The attribute itself counts, as do its elements: `limit - 1` elements fit.
        let limit = Limits::default().max_attributes;
        let wide = |n| Attributes::new().with("k", Value::Array(vec![Value::Int(0); n]));
        let payload = encode_payload(&wide(limit - 1), &Attributes::new()).unwrap();
        assert!(ProcessContextView::decode(&payload, &Limits::default()).is_ok());
        assert_eq!(
            encode_payload(&wide(limit), &Attributes::new()),
            Err(Error::Unreadable(DecodeError::TooManyAttributes { limit }))
        );
    }
}
