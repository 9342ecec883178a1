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
        tls: Default::default(),
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

#[test]
fn delivery_says_what_the_requests_came_to() {
    let mut stats = Stats::default();
    assert_eq!(stats.delivery(), Delivery::NothingToSend);
    stats.requests = 3;
    stats.sent = 3;
    assert_eq!(stats.delivery(), Delivery::Complete);
    // A warning in a partial success loses nothing.
    stats.last_error = Some("the collector warned: slow down".to_owned());
    assert_eq!(stats.delivery(), Delivery::Complete);
    stats.rejected_profiles = 2;
    let Delivery::Partial(loss) = stats.delivery() else {
        panic!("{stats:?}")
    };
    assert_eq!(loss.to_string(), "2 profiles rejected by the collector");
    stats.rejected_profiles = 0;
    stats.requests = 5;
    stats.dropped = 1;
    stats.dropped_samples = 30;
    stats.rejected = 1;
    stats.rejected_samples = 12;
    stats.dropped_batches = 1;
    let Delivery::Partial(loss) = stats.delivery() else {
        panic!("{stats:?}")
    };
    assert_eq!((loss.requests, loss.of, loss.samples), (2, 5, 42));
    assert_eq!(
        loss.to_string(),
        "2 of 5 requests not delivered (42 samples), 1 batches dropped before encoding"
    );
    // Something to send, nothing sent: failed, whether the requests were dropped or the
    // batches never became requests.
    stats.sent = 0;
    assert!(matches!(stats.delivery(), Delivery::Failed(_)));
    let only_batches = Stats {
        dropped_batches: 4,
        ..Stats::default()
    };
    let Delivery::Failed(loss) = only_batches.delivery() else {
        panic!("{only_batches:?}")
    };
    assert_eq!(loss.to_string(), "4 batches dropped before encoding");
}
