//! The process context from the SDK's `Resource`: its attributes in the writer's model,
//! and their publication.

#[cfg(target_os = "linux")]
use opentelemetry::{Array, Value};
use opentelemetry_sdk::Resource as SdkResource;
#[cfg(target_os = "linux")]
use otel_ctx_writer::process::{self, global, OwnedValue};

/// Why the process context could not be published (see `otel_ctx_writer::process`).
#[cfg(target_os = "linux")]
pub type PublishError = process::Error;
/// Why the process context could not be published. Outside Linux nothing is published and
/// nothing fails.
#[cfg(not(target_os = "linux"))]
pub type PublishError = std::convert::Infallible;

/// `service.instance.id`, which the SDK's default resource leaves out.
#[cfg(target_os = "linux")]
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// The process context's resource for an SDK `Resource`: every attribute, with its typed
/// value (bool, int, double, string, and arrays of them).
///
/// The semantic-convention keys the SDK left out are filled in as
/// `otel_ctx_writer::process::ResourceBuilder::build` does; `service.instance.id` keeps the
/// value of the context this process already published, if any, so that publishing again
/// does not make the process look like a new instance.
#[cfg(target_os = "linux")]
pub fn to_process_resource(resource: &SdkResource) -> Result<process::Resource, process::Error> {
    let mut builder = process::Resource::builder();
    for (key, value) in resource.iter() {
        builder = builder.attribute(key.as_str(), to_owned_value(value));
    }
    if resource
        .get(&opentelemetry::Key::from_static_str(SERVICE_INSTANCE_ID))
        .is_none()
    {
        let published = global::with_publisher(|publisher| {
            publisher.resource().get(SERVICE_INSTANCE_ID).cloned()
        });
        if let Some(Some(id)) = published {
            builder = builder.attribute(SERVICE_INSTANCE_ID, id);
        }
    }
    builder.build()
}

/// An SDK attribute value in the codec's owned model.
#[cfg(target_os = "linux")]
pub fn to_owned_value(value: &Value) -> OwnedValue {
    match value {
        Value::Bool(v) => OwnedValue::Bool(*v),
        Value::I64(v) => OwnedValue::Int(*v),
        Value::F64(v) => OwnedValue::Double(*v),
        Value::String(v) => OwnedValue::String(v.as_str().to_owned()),
        Value::Array(Array::Bool(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Bool).collect())
        }
        Value::Array(Array::I64(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Int).collect())
        }
        Value::Array(Array::F64(v)) => {
            OwnedValue::Array(v.iter().copied().map(OwnedValue::Double).collect())
        }
        Value::Array(Array::String(v)) => OwnedValue::Array(
            v.iter()
                .map(|s| OwnedValue::String(s.as_str().to_owned()))
                .collect(),
        ),
        // The SDK's value kinds are open to additions (`non_exhaustive`): a kind this crate
        // does not know yet is published as its text rather than dropped.
        other => OwnedValue::String(other.to_string()),
    }
}

/// Publishes `resource` as this process's context, through the writer's process-wide
/// publisher (`otel_ctx_writer::process::global`): the first call publishes, later ones
/// update. The extra attributes and the thread reference data (the key map) are kept.
///
/// Outside Linux there is no process context: it does nothing.
pub fn publish_resource(resource: &SdkResource) -> Result<(), PublishError> {
    #[cfg(target_os = "linux")]
    return global::publish(to_process_resource(resource)?);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = resource;
        Ok(())
    }
}
