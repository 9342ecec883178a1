//! The payload: protobuf `opentelemetry.proto.processcontext.v1development.ProcessContext`.
//!
//! ```text
//! message ProcessContext { Resource resource = 1; repeated KeyValue attributes = 2; }
//! message Resource       { repeated KeyValue attributes = 1; ... }
//! message KeyValue       { string key = 1; AnyValue value = 2; }
//! message AnyValue       { oneof value { string string_value = 1; bool bool_value = 2;
//!                          int64 int_value = 3; double double_value = 4;
//!                          ArrayValue array_value = 5; KeyValueList kvlist_value = 6;
//!                          bytes bytes_value = 7; } }
//! message ArrayValue     { repeated AnyValue values = 1; }
//! message KeyValueList   { repeated KeyValue values = 1; }
//! ```
//!
//! Encoding writes from borrowed input ([`ProcessContext`]) into a caller's buffer, and,
//! with the `alloc` feature, from the owned model (`owned::OwnedProcessContext`): one
//! encoder serves both, so the same context gives the same bytes from either.
//! Decoding ([`ProcessContextView::decode`]) first walks the whole payload once, checking
//! every wire type, length, UTF-8 string, the nesting depth and the number of
//! attributes against [`Limits`]; the view then hands out iterators that borrow the
//! payload. Unknown fields are skipped. Groups (wire types 3 and 4, deprecated and never
//! part of this schema) are refused. Fields that occur more than once follow protobuf's
//! merge rules: the last scalar wins, and occurrences of a message field merge (so
//! `Resource` attributes and the elements of a repeated `array_value` concatenate).
//!
//! One file per job: `wire` reads fields off the wire (tags, lengths, the schema's field
//! numbers); `limits` holds the bounds of [`Limits`] and the one set of rules that applies
//! them, to a payload and to a model to encode ([`ProcessContext::check_limits`]);
//! `validate` walks a whole payload once; `view` hands out the borrowed views of a checked
//! payload; `model` is the borrowed model an encoder reads and the two traits through
//! which it reads the owned one too; `encode` is the one encoder of both; `error` says why
//! a payload does not decode or encode.

mod encode;
mod error;
mod limits;
mod model;
mod validate;
mod view;
mod wire;

#[cfg(feature = "alloc")]
pub(crate) use encode::{context_len, encode_context};
pub use error::{DecodeError, EncodeError, Message};
#[cfg(feature = "alloc")]
pub(crate) use limits::check_context;
pub use limits::{Limits, DEFAULT_MAX_ATTRIBUTES, DEFAULT_MAX_DEPTH};
pub use model::{AnyValue, KeyValue, ProcessContext};
pub(crate) use model::{EncodeKeyValue, EncodeValue, ValueRef};
pub use view::{AnyValueView, ArrayView, KeyValueView, KvListView, ProcessContextView};
