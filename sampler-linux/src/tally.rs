//! Samples counted per value of one thread-context attribute: which route, tenant or
//! operation the threads were serving when they were sampled, the view of
//! `otel-ctx watch`.

use std::collections::HashMap;

use otel_ctx_codec::attrs::{ResolvedAttrs, MAX_KEYS};

use super::Sample;

/// The bucket of a thread with no context attached.
pub const NO_CONTEXT: &str = "(no context)";
/// The bucket of a thread whose context could not be read.
pub const UNREADABLE: &str = "(unreadable)";

/// Thread samples counted per value of the attribute [`AttributeTally::by`] names, with
/// the time on and off a CPU they stand for.
#[derive(Clone, Debug)]
pub struct AttributeTally {
    by: String,
    raw_keys: bool,
    period_ns: u64,
    counts: HashMap<String, Bucket>,
}

/// The samples of one value, and their time on and off a CPU in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bucket {
    /// Samples.
    pub samples: u64,
    /// Their time on a CPU ([`Sample::cpu_ns`]).
    pub cpu_ns: u64,
    /// Their time off a CPU ([`Sample::off_cpu_ns`]).
    pub off_cpu_ns: u64,
}

impl AttributeTally {
    /// Counts by the attribute named `by`; with `raw_keys`, `by` is a key index such as
    /// `#0` (the last entry of that index winning), whatever the key map says. A sample
    /// without the attribute counts as `(no <by>)`, one without a context as
    /// [`NO_CONTEXT`], one whose context could not be read as [`UNREADABLE`].
    pub fn new(by: &str, raw_keys: bool) -> Self {
        Self {
            by: by.to_owned(),
            raw_keys,
            period_ns: 0,
            counts: HashMap::new(),
        }
    }

    /// Sets the sampling period: the time on a CPU a sample of one period stands for
    /// ([`Sample::cpu_ns`]). Default 0 (samples are counted, not timed).
    #[must_use]
    pub const fn with_period_ns(mut self, period_ns: u64) -> Self {
        self.period_ns = period_ns;
        self
    }

    /// The attribute counted by.
    pub fn by(&self) -> &str {
        &self.by
    }

    /// Counts one sample.
    pub fn add(&mut self, sample: &Sample<'_>) {
        let name = match &sample.context {
            Err(_) => UNREADABLE.to_owned(),
            Ok(None) => NO_CONTEXT.to_owned(),
            Ok(Some(c)) => {
                let value = match self.raw_keys {
                    true => raw_value(c.attrs_data, &self.by),
                    false => c.attribute(&self.by),
                };
                match value {
                    None => format!("(no {})", self.by),
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                }
            }
        };
        let bucket = self.counts.entry(name).or_default();
        bucket.samples += 1;
        bucket.cpu_ns = bucket.cpu_ns.saturating_add(sample.cpu_ns(self.period_ns));
        bucket.off_cpu_ns = bucket.off_cpu_ns.saturating_add(sample.off_cpu_ns);
    }

    /// `(value, samples)`, most samples first, then by value.
    pub fn rows(&self) -> Vec<(&str, u64)> {
        self.buckets()
            .into_iter()
            .map(|(value, bucket)| (value, bucket.samples))
            .collect()
    }

    /// `(value, its samples and time)`, most samples first, then by value.
    pub fn buckets(&self) -> Vec<(&str, Bucket)> {
        let mut rows: Vec<(&str, Bucket)> =
            self.counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        rows.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
        rows
    }

    /// Samples counted.
    pub fn samples(&self) -> u64 {
        self.counts.values().map(|b| b.samples).sum()
    }

    /// When the attribute is not in `key_map` (and keys are not raw): a note that says so
    /// and lists the keys that are (every sample counts as `(no <by>)` until a key of
    /// that name is registered).
    pub fn key_note(&self, key_map: &[String]) -> Option<String> {
        if self.raw_keys || key_map.contains(&self.by) {
            return None;
        }
        Some(if key_map.is_empty() {
            format!(
                "{} is not in the key map: the process announces no keys (yet)",
                self.by
            )
        } else {
            format!(
                "{} is not in the key map; its keys are: {}",
                self.by,
                key_map.join(", ")
            )
        })
    }
}

/// The value of the last entry whose key index `#N` is `by`.
fn raw_value<'a>(attrs_data: &'a [u8], by: &str) -> Option<&'a [u8]> {
    let index: u8 = by.strip_prefix('#')?.parse().ok()?;
    ResolvedAttrs::resolve(attrs_data, MAX_KEYS)
        .iter()
        .find(|(key, _)| *key == index)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_notes() {
        let keys = ["http.route".to_owned(), "tenant".to_owned()];
        assert_eq!(
            AttributeTally::new("http.route", false).key_note(&keys),
            None
        );
        assert_eq!(AttributeTally::new("#0", true).key_note(&[]), None);
        assert_eq!(
            AttributeTally::new("user", false).key_note(&keys).unwrap(),
            "user is not in the key map; its keys are: http.route, tenant"
        );
        assert!(AttributeTally::new("user", false)
            .key_note(&[])
            .unwrap()
            .ends_with("announces no keys (yet)"));
    }

    #[test]
    fn raw_values_by_key_index() {
        // Entries: key 0 = "a", key 1 = "bc", key 0 = "d" (the last one wins).
        let data = [0, 1, b'a', 1, 2, b'b', b'c', 0, 1, b'd'];
        assert_eq!(raw_value(&data, "#0"), Some(&b"d"[..]));
        assert_eq!(raw_value(&data, "#1"), Some(&b"bc"[..]));
        assert_eq!(raw_value(&data, "#2"), None);
        assert_eq!(raw_value(&data, "0"), None);
        assert_eq!(raw_value(&data, "#x"), None);
    }
}
