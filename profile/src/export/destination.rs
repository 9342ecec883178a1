//! Where the requests go, and the OTLP/HTTP defaults: the signal's path, the endpoint
//! and the timeout.

use std::path::PathBuf;
use std::time::Duration;

use super::tls::Tls;

/// The path of the profiles signal under an OTLP/HTTP base URL.
pub const PROFILES_PATH: &str = "v1development/profiles";
/// The collector's OTLP/HTTP address when none is given (the OTLP default).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// How long one request may take, and the final flush, unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// An OTLP/HTTP receiver.
    Http {
        /// The full URL of the profiles signal (`.../v1development/profiles`).
        url: String,
        /// Headers sent with every request (authentication).
        headers: Vec<(String, String)>,
        /// Gzip the body (`Content-Encoding: gzip`).
        gzip: bool,
        /// Whom an `https://` receiver is trusted by, and the client certificate.
        tls: Tls,
    },
    /// A file of requests, each a 4-byte big-endian length then the protobuf bytes.
    File(PathBuf),
}

impl Destination {
    /// How a summary names it: the URL or the path.
    pub fn describe(&self) -> String {
        match self {
            Self::Http { url, .. } => url.clone(),
            Self::File(path) => path.display().to_string(),
        }
    }
}
