//! The bounds a decoder enforces on untrusted payloads, and the one set of rules that
//! applies them: to the wire, as [`ProcessContextView::decode`] walks a payload
//! (`validate.rs`), and to a model before it is encoded ([`ProcessContext::check_limits`],
//! `OwnedProcessContext::check_limits`), so that a writer refuses exactly what a reader
//! would.
//!
//! [`ProcessContextView::decode`]: super::ProcessContextView::decode

use super::encode::{context_len, key_value_len_with, len_field, value_len};
use super::wire::{
    AV_ARRAY, AV_KVLIST, LIST_VALUES, PC_ATTRIBUTES, PC_RESOURCE, RESOURCE_ATTRIBUTES,
};
use super::{DecodeError, EncodeKeyValue, EncodeValue, ProcessContext, ValueRef};
use crate::header::MAX_PAYLOAD_SIZE;

/// Bounds a decoder enforces on untrusted payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload accepted, in bytes.
    pub max_payload_size: usize,
    /// Deepest `AnyValue` nesting: a top-level attribute's value is at depth 1, an
    /// element of an array or kvlist inside it at depth 2, and so on.
    pub max_depth: usize,
    /// Most key-value pairs and array elements in the whole payload, at any depth.
    pub max_attributes: usize,
}

/// [`Limits::max_depth`] by default.
pub const DEFAULT_MAX_DEPTH: usize = 16;
/// [`Limits::max_attributes`] by default.
pub const DEFAULT_MAX_ATTRIBUTES: usize = 2048;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload_size: MAX_PAYLOAD_SIZE as usize,
            max_depth: DEFAULT_MAX_DEPTH,
            max_attributes: DEFAULT_MAX_ATTRIBUTES,
        }
    }
}

/// The rules of [`Limits`], as both walks apply them: what counts as an attribute, how deep
/// a value is, and the error each bound gives.
pub(super) struct Budget {
    limits: Limits,
    /// Key-value pairs and array elements counted so far, at any depth.
    attributes: usize,
}

impl Budget {
    pub(super) const fn new(limits: Limits) -> Self {
        Self {
            limits,
            attributes: 0,
        }
    }

    /// Counts `n` more key-value pairs or array elements (every one counts, at any depth).
    pub(super) fn count(&mut self, n: usize) {
        self.attributes = self.attributes.saturating_add(n);
    }

    /// Whether the attributes counted so far are within [`Limits::max_attributes`].
    pub(super) fn check_count(&self) -> Result<(), DecodeError> {
        if self.attributes > self.limits.max_attributes {
            return Err(DecodeError::TooManyAttributes {
                limit: self.limits.max_attributes,
            });
        }
        Ok(())
    }

    /// Whether an `AnyValue` at `depth` (1 for a top-level attribute's value, one more for
    /// an element of an array or kvlist) is within [`Limits::max_depth`].
    pub(super) fn check_depth(&self, depth: usize) -> Result<(), DecodeError> {
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        Ok(())
    }

    /// Whether a payload of `size` bytes is within [`Limits::max_payload_size`].
    pub(super) fn check_size(&self, size: usize) -> Result<(), DecodeError> {
        if size > self.limits.max_payload_size {
            return Err(DecodeError::PayloadTooLarge {
                size,
                limit: self.limits.max_payload_size,
            });
        }
        Ok(())
    }
}

/// Checks a model (either one) as a reader's decoder checks its payload, with the rules of
/// [`Budget`]: the depth of every value, the number of attributes, then the size of the
/// encoded payload, which it returns (the same walk computes it).
///
/// The decoder stops at the first bound it meets in wire order; a model is checked whole,
/// so too deep is reported before too many, whatever their order in the context, and both
/// before too large. The walk goes no deeper than `limits.max_depth + 1`, however deep the
/// values nest.
pub(crate) fn check_context<K: EncodeKeyValue>(
    resource: &[K],
    attributes: &[K],
    limits: &Limits,
) -> Result<usize, DecodeError> {
    let mut budget = Budget::new(*limits);
    let mut resource_len = 0;
    for kv in resource {
        resource_len += len_field(RESOURCE_ATTRIBUTES, check_key_value(kv, 1, &mut budget)?);
    }
    let mut size = len_field(PC_RESOURCE, resource_len);
    for kv in attributes {
        size += len_field(PC_ATTRIBUTES, check_key_value(kv, 1, &mut budget)?);
    }
    budget.check_count()?;
    debug_assert_eq!(size, context_len(resource, attributes));
    budget.check_size(size)?;
    Ok(size)
}

/// A key-value pair counts, and its value is at `depth`. The size of its body.
fn check_key_value<K: EncodeKeyValue>(
    kv: &K,
    depth: usize,
    budget: &mut Budget,
) -> Result<usize, DecodeError> {
    budget.count(1);
    let value = check_value(kv.value(), depth, budget)?;
    Ok(key_value_len_with(kv.key(), value))
}

/// A value at `depth`; the elements of an array or kvlist count, one level deeper. A string
/// array's elements count as the elements of any array. The size of its body.
fn check_value<V: EncodeValue>(
    value: &V,
    depth: usize,
    budget: &mut Budget,
) -> Result<usize, DecodeError> {
    budget.check_depth(depth)?;
    match value.value_ref() {
        ValueRef::Array(values) => {
            let mut body = 0;
            for value in values {
                budget.count(1);
                body += len_field(LIST_VALUES, check_value(value, depth + 1, budget)?);
            }
            Ok(len_field(AV_ARRAY, body))
        }
        ValueRef::StringArray(strings) => {
            if !strings.is_empty() {
                budget.check_depth(depth + 1)?;
            }
            budget.count(strings.len());
            Ok(value_len(value))
        }
        ValueRef::KvList(entries) => {
            let mut body = 0;
            for kv in entries {
                body += len_field(LIST_VALUES, check_key_value(kv, depth + 1, budget)?);
            }
            Ok(len_field(AV_KVLIST, body))
        }
        ValueRef::Empty
        | ValueRef::String(_)
        | ValueRef::Bool(_)
        | ValueRef::Int(_)
        | ValueRef::Double(_)
        | ValueRef::Bytes(_) => Ok(value_len(value)),
    }
}

impl ProcessContext<'_> {
    /// Checks that a reader decoding with `limits` accepts the encoded payload: the nesting
    /// depth and the number of attributes, counted as its decoder counts them, then the
    /// payload's size. A writer checks this before it publishes.
    ///
    /// Too deep is reported before too many attributes, whatever their order in the
    /// context (a decoder reports whichever it meets first), and both before too large.
    pub fn check_limits(&self, limits: &Limits) -> Result<(), DecodeError> {
        self.checked_len(limits).map(drop)
    }

    /// [`check_limits`](Self::check_limits), and the payload's exact size when it passes
    /// ([`encoded_len`](Self::encoded_len)), from one walk of the context.
    pub fn checked_len(&self, limits: &Limits) -> Result<usize, DecodeError> {
        check_context(self.resource, self.attributes, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AnyValue, KeyValue, ProcessContextView};

    const TIGHT: Limits = Limits {
        max_payload_size: 64,
        max_depth: 3,
        max_attributes: 6,
    };

    /// What a reader's decoder says of `context`, encoded without any check.
    fn decoded(context: &ProcessContext<'_>, limits: &Limits) -> Result<(), DecodeError> {
        let mut buf = [0u8; 512];
        let n = context.encode(&mut buf).unwrap();
        ProcessContextView::decode(&buf[..n], limits).map(|_| ())
    }

    fn kv<'a>(key: &'a str, value: AnyValue<'a>) -> KeyValue<'a> {
        KeyValue { key, value }
    }

    /// Every context whose payload is refused for one reason alone is refused for the same
    /// reason before it is encoded, in the borrowed model and in the owned one, and every
    /// one the decoder accepts passes.
    #[test]
    fn a_model_is_checked_as_its_payload_is_decoded() {
        let int = AnyValue::Int(1);
        let ints = [int];
        let depth_2 = [AnyValue::Array(&[])];
        let depth_3 = [AnyValue::Array(&depth_2)];
        let depth_4 = [AnyValue::Array(&depth_3)];
        let inner = [kv("k", AnyValue::Array(&ints))];
        let deep_kvlist = [kv("k", AnyValue::KvList(&inner))];
        let strings_at_3 = [AnyValue::StringArray(&["a"])];
        let strings_at_2 = [AnyValue::Array(&strings_at_3)];
        let five = [int; 5];
        let strings = ["a"; 5];
        let big = [0u8; 70];
        let cases: &[(&[KeyValue<'_>], &[KeyValue<'_>])] = &[
            (&[], &[]),
            // Depth: an empty array at depth 3 fits, its element would be at depth 4.
            (&[kv("a", AnyValue::Array(&depth_3))], &[]),
            (&[], &[kv("a", AnyValue::Array(&depth_4))]),
            (&[kv("m", AnyValue::KvList(&deep_kvlist))], &[]),
            (&[kv("s", AnyValue::StringArray(&[]))], &[]),
            (&[kv("s", AnyValue::Array(&strings_at_2))], &[]),
            // Count: the attribute and its elements, 6 fit and 7 do not.
            (&[kv("a", AnyValue::Array(&five))], &[]),
            (&[kv("a", AnyValue::Array(&five))], &[kv("b", int)]),
            (&[kv("s", AnyValue::StringArray(&strings))], &[kv("b", int)]),
            (
                &[kv("s", AnyValue::StringArray(&strings[..4]))],
                &[kv("b", int)],
            ),
            // Size: 70 bytes of one value.
            (&[kv("b", AnyValue::Bytes(&big))], &[]),
        ];
        let mut refused = 0;
        for &(resource, attributes) in cases {
            let context = ProcessContext {
                resource,
                attributes,
            };
            let reader = decoded(&context, &TIGHT);
            assert_eq!(context.check_limits(&TIGHT), reader, "{context:?}");
            #[cfg(feature = "alloc")]
            {
                let owned = crate::owned::OwnedProcessContext {
                    resource: resource.iter().copied().map(Into::into).collect(),
                    attributes: attributes.iter().copied().map(Into::into).collect(),
                };
                assert_eq!(owned.check_limits(&TIGHT), reader, "{owned:?}");
            }
            refused += usize::from(reader.is_err());
        }
        assert_eq!(refused, 6, "each limit is reached by some case");
    }

    #[test]
    fn too_deep_before_too_many_and_both_before_too_large() {
        let deep = [AnyValue::Array(&[AnyValue::Array(&[AnyValue::Array(&[])])])];
        let wide = [AnyValue::Bytes(&[0; 16]); 8];
        let context = ProcessContext {
            resource: &[kv("wide", AnyValue::Array(&wide))],
            attributes: &[kv("deep", AnyValue::Array(&deep))],
        };
        assert_eq!(
            context.check_limits(&TIGHT),
            Err(DecodeError::TooDeep { limit: 3 })
        );
        // The decoder meets the wide array, and stops there.
        assert_eq!(
            decoded(
                &context,
                &Limits {
                    max_payload_size: 512,
                    ..TIGHT
                }
            ),
            Err(DecodeError::TooManyAttributes { limit: 6 })
        );
        let context = ProcessContext {
            resource: &[kv("wide", AnyValue::Array(&wide))],
            attributes: &[],
        };
        assert_eq!(
            context.check_limits(&TIGHT),
            Err(DecodeError::TooManyAttributes { limit: 6 })
        );
        let roomy = Limits {
            max_attributes: 9,
            ..TIGHT
        };
        assert_eq!(
            context.check_limits(&roomy),
            Err(DecodeError::PayloadTooLarge {
                size: context.encoded_len(),
                limit: 64
            })
        );
    }
}
