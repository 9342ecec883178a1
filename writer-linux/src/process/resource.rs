//! The resource: attributes with unique keys, and a builder for the semantic-convention
//! keys.

use alloc::format;
use alloc::string::String;

use otel_ctx_codec::owned::OwnedValue;
use rustix::io::Errno;
use rustix::rand::GetRandomFlags;

use super::attributes::Attributes;
use super::error::{Error, Step};

/// `service.name`.
pub const SERVICE_NAME: &str = "service.name";
/// `service.instance.id`.
pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
/// `service.version`.
pub const SERVICE_VERSION: &str = "service.version";
/// `deployment.environment.name`.
pub const DEPLOYMENT_ENVIRONMENT_NAME: &str = "deployment.environment.name";
/// `telemetry.sdk.language`.
pub const TELEMETRY_SDK_LANGUAGE: &str = "telemetry.sdk.language";
/// `telemetry.sdk.name`.
pub const TELEMETRY_SDK_NAME: &str = "telemetry.sdk.name";
/// `telemetry.sdk.version`.
pub const TELEMETRY_SDK_VERSION: &str = "telemetry.sdk.version";

/// The resource published in field 1 of the payload. Its keys are unique: setting a key
/// again replaces its value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resource {
    attributes: Attributes,
}

impl Resource {
    /// A builder that fills in the semantic-convention keys.
    pub fn builder() -> ResourceBuilder {
        ResourceBuilder::default()
    }

    /// Exactly `attributes`, with no key filled in.
    pub fn from_attributes(attributes: Attributes) -> Self {
        Self { attributes }
    }

    /// The attributes, in order.
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    /// The attributes, given up.
    pub fn into_attributes(self) -> Attributes {
        self.attributes
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&OwnedValue> {
        self.attributes.get(key)
    }

    /// Sets `key` to `value`, replacing and returning its previous value.
    pub fn set(
        &mut self,
        key: impl Into<String>,
        value: impl Into<OwnedValue>,
    ) -> Option<OwnedValue> {
        self.attributes.set(key, value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<OwnedValue> {
        self.attributes.remove(key)
    }

    /// `service.name`, if it is a string.
    pub fn service_name(&self) -> Option<&str> {
        self.get(SERVICE_NAME).and_then(OwnedValue::as_str)
    }

    /// `service.instance.id`, if it is a string.
    pub fn service_instance_id(&self) -> Option<&str> {
        self.get(SERVICE_INSTANCE_ID).and_then(OwnedValue::as_str)
    }
}

/// Builds a [`Resource`] with the semantic-convention keys.
///
/// [`build`](Self::build) fills in what was not set:
/// - `service.name`: `unknown_service:<process.executable.name>` (from `/proc/self/comm`),
///   or `unknown_service` when that cannot be read;
/// - `service.instance.id`: a random UUID v4 (from the `getrandom` syscall);
/// - `telemetry.sdk.language`: `rust`;
/// - `telemetry.sdk.name` and `telemetry.sdk.version`: this crate's name and version; an
///   SDK that publishes through this crate sets its own with
///   [`telemetry_sdk`](Self::telemetry_sdk).
///
/// Every setter, [`attribute`](Self::attribute) included, replaces an earlier value of the
/// same key.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ResourceBuilder {
    attributes: Attributes,
}

impl ResourceBuilder {
    /// `service.name`.
    pub fn service_name(self, name: impl Into<String>) -> Self {
        self.attribute(SERVICE_NAME, name.into())
    }

    /// `service.instance.id`; a random UUID v4 when not set.
    pub fn service_instance_id(self, id: impl Into<String>) -> Self {
        self.attribute(SERVICE_INSTANCE_ID, id.into())
    }

    /// `service.version`.
    pub fn service_version(self, version: impl Into<String>) -> Self {
        self.attribute(SERVICE_VERSION, version.into())
    }

    /// `deployment.environment.name`.
    pub fn deployment_environment_name(self, name: impl Into<String>) -> Self {
        self.attribute(DEPLOYMENT_ENVIRONMENT_NAME, name.into())
    }

    /// `telemetry.sdk.name` and `telemetry.sdk.version`.
    pub fn telemetry_sdk(self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.attribute(TELEMETRY_SDK_NAME, name.into())
            .attribute(TELEMETRY_SDK_VERSION, version.into())
    }

    /// Any attribute, of any value kind.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<OwnedValue>) -> Self {
        self.attributes.set(key, value);
        self
    }

    /// What the OpenTelemetry SDK's default detectors read from the environment:
    /// `OTEL_RESOURCE_ATTRIBUTES` (comma-separated `key=value`, values percent-decoded;
    /// malformed entries are skipped), then `OTEL_SERVICE_NAME`, which wins over a
    /// `service.name` there. [`build`](Self::build) then fills in what is still missing
    /// (`service.name` as `unknown_service:<executable>`, `service.instance.id`, the
    /// `telemetry.sdk.*` keys).
    #[cfg(feature = "std")]
    pub fn from_environment(self) -> Self {
        let mut builder = self;
        if let Ok(list) = std::env::var("OTEL_RESOURCE_ATTRIBUTES") {
            for (key, value) in parse_resource_attributes(&list) {
                builder = builder.attribute(key, value);
            }
        }
        match std::env::var("OTEL_SERVICE_NAME") {
            Ok(name) if !name.trim().is_empty() => builder.service_name(name.trim()),
            _ => builder,
        }
    }

    /// The resource, with the missing semantic-convention keys filled in.
    ///
    /// Fails only when `service.instance.id` was not set and `getrandom` fails.
    pub fn build(self) -> Result<Resource, Error> {
        let mut attributes = self.attributes;
        if attributes.get(SERVICE_NAME).is_none() {
            attributes.set(SERVICE_NAME, unknown_service());
        }
        if attributes.get(SERVICE_INSTANCE_ID).is_none() {
            let id = random_uuid_v4().map_err(|errno| Error::Syscall {
                step: Step::Getrandom,
                errno,
            })?;
            attributes.set(SERVICE_INSTANCE_ID, id);
        }
        if attributes.get(TELEMETRY_SDK_LANGUAGE).is_none() {
            attributes.set(TELEMETRY_SDK_LANGUAGE, "rust");
        }
        if attributes.get(TELEMETRY_SDK_NAME).is_none() {
            attributes.set(TELEMETRY_SDK_NAME, env!("CARGO_PKG_NAME"));
        }
        if attributes.get(TELEMETRY_SDK_VERSION).is_none() {
            attributes.set(TELEMETRY_SDK_VERSION, env!("CARGO_PKG_VERSION"));
        }
        Ok(Resource { attributes })
    }
}

/// The pairs of an `OTEL_RESOURCE_ATTRIBUTES` value: `key=value` separated by commas,
/// keys and values trimmed, values percent-decoded; an entry without `=`, with an empty
/// key or with a bad escape is skipped.
#[cfg(feature = "std")]
pub fn parse_resource_attributes(list: &str) -> alloc::vec::Vec<(String, String)> {
    list.split(',')
        .filter_map(|entry| {
            let (key, value) = entry.split_once('=')?;
            let key = key.trim();
            if key.is_empty() {
                return None;
            }
            Some((String::from(key), percent_decode(value.trim())?))
        })
        .collect()
}

/// `%XX` escapes decoded; `None` for a bad escape or bytes that are not UTF-8.
#[cfg(feature = "std")]
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = alloc::vec::Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `unknown_service:<comm>`, as the semantic conventions ask when no name is given.
fn unknown_service() -> String {
    let mut comm = [0u8; 64];
    match read_proc_self_comm(&mut comm) {
        Some(name) if !name.is_empty() => format!("unknown_service:{name}"),
        _ => String::from("unknown_service"),
    }
}

fn read_proc_self_comm(buf: &mut [u8]) -> Option<&str> {
    use rustix::fs::{Mode, OFlags, CWD};
    let fd = rustix::fs::openat(
        CWD,
        "/proc/self/comm",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let n = rustix::io::retry_on_intr(|| rustix::io::read(&fd, &mut *buf)).ok()?;
    let text = core::str::from_utf8(buf.get(..n)?).ok()?;
    Some(text.trim_end_matches('\n'))
}

/// A random (version 4, RFC 9562) UUID in its lowercase hyphenated form.
pub(crate) fn random_uuid_v4() -> Result<String, Errno> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    // Version 4 in the high nibble of byte 6, variant 0b10 in the high bits of byte 8.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = |range: core::ops::Range<usize>| {
        bytes[range]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    Ok(format!(
        "{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_shape() {
        let a = random_uuid_v4().unwrap();
        let b = random_uuid_v4().unwrap();
        assert_ne!(a, b);
        let groups: alloc::vec::Vec<&str> = a.split('-').collect();
        let lens: alloc::vec::Vec<usize> = groups.iter().map(|g| g.len()).collect();
        assert_eq!(lens, [8, 4, 4, 4, 12]);
        assert!(a.bytes().all(|c| c == b'-' || c.is_ascii_hexdigit()));
        assert!(a.bytes().all(|c| !c.is_ascii_uppercase()));
        assert_eq!(&groups[2][..1], "4");
        assert!(matches!(&groups[3][..1], "8" | "9" | "a" | "b"));
    }

    #[cfg(feature = "std")]
    #[test]
    fn resource_attributes_from_the_environment_format() {
        let pairs = parse_resource_attributes(
            " service.name = checkout ,deployment.environment.name=prod,team=pay%20ments,bad,=x,k=%zz",
        );
        let pairs: alloc::vec::Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("service.name", "checkout"),
                ("deployment.environment.name", "prod"),
                ("team", "pay ments"),
            ]
        );
        assert!(parse_resource_attributes("").is_empty());
    }

    #[test]
    fn defaults_and_replacement() {
        let r = Resource::builder()
            .service_name("first")
            .attribute("k", 1)
            .service_name("second")
            .attribute(SERVICE_VERSION, "2.0")
            .build()
            .unwrap();
        assert_eq!(r.service_name(), Some("second"));
        assert_eq!(r.get("k"), Some(&OwnedValue::Int(1)));
        assert_eq!(r.get(SERVICE_VERSION), Some(&OwnedValue::from("2.0")));
        assert_eq!(
            r.get(TELEMETRY_SDK_LANGUAGE),
            Some(&OwnedValue::from("rust"))
        );
        assert_eq!(
            r.get(TELEMETRY_SDK_NAME),
            Some(&OwnedValue::from("otel-ctx-writer"))
        );
        assert!(r.service_instance_id().is_some_and(|id| id.len() == 36));
        let names = r
            .attributes()
            .iter()
            .filter(|a| a.key == SERVICE_NAME)
            .count();
        assert_eq!(names, 1);

        let given = Resource::builder()
            .service_instance_id("fixed")
            .telemetry_sdk("opentelemetry", "0.30.0")
            .build()
            .unwrap();
        assert_eq!(given.service_instance_id(), Some("fixed"));
        assert_eq!(
            given.get(TELEMETRY_SDK_NAME),
            Some(&OwnedValue::from("opentelemetry"))
        );
        assert!(given
            .service_name()
            .is_some_and(|n| n.starts_with("unknown_service")));
    }
}
