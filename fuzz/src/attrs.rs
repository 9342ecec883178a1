//! `attrs_decode`: attrs-data entries and their resolution against a key map.
//!
//! Input: two bytes, little-endian, give `key_map_len` (0 to 65535, so lengths past the
//! 256 a `u8` index can reach are tried too); the rest is the attrs-data. Shorter inputs
//! are attrs-data alone with a key map of 256 names.
//!
//! Checked: the entries [`AttrsIter`] yields lie inside the data, back to back, and
//! with the remainder account for every byte; the remainder is an incomplete entry;
//! writing the entries again gives the same bytes; [`ResolvedAttrs::resolve`] keeps,
//! for each key inside the key map, its last occurrence, in increasing key order, and
//! counts the rest as dropped.

use std::collections::BTreeMap;

use otel_ctx_codec::attrs::{encode_entry, AttrsIter, AttrsWriter, ResolvedAttrs, MAX_VALUE_LEN};

/// Splits the input and checks everything described in the module docs.
pub fn check(input: &[u8]) {
    let (key_map_len, data) = match input {
        [lo, hi, rest @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), rest),
        _ => (256, input),
    };
    let entries = check_entries(data);
    check_resolve(data, key_map_len, &entries);
}

/// Entries by position in `data`: (offset of the value, key, value).
fn check_entries(data: &[u8]) -> Vec<(usize, u8, &[u8])> {
    let mut iter = AttrsIter::new(data);
    let mut entries = Vec::new();
    let mut at = 0;
    for (key, value) in iter.by_ref() {
        assert!(value.len() <= MAX_VALUE_LEN);
        // The entry is the next one in the data: key, length, then the value in place.
        assert_eq!(data.get(at), Some(&key));
        assert_eq!(data.get(at + 1).map(|&l| usize::from(l)), Some(value.len()));
        assert!(std::ptr::eq(value, &data[at + 2..at + 2 + value.len()]));
        entries.push((at + 2, key, value));
        at += 2 + value.len();
    }
    let rest = iter.remainder();
    assert!(
        std::ptr::eq(rest, &data[at..]),
        "remainder is not the unread tail"
    );
    // The remainder is empty or an entry that does not fit.
    if let [_, len, value @ ..] = rest {
        assert!(usize::from(*len) > value.len());
    }
    // An exhausted iterator stays exhausted.
    assert_eq!(iter.next(), None);

    // Writing the entries back gives the consumed bytes, through both encoders.
    let mut buf = vec![0u8; at];
    let mut writer = AttrsWriter::new(&mut buf);
    for (_, key, value) in &entries {
        writer
            .push(*key, value)
            .expect("the entries fit the bytes they came from");
    }
    assert_eq!(writer.len(), at);
    assert_eq!(writer.is_empty(), at == 0);
    assert_eq!(writer.as_bytes(), &data[..at]);
    let mut one = [0u8; 2 + MAX_VALUE_LEN];
    if let Some((_, key, value)) = entries.last() {
        let n = encode_entry(&mut one, *key, value).expect("one entry fits");
        assert_eq!(&one[..n], &data[at - n..at]);
    }
    entries
}

fn check_resolve(data: &[u8], key_map_len: usize, entries: &[(usize, u8, &[u8])]) {
    let resolved = ResolvedAttrs::resolve(data, key_map_len);

    let mut model: BTreeMap<u8, (usize, &[u8])> = BTreeMap::new();
    let mut dropped = 0;
    let mut max_unknown = None;
    for &(offset, key, value) in entries {
        if usize::from(key) < key_map_len {
            model.insert(key, (offset, value));
        } else {
            dropped += 1;
            max_unknown = max_unknown.max(Some(key));
        }
    }

    assert_eq!(resolved.len(), model.len());
    assert_eq!(resolved.is_empty(), model.is_empty());
    assert_eq!(resolved.dropped(), dropped);
    assert_eq!(resolved.max_unknown_index(), max_unknown);
    assert_eq!(
        resolved.incomplete(),
        entries.last().map_or(0, |&(o, _, v)| o + v.len()) != data.len()
    );
    let kept: Vec<(u8, &[u8])> = resolved.iter().collect();
    // Sorted by key index, each key once.
    assert!(
        kept.windows(2).all(|w| w[0].0 < w[1].0),
        "keys not sorted: {kept:?}"
    );
    for (&(key, value), (&model_key, &(offset, model_value))) in kept.iter().zip(&model) {
        assert_eq!(key, model_key);
        // The last occurrence: the very same bytes, not an equal earlier value.
        assert!(std::ptr::eq(value, model_value));
        assert!(std::ptr::eq(value, &data[offset..offset + value.len()]));
    }
    for key in 0..=u8::MAX {
        let expected = model.get(&key).map(|&(_, v)| v);
        assert_eq!(resolved.get(key), expected);
    }
}
