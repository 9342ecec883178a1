//! What the exporter's settings can be refused for.

/// A setting the exporter cannot work with; the message names the setting and what to
/// give instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL is not `http://` or `https://`.
    #[error(
        "{url}: give an http:// or https:// URL (OTLP over HTTP/protobuf; gRPC is not \
         supported)"
    )]
    NotHttp {
        /// The URL.
        url: String,
    },
    /// `OTEL_EXPORTER_OTLP_[PROFILES_]PROTOCOL` asks for another protocol than
    /// `http/protobuf`.
    #[error(
        "{variable}={value}: OTLP profiles are sent over HTTP/protobuf only (the \
         collector's port 4318); set it to http/protobuf or unset it"
    )]
    Protocol {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A pair of `OTEL_EXPORTER_OTLP_[PROFILES_]HEADERS` is not `key=value`.
    #[error("{variable}: {pair:?} is not key=value")]
    HeaderVariable {
        /// The variable.
        variable: &'static str,
        /// The pair.
        pair: String,
    },
    /// A header given to [`parse_header`](super::parse_header) is not `KEY=VALUE`.
    #[error("{given:?}: give KEY=VALUE")]
    Header {
        /// What was given.
        given: String,
    },
    /// A header given to [`parse_header`](super::parse_header) has an empty key.
    #[error("{given:?}: the key is empty")]
    HeaderKey {
        /// What was given.
        given: String,
    },
    /// `OTEL_EXPORTER_OTLP_[PROFILES_]COMPRESSION` is neither `gzip` nor `none`.
    #[error("{variable}={value}: use gzip or none")]
    Compression {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A PEM file of the TLS settings cannot be used.
    #[error("{setting} {}: {reason}", path.display())]
    Pem {
        /// The flag or variable that named it.
        setting: String,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error("{given} is set, and {missing} is not: give both, or neither")]
    Pair {
        /// The setting given.
        given: String,
        /// The one missing.
        missing: String,
    },
    /// TLS settings for a URL that does not use TLS.
    #[error("{setting} is for an https:// URL, and the destination is {url}")]
    NotTls {
        /// The setting.
        setting: String,
        /// The URL.
        url: String,
    },
    /// `OTEL_EXPORTER_OTLP_[PROFILES_]TIMEOUT` is not a positive number of milliseconds.
    #[error("{variable}={value}: give milliseconds, such as 10000")]
    Timeout {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
}
