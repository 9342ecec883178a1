//! The exporter's parts an embedder cannot reach (`profile/tests/export.rs` drives the
//! rest through the public API).

use super::worker::{gzip, retry_after, MAX_BACKOFF};
use super::*;

#[test]
fn retry_after_in_seconds_and_bounded() {
    assert_eq!(retry_after(" 7 "), Some(Duration::from_secs(7)));
    assert_eq!(retry_after("0"), Some(Duration::ZERO));
    assert_eq!(retry_after("3600"), Some(MAX_BACKOFF));
    // The HTTP-date form is not followed: the backoff applies.
    assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    assert_eq!(retry_after("-1"), None);
}

#[test]
fn gzip_round_trips() {
    use std::io::Read as _;
    let body = b"profiles profiles profiles profiles".repeat(100);
    let packed = gzip(&body);
    assert!(packed.len() < body.len() / 10);
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&packed[..])
        .read_to_end(&mut out)
        .expect("gzip");
    assert_eq!(out, body);
}

#[test]
fn a_destination_describes_itself() {
    let http = Destination::Http {
        url: "http://c:4318/v1development/profiles".to_owned(),
        headers: Vec::new(),
        gzip: true,
    };
    assert_eq!(http.describe(), "http://c:4318/v1development/profiles");
    assert_eq!(Destination::File("/tmp/x".into()).describe(), "/tmp/x");
    let options = Options::new(
        http,
        OtlpScope {
            name: "p".into(),
            version: "1".into(),
        },
    );
    assert_eq!(
        (options.queue_bytes, options.timeout),
        (DEFAULT_QUEUE_BYTES, DEFAULT_TIMEOUT)
    );
    assert!(options.user_agent.starts_with("otel-ctx-profile/"));
}
