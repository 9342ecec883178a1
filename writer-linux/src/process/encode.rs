//! Encoding the resource and extra attributes into the `ProcessContext` payload, after
//! checking that readers will accept it: into a caller's buffer from the codec's borrowed
//! model ([`encode_into`]), or, with `alloc`, into a new heap buffer from its owned model
//! ([`encode_payload`]). Both check the codec's rules ([`ProcessContext::check_limits`],
//! [`OwnedProcessContext::check_limits`]) with the default [`Limits`] readers decode with.

#[cfg(feature = "alloc")]
use alloc::boxed::Box;
#[cfg(feature = "alloc")]
use alloc::vec;

use otel_ctx_codec::header::MAX_PAYLOAD_SIZE;
#[cfg(feature = "alloc")]
use otel_ctx_codec::owned::OwnedProcessContext;
use otel_ctx_codec::proto::{DecodeError, Limits, ProcessContext};

use super::Error;
#[cfg(feature = "alloc")]
use super::{Attributes, Resource};

/// Encodes `context` into the start of `buffer`, after checking that readers with default
/// [`Limits`] accept it (size, depth and number of attributes). Returns the payload's size.
///
/// Fails with [`Error::Encode`] when `buffer` is too small; the buffer may have been
/// written to then, but nothing else was changed.
pub(crate) fn encode_into(context: &ProcessContext<'_>, buffer: &mut [u8]) -> Result<u32, Error> {
    context.check_limits(&Limits::default()).map_err(refused)?;
    let written = context.encode(buffer)?;
    // At most `MAX_PAYLOAD_SIZE`, checked above.
    Ok(written as u32)
}

/// The writer's error for a context the codec's limits refuse: too large is the writer's
/// own error, with the size readers accept; too deep or too many attributes say why readers
/// would refuse it.
fn refused(e: DecodeError) -> Error {
    match e {
        DecodeError::PayloadTooLarge { size, .. } => Error::PayloadTooLarge {
            size,
            limit: MAX_PAYLOAD_SIZE,
        },
        e => Error::Unreadable(e),
    }
}

#[cfg(feature = "alloc")]
/// A payload, and the resource and extra attributes it encodes.
pub(crate) struct Encoded {
    pub payload: Box<[u8]>,
    pub resource: Resource,
    pub attributes: Attributes,
}

/// Encodes `resource` (field 1) and `attributes` (field 2) into a new heap buffer, after
/// checking that readers with default [`Limits`] accept them (size, depth and number of
/// attributes; every string is UTF-8 by construction).
///
/// Both are moved into the codec's [`OwnedProcessContext`] and back out, which copies no
/// key or value.
#[cfg(feature = "alloc")]
pub(crate) fn encode_payload(resource: Resource, attributes: Attributes) -> Result<Encoded, Error> {
    let context = OwnedProcessContext {
        resource: resource.into_attributes().into_vec(),
        attributes: attributes.into_vec(),
    };
    let payload = encode_context(&context)?;
    Ok(Encoded {
        payload,
        resource: Resource::from_attributes(Attributes::from_unique(context.resource)),
        attributes: Attributes::from_unique(context.attributes),
    })
}

#[cfg(feature = "alloc")]
fn encode_context(context: &OwnedProcessContext) -> Result<Box<[u8]>, Error> {
    let size = context.checked_len(&Limits::default()).map_err(refused)?;
    let mut payload = vec![0u8; size].into_boxed_slice();
    context.encode(&mut payload)?;
    Ok(payload)
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use otel_ctx_codec::owned::{OwnedKeyValue, OwnedValue};
    use otel_ctx_codec::proto::{AnyValue, AnyValueView, KeyValue, ProcessContextView};

    fn nested(depth: usize) -> OwnedValue {
        let mut value = OwnedValue::Array(Vec::new());
        for _ in 1..depth {
            value = OwnedValue::Array(vec![value]);
        }
        value
    }

    /// [`encode_payload`]'s payload, after checking that it refuses a context for the
    /// reason a reader refuses it.
    fn encode(resource: Attributes, attributes: Attributes) -> Result<Box<[u8]>, Error> {
        let unchecked = OwnedProcessContext {
            resource: resource.as_slice().to_vec(),
            attributes: attributes.as_slice().to_vec(),
        };
        let result =
            encode_payload(Resource::from_attributes(resource), attributes).map(|e| e.payload);
        // What a reader says of the same context, encoded without the writer's checks.
        let mut bytes = vec![0u8; unchecked.encoded_len()];
        unchecked.encode(&mut bytes).unwrap();
        let roomy = Limits {
            max_payload_size: usize::MAX,
            ..Limits::default()
        };
        match (&result, ProcessContextView::decode(&bytes, &roomy)) {
            (Err(Error::Unreadable(writer)), Err(reader)) => assert_eq!(*writer, reader),
            (Err(Error::Unreadable(writer)), Ok(_)) => panic!("readers accept what {writer}"),
            (_, Err(reader)) => panic!("the writer accepts what readers refuse: {reader}"),
            (_, Ok(_)) => {}
        }
        result
    }

    #[test]
    fn nested_values_round_trip() {
        let resource: Attributes = [
            ("s", OwnedValue::from("text")),
            (
                "a",
                OwnedValue::Array(vec![
                    OwnedValue::Int(1),
                    OwnedValue::KvList(vec![OwnedKeyValue::new(
                        "inner",
                        vec![OwnedValue::Bool(true)],
                    )]),
                    OwnedValue::string_array(["x", "y"]),
                ]),
            ),
            (
                "m",
                OwnedValue::KvList(vec![
                    OwnedKeyValue::new("d", 2.5),
                    OwnedKeyValue::new("b", vec![0u8, 255]),
                ]),
            ),
            ("e", OwnedValue::Empty),
        ]
        .into_iter()
        .collect();
        let extra = Attributes::new().with("e", OwnedValue::Array(vec![OwnedValue::Array(vec![])]));
        let encoded =
            encode_payload(Resource::from_attributes(resource.clone()), extra.clone()).unwrap();
        assert_eq!(encoded.resource.attributes(), &resource);
        assert_eq!(encoded.attributes, extra);
        let view = ProcessContextView::decode(&encoded.payload, &Limits::default()).unwrap();
        let keys: Vec<&str> = view.resource().map(|kv| kv.key).collect();
        assert_eq!(keys, ["s", "a", "m", "e"]);
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
        assert_eq!(view.resource_value("e"), Some(AnyValueView::Empty));
        assert!(view.attribute_value("e").unwrap() == AnyValue::Array(&[AnyValue::Array(&[])]));
    }

    /// The borrowed model is checked as the owned one: a string array's elements count as
    /// attributes, one level deeper than the array.
    #[test]
    fn borrowed_contexts_meet_the_same_limits() {
        let limit = Limits::default().max_attributes;
        let names = vec!["k"; limit];
        let mut buffer = vec![0u8; MAX_PAYLOAD_SIZE as usize];
        for (len, fits) in [(limit - 1, true), (limit, false)] {
            let resource = [KeyValue {
                key: "k",
                value: AnyValue::StringArray(&names[..len]),
            }];
            let context = ProcessContext {
                resource: &resource,
                attributes: &[],
            };
            let owned =
                Attributes::new().with("k", OwnedValue::string_array(names[..len].iter().copied()));
            let heap = encode_payload(Resource::from_attributes(owned), Attributes::new());
            let borrowed = encode_into(&context, &mut buffer);
            assert_eq!(borrowed.is_ok(), fits);
            match (heap, borrowed) {
                (Ok(heap), Ok(size)) => assert_eq!(&buffer[..size as usize], &heap.payload[..]),
                (Err(heap), Err(borrowed)) => assert_eq!(heap, borrowed),
                _ => panic!("the two models disagree for {len} elements"),
            }
        }
        let small = [KeyValue {
            key: "service.name",
            value: AnyValue::String("checkout"),
        }];
        let context = ProcessContext {
            resource: &small,
            attributes: &[],
        };
        assert!(matches!(
            encode_into(&context, &mut [0u8; 4]),
            Err(Error::Encode(_))
        ));
    }

    #[test]
    fn depth_limit_matches_readers() {
        let limit = Limits::default().max_depth;
        let ok = Attributes::new().with("k", nested(limit));
        assert!(encode(ok, Attributes::new()).is_ok());
        let deep = Attributes::new().with("k", nested(limit + 1));
        assert_eq!(
            encode(deep, Attributes::new()),
            Err(Error::Unreadable(DecodeError::TooDeep { limit }))
        );
        // In a kvlist, and in the extra attributes, as deep as in an array.
        let deep_kvlist = (1..=limit).fold(OwnedValue::Int(0), |value, _| {
            OwnedValue::KvList(vec![OwnedKeyValue::new("k", value)])
        });
        assert_eq!(
            encode(Attributes::new(), Attributes::new().with("k", deep_kvlist)),
            Err(Error::Unreadable(DecodeError::TooDeep { limit }))
        );
    }

    #[test]
    fn size_and_count_limits() {
        let big =
            Attributes::new().with("k", OwnedValue::Bytes(vec![7; MAX_PAYLOAD_SIZE as usize]));
        assert!(matches!(
            encode(big, Attributes::new()),
            Err(Error::PayloadTooLarge {
                limit: MAX_PAYLOAD_SIZE,
                ..
            })
        ));
        // The attribute itself counts, as do its elements: `limit - 1` elements fit.
        let limit = Limits::default().max_attributes;
        let wide = |n| Attributes::new().with("k", OwnedValue::Array(vec![OwnedValue::Int(0); n]));
        let payload = encode(wide(limit - 1), Attributes::new()).unwrap();
        assert!(ProcessContextView::decode(&payload, &Limits::default()).is_ok());
        assert_eq!(
            encode(wide(limit), Attributes::new()),
            Err(Error::Unreadable(DecodeError::TooManyAttributes { limit }))
        );
        // Too deep is reported first, even after too many (a reader reports whichever it
        // meets first).
        let both = Attributes::new()
            .with("wide", OwnedValue::Array(vec![OwnedValue::Int(0); limit]))
            .with("deep", nested(Limits::default().max_depth + 1));
        assert_eq!(
            encode_payload(Resource::from_attributes(both), Attributes::new()).map(|e| e.payload),
            Err(Error::Unreadable(DecodeError::TooDeep {
                limit: Limits::default().max_depth
            }))
        );
    }
}
