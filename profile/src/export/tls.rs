//! How an `https://` receiver is trusted, and who the exporter is to it: the
//! certificates of `OTEL_EXPORTER_OTLP_[PROFILES_]CERTIFICATE` trusted in place of the
//! Mozilla roots, and the client certificate and key of
//! `OTEL_EXPORTER_OTLP_[PROFILES_]CLIENT_CERTIFICATE` and `_CLIENT_KEY` for a receiver
//! that asks for one (mutual TLS), each a PEM file, as the SDKs read them. Files are read
//! when the settings are made, so that a path that cannot be used is said before any
//! sampling.

use std::fmt;
use std::path::{Path, PathBuf};

use ureq::tls::{parse_pem, Certificate, ClientCert, PemItem, RootCerts};

use super::error::ConfigError;

/// The most bytes of a PEM file read: a bundle of a few hundred certificates.
const MAX_PEM: u64 = 4 << 20;

/// The TLS settings of an OTLP/HTTP destination; the default trusts the Mozilla roots and
/// gives no client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// The certificates a receiver's chain must lead to, in place of the Mozilla roots.
    pub trusted: Option<Trusted>,
    /// The certificate and key the exporter shows a receiver that asks for one.
    pub client: Option<ClientIdentity>,
}

/// Certificates read from a PEM file, trusted as roots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trusted {
    /// The file they came from.
    pub path: PathBuf,
    /// Each certificate, DER.
    certificates: Vec<Vec<u8>>,
}

impl Trusted {
    /// The certificates of PEM file `path`; `setting` (the flag or variable that named
    /// it) is named by an error: the file cannot be read, is not PEM, or holds no
    /// certificate.
    pub fn read(path: &Path, setting: &str) -> Result<Self, ConfigError> {
        let certificates = read_pem(path, setting)?
            .into_iter()
            .filter_map(|item| match item {
                PemItem::Certificate(c) => Some(c.der().to_vec()),
                _ => None,
            })
            .collect::<Vec<_>>();
        if certificates.is_empty() {
            return Err(unusable(setting, path, "it holds no PEM certificate"));
        }
        Ok(Self {
            path: path.to_owned(),
            certificates,
        })
    }

    /// How many certificates the file holds.
    pub fn len(&self) -> usize {
        self.certificates.len()
    }

    /// Never: a file without a certificate is refused.
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }
}

/// A client certificate chain and its private key, from PEM files.
#[derive(Clone)]
pub struct ClientIdentity {
    /// The certificate file.
    pub certificate_path: PathBuf,
    /// The key file.
    pub key_path: PathBuf,
    identity: ClientCert,
}

impl PartialEq for ClientIdentity {
    fn eq(&self, other: &Self) -> bool {
        fn der(c: &ClientCert) -> (Vec<&[u8]>, &[u8]) {
            let chain = c.certs().iter().map(Certificate::der).collect();
            (chain, c.private_key().as_ref())
        }
        self.certificate_path == other.certificate_path
            && self.key_path == other.key_path
            && der(&self.identity) == der(&other.identity)
    }
}

impl Eq for ClientIdentity {}

impl fmt::Debug for ClientIdentity {
    // The key's bytes are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certificate_path", &self.certificate_path)
            .field("key_path", &self.key_path)
            .field("chain", &self.identity.certs().len())
            .finish_non_exhaustive()
    }
}

impl ClientIdentity {
    /// The certificates of PEM file `certificate` (the first is the client's own) and
    /// the first private key of PEM file `key`; `settings` name the two in errors.
    pub fn read(
        certificate: &Path,
        key_path: &Path,
        settings: [&str; 2],
    ) -> Result<Self, ConfigError> {
        let key = key_path;
        let chain: Vec<Certificate<'static>> = Trusted::read(certificate, settings[0])?
            .certificates
            .iter()
            .map(|der| Certificate::from_der(der).to_owned())
            .collect();
        let key = read_pem(key, settings[1])?
            .into_iter()
            .find_map(|item| match item {
                PemItem::PrivateKey(k) => Some(k),
                _ => None,
            })
            .ok_or_else(|| unusable(settings[1], key, "it holds no PEM private key"))?;
        Ok(Self {
            certificate_path: certificate.to_owned(),
            key_path: key_path.to_owned(),
            identity: ClientCert::new_with_certs(&chain, key),
        })
    }
}

impl Tls {
    /// Whether anything differs from the default (the Mozilla roots, no client
    /// certificate).
    pub fn is_default(&self) -> bool {
        self.trusted.is_none() && self.client.is_none()
    }

    /// The TLS configuration of the exporter's HTTP agent.
    pub(super) fn config(&self) -> ureq::tls::TlsConfig {
        let mut config = ureq::tls::TlsConfig::builder();
        if let Some(trusted) = &self.trusted {
            let roots: Vec<Certificate<'static>> = trusted
                .certificates
                .iter()
                .map(|der| Certificate::from_der(der).to_owned())
                .collect();
            config = config.root_certs(RootCerts::new_with_certs(&roots));
        }
        if let Some(client) = &self.client {
            config = config.client_cert(Some(client.identity.clone()));
        }
        config.build()
    }
}

/// The PEM items of file `path` (at most [`MAX_PEM`] bytes, a regular file).
fn read_pem(path: &Path, setting: &str) -> Result<Vec<PemItem<'static>>, ConfigError> {
    use std::io::Read;
    // Looked at before it is opened: opening a FIFO would wait for a writer.
    let meta = std::fs::metadata(path).map_err(|e| unusable(setting, path, &e.to_string()))?;
    if !meta.is_file() {
        return Err(unusable(setting, path, "not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| unusable(setting, path, &e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unusable(setting, path, &e.to_string()))?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(unusable(setting, path, "larger than 4 MiB"));
    }
    parse_pem(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(setting, path, &format!("not PEM ({e})")))
}

fn unusable(setting: &str, path: &Path, reason: &str) -> ConfigError {
    ConfigError::Pem {
        setting: setting.to_owned(),
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}
