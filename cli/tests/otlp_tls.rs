//! `otel-ctx profile PID --otlp https://...` to a receiver whose certificate a CA of the
//! test's own signs: trusted through `--otlp-ca` and through
//! `OTEL_EXPORTER_OTLP_CERTIFICATE`, refused (exit 3, the reason said) without either,
//! and a receiver that asks for a client certificate given one by `--otlp-client-cert`
//! and `--otlp-client-key`. TLS flags on an `http://` URL are refused before sampling.
//! Root (BPF), gcc.
#![cfg(feature = "ebpf")]

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use rcgen::ExtendedKeyUsagePurpose;

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;
#[path = "../../profile/tests/support/tls.rs"]
mod tls;

use fixture::{build_routes, Fixture};
use support::{bounded, otel_ctx, text};
use tls::{https_receiver, Pki};

// Each test builds its own fixture (`build_routes` writes to a path of its name): the
// tests run at once, and one must not run the binary the other is still linking.

/// `otel-ctx profile <pid> --otlp=<url> --duration 2s <args>` with `env`: exit code and
/// stderr.
fn profile(pid: u32, url: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(otel_ctx());
    command
        .args(["profile", &pid.to_string(), &format!("--otlp={url}")])
        .args(["--duration", "2s", "--otlp-timeout", "2s"])
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_CERTIFICATE")
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE")
        .envs(env.iter().copied());
    let output = bounded::output(&mut command, bounded::DEADLINE).expect("run otel-ctx");
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
    (output.status.code(), text(&output.stderr))
}

/// The next request the receiver got, un-gzipped.
fn received(rx: &mpsc::Receiver<Vec<u8>>) -> Option<Vec<u8>> {
    rx.recv_timeout(Duration::from_secs(1)).ok()
}

#[test]
fn an_https_receiver_trusted_by_flag_or_variable() {
    let pki = Pki::new("cli");
    let server = pki.leaf(
        "server",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (url, rx) = https_receiver(&server, None);
    let fixture = Fixture::start_with_env(
        &build_routes("tls-routes", &[]),
        &[],
        &[("OTEL_SERVICE_NAME", "tls-service")],
    );
    let pid = fixture.pid;
    let ca = pki.ca_path();
    let ca = ca.to_str().expect("a UTF-8 path");

    let (code, stderr) = profile(pid, &url, &["--otlp-ca", ca], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let request = received(&rx).expect("a request");
    // The service's resource is in it.
    assert!(request.windows(11).any(|w| w == b"tls-service"), "{stderr}");

    let (code, stderr) = profile(pid, &url, &[], &[("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(received(&rx).is_some());

    // The Mozilla roots do not know the test's CA: nothing delivered, said, exit 3.
    let (code, stderr) = profile(pid, &url, &[], &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("otel-ctx: cannot deliver to {url}/")),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    assert!(received(&rx).is_none());

    // On an http:// URL the flag is a mistake, said before any sampling.
    let (code, stderr) = profile(pid, "http://127.0.0.1:1", &["--otlp-ca", ca], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--otlp-ca is for an https:// URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("samples in"), "{stderr}");
    drop(fixture);
}

#[test]
fn a_receiver_that_asks_for_a_client_certificate() {
    let pki = Pki::new("cli-mutual");
    let server = pki.leaf(
        "server",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = pki.leaf("client", &["otel-ctx"], ExtendedKeyUsagePurpose::ClientAuth);
    let (url, rx) = https_receiver(&server, Some(&pki));
    let fixture = Fixture::start_with_env(&build_routes("tls-routes-mutual", &[]), &[], &[]);
    let ca = pki.ca_path();
    let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_owned();
    let (ca, cert, key) = (path(&ca), path(&client.cert_path), path(&client.key_path));

    let (code, stderr) = profile(fixture.pid, &url, &["--otlp-ca", &ca], &[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(received(&rx).is_none());

    let flags = [
        "--otlp-ca",
        &ca,
        "--otlp-client-cert",
        &cert,
        "--otlp-client-key",
        &key,
    ];
    let (code, stderr) = profile(fixture.pid, &url, &flags, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(received(&rx).is_some());
    drop(fixture);
}
