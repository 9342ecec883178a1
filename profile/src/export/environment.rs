//! The exporter's settings as the OpenTelemetry SDKs read them from the environment
//! (`OTEL_EXPORTER_OTLP_*`), through [`Environment`] so that a test or an embedder can
//! give its own.

use std::path::Path;
use std::time::Duration;

use super::destination::{Destination, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT, PROFILES_PATH};
pub use super::error::ConfigError;
use super::tls::{ClientIdentity, Tls, Trusted};

/// Where the `OTEL_EXPORTER_OTLP_*` settings come from.
pub trait Environment {
    /// The value of variable `name`, if set and not empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

/// The first of `names` that `env` sets, with its value.
pub(super) fn first(
    env: &dyn Environment,
    names: [&'static str; 2],
) -> Option<(&'static str, String)> {
    names
        .into_iter()
        .find_map(|name| env.var(name).map(|value| (name, value)))
}

/// An OTLP/HTTP destination: `url` (a base URL, given the signal's path, or the
/// signal's own URL), else `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT` (the signal's URL, used
/// as it is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL), else [`DEFAULT_ENDPOINT`].
/// Headers from `OTEL_EXPORTER_OTLP_HEADERS` then `OTEL_EXPORTER_OTLP_PROFILES_HEADERS`
/// (`key=value,...`, values percent-decoded), then `headers`, each replacing a header of
/// the same name (any case) given before it; `OTEL_EXPORTER_OTLP_[PROFILES_]COMPRESSION`
/// `none` turns gzip off. `OTEL_EXPORTER_OTLP_[PROFILES_]PROTOCOL`, when set, must be
/// `http/protobuf`. The TLS settings of an `https://` URL come from
/// `OTEL_EXPORTER_OTLP_[PROFILES_]CERTIFICATE`, `_CLIENT_CERTIFICATE` and `_CLIENT_KEY`
/// ([`tls_settings`]); an `http://` URL takes none, whatever they say.
pub fn http_destination(
    url: Option<&str>,
    headers: Vec<(String, String)>,
    env: &dyn Environment,
) -> Result<Destination, ConfigError> {
    let url = match url {
        Some(url) => signal_url(url),
        None => match (
            env.var("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"),
            env.var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            // The signal's own endpoint is used as it is, as the SDKs do.
            (Some(url), _) => url.trim().to_owned(),
            (None, Some(base)) => signal_url(&base),
            (None, None) => signal_url(DEFAULT_ENDPOINT),
        },
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ConfigError::NotHttp { url });
    }
    let protocol = first(
        env,
        [
            "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ],
    );
    if let Some((variable, value)) = protocol.filter(|(_, p)| p.trim() != "http/protobuf") {
        return Err(ConfigError::Protocol { variable, value });
    }
    let mut all: Vec<(String, String)> = Vec::new();
    let mut set = |key: &str, value: String| {
        all.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        all.push((key.to_owned(), value));
    };
    for variable in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
    ] {
        for pair in env.var(variable).iter().flat_map(|v| v.split(',')) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(ConfigError::HeaderVariable {
                    variable,
                    pair: pair.to_owned(),
                });
            };
            // The W3C baggage form the OTLP header variables use: `%XX` escapes; a
            // malformed one is kept as it is.
            let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy();
            set(key.trim(), value.into_owned());
        }
    }
    for (key, value) in headers {
        set(&key, value);
    }
    let compression = first(
        env,
        [
            "OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ],
    );
    let gzip = match compression {
        None => true,
        Some((_, value)) if value.trim() == "gzip" => true,
        Some((_, value)) if value.trim() == "none" => false,
        Some((variable, value)) => return Err(ConfigError::Compression { variable, value }),
    };
    let tls = if url.starts_with("https://") {
        tls_settings(env)?
    } else {
        Tls::default()
    };
    Ok(Destination::Http {
        url,
        headers: all,
        gzip,
        tls,
    })
}

/// A header given as `KEY=VALUE` (split at the first `=`; the key trimmed, the value
/// as it is), as a command line takes it.
pub fn parse_header(given: &str) -> Result<(String, String), ConfigError> {
    let Some((key, value)) = given.split_once('=') else {
        return Err(ConfigError::Header {
            given: given.to_owned(),
        });
    };
    if key.trim().is_empty() {
        return Err(ConfigError::HeaderKey {
            given: given.to_owned(),
        });
    }
    Ok((key.trim().to_owned(), value.to_owned()))
}

/// The request timeout: `OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT` or
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else [`DEFAULT_TIMEOUT`].
pub fn timeout(env: &dyn Environment) -> Result<Duration, ConfigError> {
    let variables = [
        "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ];
    match first(env, variables) {
        None => Ok(DEFAULT_TIMEOUT),
        Some((variable, value)) => match value.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(ConfigError::Timeout { variable, value }),
        },
    }
}

/// `base` with the profiles signal's path, unless it ends with it already.
fn signal_url(base: &str) -> String {
    let base = base.trim();
    if base.trim_end_matches('/').ends_with(PROFILES_PATH) {
        return base.to_owned();
    }
    format!("{}/{PROFILES_PATH}", base.trim_end_matches('/'))
}

/// The settings of `OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE` (else
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`), and of `_CLIENT_CERTIFICATE` with
/// `_CLIENT_KEY` (the profiles' own pair, else the general one): a certificate
/// without its key, or a key without its certificate, is an error.
pub fn tls_settings(env: &dyn Environment) -> Result<Tls, ConfigError> {
    let trusted = first(
        env,
        [
            "OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ],
    )
    .map(|(variable, path)| Trusted::read(Path::new(path.trim()), variable))
    .transpose()?;
    let mut client = None;
    for names in CLIENT_VARIABLES {
        client = match (env.var(names[0]), env.var(names[1])) {
            (None, None) => continue,
            (Some(certificate), Some(key)) => Some(ClientIdentity::read(
                Path::new(certificate.trim()),
                Path::new(key.trim()),
                names,
            )?),
            (Some(_), None) => return Err(pair(names[0], names[1])),
            (None, Some(_)) => return Err(pair(names[1], names[0])),
        };
        break;
    }
    Ok(Tls { trusted, client })
}

/// The client certificate and key variables, the profiles' own first.
const CLIENT_VARIABLES: [[&str; 2]; 2] = [
    [
        "OTEL_EXPORTER_OTLP_PROFILES_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_PROFILES_CLIENT_KEY",
    ],
    [
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    ],
];

fn pair(given: &str, missing: &str) -> ConfigError {
    ConfigError::Pair {
        given: given.to_owned(),
        missing: missing.to_owned(),
    }
}
