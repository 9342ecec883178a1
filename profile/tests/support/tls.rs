//! A certificate authority of a test's own, the certificates it signs as PEM files, and
//! an HTTPS receiver on 127.0.0.1 that answers 200 to each request (rustls; with a CA
//! given, it asks for a client certificate signed by it). Shared by the profile crate's
//! TLS tests and the tool's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA, and a key and certificate it signed, as PEM files in a folder of their own.
pub struct Pki {
    pub dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate signed by the CA, and its key.
pub struct Leaf {
    der: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("otel-ctx-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("otel-ctx test CA {name}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key"))
            .expect("the CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write the CA");
        Self { dir, ca }
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` (DNS names or IP addresses), for a server or a client.
    pub fn leaf(&self, file: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.ca).expect("signed");
        let cert_path = self.dir.join(format!("{file}.pem"));
        let key_path = self.dir.join(format!("{file}-key.pem"));
        std::fs::write(&cert_path, cert.pem()).expect("write the certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write the key");
        Leaf {
            der: cert.der().clone(),
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_path,
            key_path,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTPS receiver on 127.0.0.1 with `server`'s certificate that answers 200 to each
/// request; with `clients`, it asks for a client certificate signed by that CA. Each
/// request's body goes to the channel, un-gzipped (empty if it was not gzip).
pub fn https_receiver(server: &Leaf, clients: Option<&Pki>) -> (String, mpsc::Receiver<Vec<u8>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(pki) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(pki.ca.der().clone()).expect("the client CA");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = Arc::new(
        builder
            .with_single_cert(vec![server.der.clone()], server.key.clone_key())
            .expect("the server's certificate"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let Ok(connection) = rustls::ServerConnection::new(config.clone()) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            // A client that refused the certificate, or gave none, fails the handshake
            // here: nothing is received.
            let Some(body) = read_body(&mut tls) else {
                continue;
            };
            let _ =
                tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            let mut raw = Vec::new();
            if flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut raw)
                .is_err()
            {
                raw.clear();
            }
            if tx.send(raw).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

/// The body of one HTTP request.
fn read_body(stream: &mut impl Read) -> Option<Vec<u8>> {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        if line.is_empty() {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}
