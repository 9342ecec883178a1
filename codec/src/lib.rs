//! Bytes of OpenTelemetry process context (OTEP 4719) and thread context (OTEP 4947).
//!
//! ```
//! use otel_ctx_codec::proto::{AnyValue, KeyValue, Limits, ProcessContext, ProcessContextView};
//! use otel_ctx_codec::record::{encode_record, RecordView, MAX_RECORD_SIZE};
//!
//! let resource = [KeyValue { key: "service.name", value: AnyValue::String("checkout") }];
//! let (mut payload, mut record) = ([0u8; 64], [0u8; 64]);
//! let len = ProcessContext { resource: &resource, attributes: &[] }.encode(&mut payload)?;
//! let view = ProcessContextView::decode(&payload[..len], &Limits::default())?;
//! assert_eq!(view.resource_value("service.name").and_then(|v| v.as_str()), Some("checkout"));
//! let len = encode_record(&mut record, [1; 16], [2; 8], 0x01, &[(0, b"/cart")])?;
//! assert_eq!(RecordView::parse(&record[..len], MAX_RECORD_SIZE)?.entries().count(), 1);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! Pure functions over borrowed bytes: this crate knows the layouts and the protobuf
//! subset, and nothing of Linux, memory mappings or threads. It never panics on input;
//! every malformed input is a typed error whose [`kind`](HeaderError::kind) is the
//! language-neutral name used by `spec-vectors/`. Without the `alloc` feature it never
//! allocates.
//!
//! - [`header`]: the 32-byte process-context header and its validation.
//! - [`proto`]: the `ProcessContext` protobuf payload, encoded from borrowed input and
//!   decoded into borrowed views.
//! - [`threadlocal`]: the `threadlocal.*` reference data kept in the payload's extra
//!   attributes.
//! - [`record`]: the thread-context record (28-byte header plus attrs-data).
//! - [`attrs`]: the attrs-data entries `key: u8, len: u8, value: [u8; len]`.
//! - `owned` (feature `alloc`): the one owned model of a process context, which writers
//!   build and encode and readers copy a decoded view into.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod attrs;
pub mod header;
#[cfg(feature = "alloc")]
pub mod hex;
#[cfg(feature = "alloc")]
pub mod owned;
pub mod proto;
pub mod record;
pub mod threadlocal;

pub use attrs::{AttrsError, AttrsIter, ResolvedAttrs};
pub use header::{HeaderError, ProcessContextHeader};
#[cfg(feature = "alloc")]
pub use owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue, Threadlocal};
pub use proto::{
    AnyValue, AnyValueView, ArrayView, DecodeError, EncodeError, KeyValue, KeyValueView,
    KvListView, Limits, ProcessContext, ProcessContextView,
};
pub use record::{RecordError, RecordHeader, RecordView};
pub use threadlocal::{KeyMapView, ThreadlocalError, ThreadlocalView};
