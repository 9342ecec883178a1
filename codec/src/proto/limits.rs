//! The bounds a decoder enforces on untrusted payloads.

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
