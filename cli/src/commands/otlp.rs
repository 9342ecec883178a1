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
/// key by key, and the TLS flags the environment's TLS settings. `None` when neither
/// `--otlp` nor `--otlp-file` is given.
#[cfg(feature = "ebpf")]
pub fn destination(
    otlp: Option<Option<&str>>,
    headers: &[String],
    file: Option<&Path>,
    flags: TlsFlags<'_>,
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
    let mut destination = export::http_destination(url, headers, env).map_err(|e| match e {
        // The URL the flag gave, named by its flag.
        ConfigError::NotHttp { .. } if url.is_some() => format!("--otlp {e}"),
        e => e.to_string(),
    })?;
    if let Destination::Http { url, tls, .. } = &mut destination {
        apply_tls_flags(url, tls, flags).map_err(|e| e.to_string())?;
    }
    Ok(Some(destination))
}

/// `--otlp-ca`, `--otlp-client-cert` and `--otlp-client-key`: the files they name, read
/// now.
#[cfg(feature = "ebpf")]
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsFlags<'a> {
    /// `--otlp-ca`.
    pub ca: Option<&'a Path>,
    /// `--otlp-client-cert` with `--otlp-client-key`.
    pub client: Option<(&'a Path, &'a Path)>,
}

/// Puts `flags` in place of what the environment said, for an `https://` URL; for
/// another, a flag is an error.
#[cfg(feature = "ebpf")]
fn apply_tls_flags(
    url: &str,
    tls: &mut export::Tls,
    flags: TlsFlags<'_>,
) -> Result<(), ConfigError> {
    let given = [
        (flags.ca.is_some(), "--otlp-ca"),
        (flags.client.is_some(), "--otlp-client-cert"),
    ];
    if let Some((_, setting)) = given.iter().find(|(set, _)| *set) {
        if !url.starts_with("https://") {
            return Err(ConfigError::NotTls {
                setting: (*setting).to_owned(),
                url: url.to_owned(),
            });
        }
    }
    if let Some(ca) = flags.ca {
        tls.trusted = Some(export::Trusted::read(ca, "--otlp-ca")?);
    }
    if let Some((certificate, key)) = flags.client {
        tls.client = Some(export::ClientIdentity::read(
            certificate,
            key,
            ["--otlp-client-cert", "--otlp-client-key"],
        )?);
    }
    Ok(())
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
        assert_eq!(
            destination(None, &[], None, TlsFlags::default(), &Env),
            Ok(None)
        );
        let path = Path::new("/tmp/x.otlp");
        assert_eq!(
            destination(None, &[], Some(path), TlsFlags::default(), &Env),
            Ok(Some(Destination::File(path.to_owned())))
        );
        assert!(
            destination(Some(None), &[], Some(path), TlsFlags::default(), &Env)
                .unwrap_err()
                .contains("not both")
        );
        let flags = ["X-Tenant=flag".to_owned()];
        match destination(
            Some(Some("http://c:1")),
            &flags,
            None,
            TlsFlags::default(),
            &Env,
        ) {
            Ok(Some(Destination::Http { url, headers, .. })) => {
                assert_eq!(url, "http://c:1/v1development/profiles");
                assert_eq!(headers, [("X-Tenant".to_owned(), "flag".to_owned())]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            destination(
                Some(None),
                &["novalue".to_owned()],
                None,
                TlsFlags::default(),
                &Env
            ),
            Err("--otlp-header \"novalue\": give KEY=VALUE".to_owned())
        );
        let e = destination(
            Some(Some("collector:4317")),
            &[],
            None,
            TlsFlags::default(),
            &Env,
        )
        .unwrap_err();
        assert!(e.starts_with("--otlp collector:4317/"), "{e}");
        assert!(e.contains("give an http:// or https:// URL"), "{e}");
        let flag = Some(Duration::from_secs(2));
        assert_eq!(timeout(flag, &Env), Ok(Duration::from_secs(2)));
        assert_eq!(timeout(None, &Env), Ok(export::DEFAULT_TIMEOUT));
    }

    #[cfg(feature = "ebpf")]
    #[test]
    fn the_tls_flags_are_for_https_and_read_at_once() {
        struct Env;
        impl Environment for Env {
            fn var(&self, _: &str) -> Option<String> {
                None
            }
        }
        let missing = Path::new("/nonexistent/ca.pem");
        let flags = TlsFlags {
            ca: Some(missing),
            client: None,
        };
        let plain = destination(Some(Some("http://c:4318")), &[], None, flags, &Env).unwrap_err();
        assert!(
            plain.contains("--otlp-ca is for an https:// URL"),
            "{plain}"
        );
        let unread = destination(Some(Some("https://c:4318")), &[], None, flags, &Env).unwrap_err();
        assert!(
            unread.starts_with("--otlp-ca /nonexistent/ca.pem: "),
            "{unread}"
        );
        let client = TlsFlags {
            ca: None,
            client: Some((missing, missing)),
        };
        let unread =
            destination(Some(Some("https://c:4318")), &[], None, client, &Env).unwrap_err();
        assert!(
            unread.starts_with("--otlp-client-cert /nonexistent/ca.pem: "),
            "{unread}"
        );
    }
}
