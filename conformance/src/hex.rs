//! Lowercase hex, as the vectors write bytes: the codec's (one definition for the
//! checker, the vectors and `otel-ctx`).

pub use otel_ctx_codec::hex::{decode, encode};
