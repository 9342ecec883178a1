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
//! - `global` (feature `std`): a process-wide publisher behind a mutex, and
//!   `global::set_thread_reference_data`, through which the thread-context writer publishes
//!   its `threadlocal.*` reference data.
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
//! The context is a singleton: while a [`Publisher`] is alive in a process, a second
//! [`Publisher::publish`] in the same process fails with [`Error::AlreadyPublished`]. A
//! publisher inherited by a forked child refers to a mapping the child does not have
//! (`MADV_DONTFORK`): in the child it never writes to or unmaps that address, and the child
//! may publish its own context.

mod attributes;
mod encode;
mod error;
#[cfg(feature = "std")]
pub mod global;
#[cfg(all(test, loom))]
mod loom;
mod mapping;
mod publisher;
mod resource;

pub use attributes::Attributes;
pub use error::{Error, Step};
pub use mapping::Backing;
#[doc(hidden)]
pub use mapping::Syscalls;
pub use otel_ctx_codec::owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue};
pub use publisher::Publisher;
pub use resource::{
    Resource, ResourceBuilder, DEPLOYMENT_ENVIRONMENT_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME,
    SERVICE_VERSION, TELEMETRY_SDK_LANGUAGE, TELEMETRY_SDK_NAME, TELEMETRY_SDK_VERSION,
};
