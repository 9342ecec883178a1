//! The OTLP exporter as an embedder uses it: its settings from the environment (an
//! injected one), and delivery against a receiver on 127.0.0.1 that answers as each test
//! says, or to a file. The requests are decoded with opentelemetry-proto's types.
#![cfg(feature = "http")]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use otel_ctx_codec::record::RecordHeader;
use otel_ctx_profile::export::{
    self, ConfigError, Delivery, Destination, Environment, Exporter, Options, DEFAULT_TIMEOUT,
    PROFILES_PATH,
};
use otel_ctx_profile::otlp::{self, OtlpScope};
use otel_ctx_profile::{Profile, ProfileOptions, Profiler};
use otel_ctx_reader::ThreadContextRef;
use otel_ctx_reader::UserRegisters;
use otel_ctx_sampler::Sample;
use prost::Message;

struct Env(HashMap<&'static str, &'static str>);

impl Environment for Env {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|v| (*v).to_owned())
    }
}

fn env(pairs: &[(&'static str, &'static str)]) -> Env {
    Env(pairs.iter().copied().collect())
}

fn http(destination: Result<Destination, ConfigError>) -> (String, Vec<(String, String)>, bool) {
    match destination {
        Ok(Destination::Http {
            url, headers, gzip, ..
        }) => (url, headers, gzip),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_destination_from_the_environment() {
    let none = env(&[]);
    // A base URL gets the signal's path, once.
    for given in [
        "http://collector:4318",
        "http://collector:4318/",
        "http://collector:4318/v1development/profiles",
    ] {
        let (url, headers, gzip) = http(export::http_destination(Some(given), vec![], &none));
        assert_eq!(
            url, "http://collector:4318/v1development/profiles",
            "{given}"
        );
        assert!(gzip && headers.is_empty());
    }
    let (url, _, _) = http(export::http_destination(None, vec![], &none));
    assert_eq!(url, "http://localhost:4318/v1development/profiles");
    // The environment: the signal's endpoint as it is, else the base with the path.
    let base = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example:4318")]);
    let (url, _, _) = http(export::http_destination(None, vec![], &base));
    assert_eq!(url, "https://otlp.example:4318/v1development/profiles");
    let signal = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        (
            "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
            "http://c:9999/custom",
        ),
    ]);
    let (url, _, _) = http(export::http_destination(None, vec![], &signal));
    assert_eq!(url, "http://c:9999/custom");
    // A URL given wins over the environment.
    let (url, _, _) = http(export::http_destination(
        Some("http://given:1"),
        vec![],
        &signal,
    ));
    assert_eq!(url, "http://given:1/v1development/profiles");
    // Headers: both variables, percent-decoded (a malformed escape kept), then the
    // given ones, key by key in any case.
    let headers = env(&[
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Basic%20abc, x-tenant=a, x-list=a%2Cb%zz%",
        ),
        ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-tenant=b"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
    ]);
    let given = vec![
        export::parse_header("x-extra=1=2").unwrap(),
        export::parse_header("AUTHORIZATION=Bearer t").unwrap(),
    ];
    let (_, h, gzip) = http(export::http_destination(None, given, &headers));
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        h,
        [
            ("x-list", "a,b%zz%"),
            ("x-tenant", "b"),
            ("x-extra", "1=2"),
            ("AUTHORIZATION", "Bearer t"),
        ]
    );
    assert!(!gzip);
    let decoded = env(&[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic%20abc")]);
    let (_, h, _) = http(export::http_destination(None, vec![], &decoded));
    assert_eq!(h, [("Authorization".to_owned(), "Basic abc".to_owned())]);
}

#[test]
fn settings_that_cannot_work_are_said() {
    let none = env(&[]);
    let grpc = env(&[("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "grpc")]);
    let e = export::http_destination(None, vec![], &grpc).unwrap_err();
    assert_eq!(
        e,
        ConfigError::Protocol {
            variable: "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
            value: "grpc".to_owned()
        }
    );
    assert!(e.to_string().contains("HTTP/protobuf only"), "{e}");
    let e = export::http_destination(Some("collector:4317"), vec![], &none).unwrap_err();
    assert!(e.to_string().contains("http://"), "{e}");
    let bad_pair = env(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,novalue")]);
    let e = export::http_destination(None, vec![], &bad_pair).unwrap_err();
    assert_eq!(
        e.to_string(),
        "OTEL_EXPORTER_OTLP_HEADERS: \"novalue\" is not key=value"
    );
    let zstd = env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")]);
    let e = export::http_destination(None, vec![], &zstd).unwrap_err();
    assert_eq!(
        e.to_string(),
        "OTEL_EXPORTER_OTLP_COMPRESSION=zstd: use gzip or none"
    );
    assert!(export::parse_header("novalue")
        .unwrap_err()
        .to_string()
        .contains("KEY=VALUE"));
    assert!(matches!(
        export::parse_header(" =v"),
        Err(ConfigError::HeaderKey { .. })
    ));
    // Timeouts in milliseconds, the signal's variable first.
    assert_eq!(export::timeout(&none), Ok(DEFAULT_TIMEOUT));
    let t = env(&[
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "9000"),
        ("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "2500"),
    ]);
    assert_eq!(export::timeout(&t), Ok(Duration::from_millis(2500)));
    for bad in ["soon", "0"] {
        let e = export::timeout(&env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", bad)])).unwrap_err();
        assert!(e.to_string().contains("give milliseconds"), "{e}");
    }
}

/// A profile of `samples` samples of one thread under route `/cart`.
fn profile(pid: u32, samples: usize) -> Profile {
    let mut profiler = Profiler::new(pid, ProfileOptions::default());
    // One attribute, key 0 of the key map: /cart.
    let (key_map, attrs_data) = (["http.route".to_owned()], *b"\x00\x05/cart");
    let header = RecordHeader {
        trace_id: [0xab; 16],
        span_id: [0xcd; 8],
        valid: 1,
        trace_flags: 1,
        attrs_data_size: (attrs_data.len() as u16).into(),
    };
    let context = ThreadContextRef::new(header, 0, &attrs_data, &key_map);
    for _ in 0..samples {
        let sample = Sample::new(pid, 7, "worker", Some(UserRegisters::default()), &[]);
        profiler.add(&sample.with_context(Some(context.clone())));
    }
    profiler.profile()
}

fn scope() -> OtlpScope {
    OtlpScope {
        name: "otel-ctx".to_owned(),
        version: "test".to_owned(),
    }
}

fn options(destination: Destination) -> Options {
    Options::new(destination, scope()).with_timeout(Duration::from_secs(5))
}

/// One request as the receiver saw it.
struct Received {
    head: String,
    body: Vec<u8>,
}

/// How the receiver answers one request: status, extra header lines, body.
type Answer = (u16, &'static str, Vec<u8>);

/// A receiver on 127.0.0.1 that answers each request with the next of `answers`, then
/// 200; every request goes to the channel.
fn receiver(answers: Vec<Answer>) -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut answers = answers.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Some(request) = read_request(&stream) else {
                continue;
            };
            let (status, extra, body) = answers.next().unwrap_or((200, "", Vec::new()));
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
            if tx.send(request).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

fn read_request(stream: &TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received { head, body })
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

#[test]
fn retries_what_the_collector_asks_to_retry_and_sends_it_whole() {
    let (url, requests) = receiver(vec![(503, "Retry-After: 1\r\n", b"busy".to_vec())]);
    let destination = Destination::Http {
        url: format!("{url}/{PROFILES_PATH}"),
        headers: vec![("Authorization".to_owned(), "Bearer t".to_owned())],
        gzip: true,
        tls: Default::default(),
    };
    let exporter =
        Exporter::start(options(destination).with_user_agent("test-agent/1")).expect("start");
    exporter.submit(vec![profile(41, 3), profile(42, 2)]);
    let first = requests
        .recv_timeout(Duration::from_secs(5))
        .expect("a request");
    let started = Instant::now();
    let second = requests
        .recv_timeout(Duration::from_secs(5))
        .expect("the request again");
    // Retry-After: 1 was followed (the first backoff is 1 s too, so at least that).
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(first.body, second.body);
    let head = second.head.to_ascii_lowercase();
    assert!(
        head.starts_with("post /v1development/profiles http/1.1"),
        "{head}"
    );
    for line in [
        "content-type: application/x-protobuf",
        "content-encoding: gzip",
        "authorization: bearer t",
        "user-agent: test-agent/1",
    ] {
        assert!(head.contains(line), "{line} in {head}");
    }
    let request =
        ExportProfilesServiceRequest::decode(&gunzip(&second.body)[..]).expect("a request");
    assert_eq!(request.resource_profiles.len(), 2);
    let stats = exporter.finish();
    assert_eq!(
        (
            stats.requests,
            stats.sent,
            stats.retries,
            stats.sent_samples
        ),
        (1, 1, 1, 5)
    );
    assert_eq!(stats.sent_bytes, second.body.len() as u64);
    let error = stats.last_error.clone().unwrap();
    assert!(error.contains("503") && error.contains("busy"), "{error}");
    assert_eq!(stats.first_error, stats.last_error);
    assert_eq!((stats.dropped, stats.queued, stats.queued_bytes), (0, 0, 0));
    // Retried, then delivered: all of it.
    assert_eq!(stats.delivery(), Delivery::Complete);
}

#[test]
fn a_status_not_worth_retrying_rejects_the_request() {
    let (url, requests) = receiver(vec![(400, "", Vec::new())]);
    let exporter = Exporter::start(options(Destination::Http {
        url,
        headers: Vec::new(),
        gzip: false,
        tls: Default::default(),
    }))
    .expect("start");
    exporter.submit(vec![profile(1, 1)]);
    let refused = requests.recv_timeout(Duration::from_secs(5)).expect("sent");
    // Not gzipped when told so: the protobuf itself.
    assert!(ExportProfilesServiceRequest::decode(&refused.body[..]).is_ok());
    exporter.submit(vec![profile(1, 2)]);
    requests.recv_timeout(Duration::from_secs(5)).expect("next");
    let stats = exporter.finish();
    assert_eq!((stats.rejected, stats.sent, stats.retries), (1, 1, 0));
    assert_eq!(stats.sent_samples, 2);
    // One request of two (its one sample) lost: part of it delivered.
    let Delivery::Partial(loss) = stats.delivery() else {
        panic!("{stats:?}");
    };
    assert_eq!((loss.requests, loss.of, loss.samples), (1, 2, 1));
    assert_eq!(
        loss.to_string(),
        "1 of 2 requests not delivered (1 samples)"
    );
    let first = stats.first_error.as_deref().unwrap_or("");
    assert!(first.contains("answered 400"), "{first}");
}

#[test]
fn a_partial_success_is_counted() {
    let partial = |rejected_profiles, message: &str| {
        ExportProfilesServiceResponse {
            partial_success: Some(ExportProfilesPartialSuccess {
                rejected_profiles,
                error_message: message.to_owned(),
            }),
        }
        .encode_to_vec()
    };
    let (url, requests) = receiver(vec![
        (200, "", partial(2, "2 profiles too old")),
        (200, "", partial(0, "")),
    ]);
    let exporter = Exporter::start(options(Destination::Http {
        url,
        headers: Vec::new(),
        gzip: true,
        tls: Default::default(),
    }))
    .expect("start");
    exporter.submit(vec![profile(1, 1), profile(2, 1), profile(3, 1)]);
    requests.recv_timeout(Duration::from_secs(5)).expect("sent");
    exporter.submit(vec![profile(1, 1)]);
    requests.recv_timeout(Duration::from_secs(5)).expect("sent");
    let stats = exporter.finish();
    assert_eq!((stats.sent, stats.rejected, stats.retries), (2, 0, 0));
    assert_eq!(stats.rejected_profiles, 2);
    assert_eq!(
        stats.last_error.as_deref(),
        Some("the collector rejected 2 profiles: 2 profiles too old")
    );
}

#[test]
fn while_the_collector_is_down_the_queue_keeps_its_bound() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let one = gzip(&otlp::export_request(&[profile(9, 4)], &scope()).encode_to_vec()).len();
    let bound = one * 3 + one / 2;
    let exporter = Exporter::start(
        Options::new(
            Destination::Http {
                url: format!("http://127.0.0.1:{port}"),
                headers: Vec::new(),
                gzip: true,
                tls: Default::default(),
            },
            scope(),
        )
        .with_queue_bytes(bound)
        .with_timeout(Duration::from_millis(300)),
    )
    .expect("start");
    for _ in 0..10 {
        exporter.submit(vec![profile(9, 4)]);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let now = exporter.stats();
    assert!(now.queue_peak <= bound, "{now:?}");
    assert_eq!(now.queued, 3, "{now:?}");
    // The bytes now (three requests of about `one` bytes each: their random profile
    // ids make gzip's output vary by a few bytes) and the peak, at least that.
    assert!(now.queued_bytes > 2 * one + one / 2, "{now:?}");
    assert!(now.queue_peak >= now.queued_bytes, "{now:?}");
    assert_eq!(now.dropped, 7, "{now:?}");
    assert_eq!(now.dropped_samples, 28);
    assert!(now.retries >= 1 && now.sent == 0);
    assert!(now.last_error.as_deref().unwrap_or("").contains("refused"));
    // The final flush gives up at its deadline: what is left is dropped, counted.
    let started = Instant::now();
    let last = exporter.finish();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!((last.dropped, last.queued, last.sent), (10, 0, 0));
    // Nothing delivered, and all of it said: the requests and their samples, and the
    // first failure as it was.
    let Delivery::Failed(loss) = last.delivery() else {
        panic!("{last:?}");
    };
    assert_eq!((loss.requests, loss.of, loss.samples), (10, 10, 40));
    let first = last.first_error.as_deref().unwrap_or("");
    assert!(first.contains("Connection refused"), "{first}");
    // Nothing waits now; the peak is still the most that did.
    assert_eq!(last.queued_bytes, 0);
    assert_eq!(last.queue_peak, now.queue_peak);
}

#[test]
fn a_stalled_collector_never_blocks_the_caller() {
    // A collector that takes connections and never answers: every attempt lasts the
    // timeout, and meanwhile the hand-over of four batches fills.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().take(8).flatten().collect();
        std::thread::sleep(Duration::from_secs(10));
        drop(held);
    });
    let exporter = Exporter::start(
        Options::new(
            Destination::Http {
                url,
                headers: Vec::new(),
                gzip: true,
                tls: Default::default(),
            },
            scope(),
        )
        .with_timeout(Duration::from_millis(500)),
    )
    .expect("start");
    exporter.submit(vec![profile(1, 1)]);
    // The first batch is taken (and its attempt stalls) before the others come.
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..9 {
        exporter.submit(vec![profile(1, 1)]);
    }
    // Four wait in the hand-over, five are dropped (six if the first was not taken
    // yet on a loaded machine).
    let now = exporter.stats();
    assert!((5..=6).contains(&now.dropped_batches), "{now:?}");
    let last = exporter.finish();
    assert_eq!(last.sent, 0, "{last:?}");
    assert_eq!(last.requests + last.dropped_batches, 10, "{last:?}");
}

#[test]
fn a_file_of_length_prefixed_requests() {
    let path = std::env::temp_dir().join(format!("otel-ctx-export-{}.bin", std::process::id()));
    let exporter = Exporter::start(options(Destination::File(path.clone()))).expect("start");
    exporter.submit(vec![profile(5, 1)]);
    exporter.submit(vec![profile(6, 2), profile(7, 3)]);
    let stats = exporter.finish();
    assert_eq!((stats.sent, stats.sent_samples), (2, 6));
    let bytes = std::fs::read(&path).expect("the file");
    let _ = std::fs::remove_file(&path);
    let mut rest = &bytes[..];
    let mut processes = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let request = ExportProfilesServiceRequest::decode(&rest[4..4 + len]).expect("a request");
        processes.push(request.resource_profiles.len());
        rest = &rest[4..][len..];
    }
    assert_eq!(processes, [1, 2]);
    assert_eq!(stats.sent_bytes as usize, bytes.len() - 4 * 2);
    let e = Exporter::start(options(Destination::File("/nonexistent/dir/x".into())))
        .expect_err("no such directory");
    assert!(e
        .to_string()
        .starts_with("cannot create /nonexistent/dir/x: "));
    let source = std::error::Error::source(&e).expect("the system's error");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
}
