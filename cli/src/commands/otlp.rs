//! The flags of `profile --otlp` and `--otlp-file`, turned into the profile layer's
//! exporter settings (`otel_ctx_profile::export`, which reads the `OTEL_EXPORTER_OTLP_*`
//! environment, queues, retries and sends), and its sizes as people read them.

#[cfg(feature = "ebpf")]
use std::path::Path;
#[cfg(feature = "ebpf")]
use std::time::Duration;

use bytesize::ByteSize;
#[cfg(feature = "ebpf")]
use otel_ctx_profile::export::{self, ConfigError, Destination, Environment};

/// The destination `--otlp [URL]`, `--otlp-header` and `--otlp-file` ask for: a file,
/// or OTLP/HTTP with the exporter's environment filling in what the flags leave out
/// (`export::http_destination`); `--otlp-header` overrides the environment's headers
/// key by key. `None` when neither `--otlp` nor `--otlp-file` is given.
#[cfg(feature = "ebpf")]
pub fn destination(
    otlp: Option<Option<&str>>,
    headers: &[String],
    file: Option<&Path>,
    env: &dyn Environment,
) -> Result<Option<Destination>, String> {
    let url = match (otlp, file) {
        (Some(_), Some(_)) => return Err("give --otlp or --otlp-file, not both".to_owned()),
        (None, Some(path)) => return Ok(Some(Destination::File(path.to_owned()))),
        (None, None) => return Ok(None),
        (Some(url), None) => url,
    };
    let headers = headers
        .iter()
        .map(|header| export::parse_header(header).map_err(|e| format!("--otlp-header {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    export::http_destination(url, headers, env)
        .map(Some)
        .map_err(|e| match e {
            // The URL the flag gave, named by its flag.
            ConfigError::NotHttp { .. } if url.is_some() => format!("--otlp {e}"),
            e => e.to_string(),
        })
}

/// The request timeout: `--otlp-timeout`, else the environment's, else the default.
#[cfg(feature = "ebpf")]
pub fn timeout(flag: Option<Duration>, env: &dyn Environment) -> Result<Duration, String> {
    match flag {
        Some(timeout) => Ok(timeout),
        None => export::timeout(env).map_err(|e| e.to_string()),
    }
}

/// `--otlp-queue`: `64MiB`, `512KiB`, `1GiB`, `64MB` (10^6 bytes: `k`, `M` and `G` are
/// decimal, `Ki`, `Mi` and `Gi` binary) or a number of bytes.
pub fn parse_size(arg: &str) -> Result<usize, String> {
    let arg = arg.trim();
    let size: ByteSize = arg
        .parse()
        .map_err(|e| format!("{arg:?} is not a size such as 64MiB, 512KiB or 1000000 ({e})"))?;
    // bytesize saturates what overflows a u64.
    usize::try_from(size.as_u64())
        .ok()
        .filter(|&n| n > 0 && size.as_u64() < u64::MAX)
        .ok_or_else(|| format!("{arg:?}: use a size from 1 byte to the memory there is"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("16 KiB"), Ok(16 << 10));
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1MiB").is_err());
        let unit = parse_size("5 parsecs").unwrap_err();
        assert!(unit.contains("not a size such as 64MiB"), "{unit}");
        assert!(parse_size(&format!("{}GiB", u64::MAX)).is_err());
    }

    #[cfg(feature = "ebpf")]
    #[test]
    fn the_flags_over_the_environment() {
        struct Env;
        impl Environment for Env {
            fn var(&self, name: &str) -> Option<String> {
                (name == "OTEL_EXPORTER_OTLP_HEADERS").then(|| "x-tenant=env".to_owned())
            }
        }
        assert_eq!(destination(None, &[], None, &Env), Ok(None));
        let path = Path::new("/tmp/x.otlp");
        assert_eq!(
            destination(None, &[], Some(path), &Env),
            Ok(Some(Destination::File(path.to_owned())))
        );
        assert!(destination(Some(None), &[], Some(path), &Env)
            .unwrap_err()
            .contains("not both"));
        let flags = ["X-Tenant=flag".to_owned()];
        match destination(Some(Some("http://c:1")), &flags, None, &Env) {
            Ok(Some(Destination::Http { url, headers, .. })) => {
                assert_eq!(url, "http://c:1/v1development/profiles");
                assert_eq!(headers, [("X-Tenant".to_owned(), "flag".to_owned())]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            destination(Some(None), &["novalue".to_owned()], None, &Env),
            Err("--otlp-header \"novalue\": give KEY=VALUE".to_owned())
        );
        let e = destination(Some(Some("collector:4317")), &[], None, &Env).unwrap_err();
        assert!(e.starts_with("--otlp collector:4317/"), "{e}");
        assert!(e.contains("give an http:// or https:// URL"), "{e}");
        let flag = Some(Duration::from_secs(2));
        assert_eq!(timeout(flag, &Env), Ok(Duration::from_secs(2)));
        assert_eq!(timeout(None, &Env), Ok(export::DEFAULT_TIMEOUT));
    }
}
