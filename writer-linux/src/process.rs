//! Process context (OTEP 4719): publish, update, unpublish.
//!
//! A process publishes its resource attributes in a small memory mapping named
//! `OTEL_CTX` that any sufficiently privileged process on the host finds through
//! `/proc/<pid>/maps` and reads. This module is the writing side, on raw syscalls:
//!
//! - [`Resource`] and [`ResourceBuilder`]: the owned resource, with the semantic-convention
//!   keys filled in (`service.instance.id` becomes a random UUID v4 when not given).
//! - [`Attributes`]: attributes with unique keys, used for the resource and for the extra
//!   attributes (field 2 of the payload). Their entries are the codec's owned model,
//!   [`OwnedKeyValue`] and [`OwnedValue`] (every `AnyValue` kind), re-exported here.
//! - [`Publisher`]: the single writer of the process's context. [`Publisher::publish`],
//!   [`Publisher::update`] and [`Publisher::unpublish`] follow the protocol steps of the
//!   specification one function per step; dropping a publisher unpublishes.
//! - `global` (feature `std`): a process-wide publisher behind a mutex, for an SDK and its
//!   integrations to share.
//! - [`set_thread_reference_data`] and [`announce_thread_contexts`]: the thread-context
//!   reference data (OTEP 4947), `threadlocal.schema_version` and
//!   `threadlocal.attribute_key_map`, published in the extra attributes.
//!
//! ```no_run
//! use otel_ctx_writer::process::{Attributes, Publisher, Resource};
//!
//! let resource = Resource::builder()
//!     .service_name("checkout")
//!     .service_version("1.4.2")
//!     .deployment_environment_name("production")
//!     .attribute("host.arch", "amd64")
//!     .build()?;
//! let mut publisher = Publisher::publish(resource, Attributes::new())?;
//! publisher.update_with(|resource, _extra| {
//!     resource.set("service.version", "1.4.3");
//! })?;
//! publisher.unpublish()?;
//! # Ok::<(), otel_ctx_writer::process::Error>(())
//! ```
//!
//! Without the `alloc` feature (no heap), [`BufferPublisher`] publishes from two buffers
//! its caller provides: each payload is encoded from the codec's borrowed model
//! ([`ProcessContext`], [`KeyValue`], [`AnyValue`]) into the buffer the header does not
//! point at, then the header is switched to it. Its caller puts the thread reference data in
//! the extra attributes itself (`thread::KeyMap::reference_data`). The mapping, the
//! protocol steps, the singleton and the fork handling are the same for both publishers,
//! which share one publication core.
//!
//! # One context per process
//!
//! The context is a singleton: while a [`Publisher`] is alive in a process, a second
//! [`Publisher::publish`] in the same process (or `global::publish`) fails with
//! [`Error::AlreadyPublished`]. Its state is process-wide too, and the [`Publisher`] is its
//! handle: the one value allowed to change the resource and the extra attributes, or to
//! withdraw the context.
//!
//! # Thread reference data, whichever publisher
//!
//! A reader of thread contexts names the attributes of a record through the key map in
//! the process context. The reference data is process-wide state of this module, set with
//! [`set_thread_reference_data`] (which `thread::register` calls with the whole key map
//! each time it registers new names) or [`announce_thread_contexts`], and from then on part
//! of every publication, in field 2, in place of any `threadlocal.*` value the caller
//! gave:
//!
//! - whatever publishes the context: a standalone [`Publisher`] as much as `global`; the
//!   context published at the time is updated at once, and a later publish includes it;
//! - `global::publish` announces the thread contexts itself, with an empty key map if no
//!   key is registered yet, so a process that attaches contexts without attributes still
//!   tells readers to look for the TLS slot. With a standalone [`Publisher`], registering a
//!   key announces them, and so does [`announce_thread_contexts`] in a process that
//!   registers none.
//!
//! A process that never sets reference data publishes exactly the extra attributes it is
//! given.
//!
//! # Fork
//!
//! A publisher inherited by a forked child refers to a mapping the child does not have
//! (`MADV_DONTFORK`): in the child it never writes to or unmaps that address, and the child
//! may publish its own context. The pid is not trusted alone to recognise the child (a
//! child in a new PID namespace can have its parent's pid): a word on a page the kernel
//! zero-fills in every forked child (`MADV_WIPEONFORK`) holds the id of the publication,
//! and where the kernel lacks that (before Linux 4.14), the mapping itself is probed with a
//! system call.

#[cfg(feature = "alloc")]
mod attributes;
mod buffer;
mod encode;
mod error;
#[cfg(feature = "std")]
pub mod global;
mod lock;
#[cfg(all(test, loom))]
mod loom;
mod mapping;
mod publisher;
#[cfg(feature = "alloc")]
mod reference;
#[cfg(feature = "alloc")]
mod resource;

#[cfg(feature = "alloc")]
pub use attributes::Attributes;
pub use buffer::BufferPublisher;
pub use error::{Error, Step};
pub use mapping::Backing;
#[cfg(feature = "test-seams")]
pub use mapping::Syscalls;
#[cfg(feature = "alloc")]
pub use otel_ctx_codec::owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue};
pub use otel_ctx_codec::proto::{AnyValue, KeyValue, ProcessContext};
#[cfg(feature = "alloc")]
pub use publisher::{announce_thread_contexts, set_thread_reference_data, Publisher};
#[cfg(feature = "alloc")]
pub use resource::{
    Resource, ResourceBuilder, DEPLOYMENT_ENVIRONMENT_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME,
    SERVICE_VERSION, TELEMETRY_SDK_LANGUAGE, TELEMETRY_SDK_NAME, TELEMETRY_SDK_VERSION,
};
