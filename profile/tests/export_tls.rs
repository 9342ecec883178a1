//! The OTLP exporter against an HTTPS receiver on 127.0.0.1 whose certificate a CA of the
//! test's own signs: trusted through `OTEL_EXPORTER_OTLP_CERTIFICATE` and its profiles
//! twin, refused without them (the Mozilla roots do not know the CA), and a receiver
//! that asks for a client certificate given one through `_CLIENT_CERTIFICATE` and
//! `_CLIENT_KEY`. Unusable files are said when the settings are made.
#![cfg(feature = "http")]

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use otel_ctx_profile::export::{
    self, ConfigError, Delivery, Destination, Environment, Exporter, Options,
};
use otel_ctx_profile::otlp::OtlpScope;
use otel_ctx_profile::{Profile, ProfileOptions, Profiler};
use otel_ctx_reader::UserRegisters;
use otel_ctx_sampler::Sample;
use prost::Message;
use rcgen::ExtendedKeyUsagePurpose;

#[path = "support/tls.rs"]
mod tls;

use tls::{https_receiver, Pki};

struct Env(HashMap<&'static str, String>);

impl Environment for Env {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}

fn env(pairs: &[(&'static str, &Path)]) -> Env {
    Env(pairs
        .iter()
        .map(|(k, v)| (*k, v.display().to_string()))
        .collect())
}

/// A profile of one sample of process `pid`.
fn profile(pid: u32) -> Profile {
    let mut profiler = Profiler::new(pid, ProfileOptions::default());
    profiler.add(&Sample::new(
        pid,
        pid,
        "main",
        Some(UserRegisters::default()),
        &[],
    ));
    profiler.profile()
}

/// Sends one profile to `destination`; what the receiver got, if anything, and how the
/// delivery ended (with the first error).
fn deliver(
    destination: Destination,
    rx: &mpsc::Receiver<Vec<u8>>,
) -> (Option<Vec<u8>>, (Delivery, Option<String>)) {
    let scope = OtlpScope {
        name: "otel-ctx-test".to_owned(),
        version: "test".to_owned(),
    };
    let exporter =
        Exporter::start(Options::new(destination, scope).with_timeout(Duration::from_secs(3)))
            .expect("start");
    exporter.submit(vec![profile(4242)]);
    let stats = exporter.finish();
    (
        rx.recv_timeout(Duration::from_millis(500)).ok(),
        (stats.delivery(), stats.first_error.clone()),
    )
}

fn https(url: &str, env: &Env) -> Destination {
    export::http_destination(Some(url), Vec::new(), env).expect("a destination")
}

#[test]
fn a_receiver_trusted_through_the_certificate_variables() {
    let pki = Pki::new("server");
    let server = pki.leaf(
        "server",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (url, rx) = https_receiver(&server, None);

    // The Mozilla roots do not know the test's CA: nothing is delivered, and the failure
    // says why.
    let (got, delivery) = deliver(https(&url, &env(&[])), &rx);
    assert!(got.is_none());
    match delivery {
        (Delivery::Failed(_), Some(error)) => {
            let said = error.to_lowercase();
            assert!(
                said.contains("certificate") || said.contains("issuer"),
                "{said}"
            );
        }
        other => panic!("{other:?}"),
    }

    // Trusted through the general variable.
    let general = env(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.ca_path())]);
    let (got, delivery) = deliver(https(&url, &general), &rx);
    let request = ExportProfilesServiceRequest::decode(&got.expect("a request")[..])
        .expect("an export request");
    assert_eq!(request.resource_profiles.len(), 1);
    assert!(
        matches!(delivery, (Delivery::Complete, None)),
        "{delivery:?}"
    );

    // The profiles' own variable comes first: another CA in the general one is not used.
    let other = Pki::new("other");
    let both = env(&[
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", &other.ca_path()),
        ("OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE", &pki.ca_path()),
    ]);
    let (got, _) = deliver(https(&url, &both), &rx);
    assert!(got.is_some());
    let wrong = env(&[("OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE", &other.ca_path())]);
    let (got, delivery) = deliver(https(&url, &wrong), &rx);
    assert!(
        got.is_none() && matches!(delivery, (Delivery::Failed(_), Some(_))),
        "{delivery:?}"
    );

    // An http:// URL takes no TLS settings, whatever the variables say.
    match export::http_destination(Some("http://127.0.0.1:1"), Vec::new(), &general) {
        Ok(Destination::Http { tls, .. }) => assert!(tls.is_default()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_receiver_that_asks_for_a_client_certificate() {
    let pki = Pki::new("mutual");
    let server = pki.leaf(
        "server",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = pki.leaf("client", &["exporter"], ExtendedKeyUsagePurpose::ClientAuth);
    let (url, rx) = https_receiver(&server, Some(&pki));

    let ca = pki.ca_path();
    let without = env(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca)]);
    let (got, delivery) = deliver(https(&url, &without), &rx);
    assert!(
        got.is_none() && matches!(delivery, (Delivery::Failed(_), Some(_))),
        "{delivery:?}"
    );

    let with = env(&[
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
        (
            "OTEL_EXPORTER_OTLP_PROFILES_CLIENT_CERTIFICATE",
            &client.cert_path,
        ),
        ("OTEL_EXPORTER_OTLP_PROFILES_CLIENT_KEY", &client.key_path),
    ]);
    let (got, delivery) = deliver(https(&url, &with), &rx);
    assert!(got.is_some());
    assert!(
        matches!(delivery, (Delivery::Complete, None)),
        "{delivery:?}"
    );

    // Its Debug form names the files and never shows the key.
    let Destination::Http { tls, .. } = https(&url, &with) else {
        unreachable!()
    };
    let key = std::fs::read_to_string(&client.key_path).expect("the key");
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let shown = format!("{tls:?}");
    assert!(
        shown.contains("client-key.pem") && !shown.contains(&body[..20]),
        "{shown}"
    );
}

#[test]
fn unusable_tls_files_are_said_at_once() {
    let pki = Pki::new("files");
    let client = pki.leaf("client", &["exporter"], ExtendedKeyUsagePurpose::ClientAuth);
    let url = "https://127.0.0.1:1";
    let said = |pairs: &[(&'static str, &Path)]| {
        export::http_destination(Some(url), Vec::new(), &env(pairs))
            .expect_err("refused")
            .to_string()
    };
    let missing = pki.dir.join("missing.pem");
    let e = said(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &missing)]);
    assert!(
        e.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE ") && e.contains("No such file"),
        "{e}"
    );
    // A key is not a certificate.
    let e = said(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &client.key_path)]);
    assert!(e.ends_with("it holds no PEM certificate"), "{e}");
    // Nor is a folder, or a file that is not PEM.
    let e = said(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.dir)]);
    assert!(e.ends_with("not a regular file"), "{e}");
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(
        &garbage,
        b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let e = said(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &garbage)]);
    assert!(e.contains("not PEM"), "{e}");
    // A certificate without its key, and a key file without a key.
    let e = export::http_destination(
        Some(url),
        Vec::new(),
        &env(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &client.cert_path)]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, ConfigError::Pair { missing, .. } if missing == "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        "{e}"
    );
    let e = said(&[
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &client.cert_path),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &client.cert_path),
    ]);
    assert!(e.ends_with("it holds no PEM private key"), "{e}");
}
