//! The OTLP exporter's tests: its settings from flags and the environment, and delivery
//! against a receiver on 127.0.0.1 that answers as the test says.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;

use otel_ctx_profile::{Attributes, ProfileOptions, Profiler, Sample, SampleContext};
use otel_ctx_reader::UserRegisters;

use super::*;

struct Env(HashMap<&'static str, &'static str>);

impl Environment for Env {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|v| (*v).to_owned())
    }
}

fn env(pairs: &[(&'static str, &'static str)]) -> Env {
    Env(pairs.iter().copied().collect())
}

fn http(destination: Option<Destination>) -> (String, Vec<(String, String)>, bool) {
    match destination {
        Some(Destination::Http { url, headers, gzip }) => (url, headers, gzip),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sizes() {
    assert_eq!(parse_size("64MiB"), Ok(64 << 20));
    assert_eq!(parse_size("512KiB"), Ok(512 << 10));
    assert_eq!(parse_size("1g"), Ok(1 << 30));
    assert_eq!(parse_size("1000"), Ok(1000));
    assert_eq!(parse_size("16 kb"), Ok(16 << 10));
    assert!(parse_size("0").is_err());
    assert!(parse_size("-1MiB").is_err());
    assert!(parse_size("5 parsecs").unwrap_err().contains("unit"));
    assert!(parse_size(&format!("{}GiB", usize::MAX)).is_err());
    assert_eq!(size(812), "812 B");
    assert_eq!(size(64 << 20), "64.0 MiB");
}

#[test]
fn the_destination_from_flags_and_environment() {
    let none = env(&[]);
    assert_eq!(destination(None, &[], None, &none), Ok(None));
    // The base URL gets the signal's path, once.
    for given in [
        "http://collector:4318",
        "http://collector:4318/",
        "http://collector:4318/v1development/profiles",
    ] {
        let (url, _, gzip) = http(destination(Some(Some(given)), &[], None, &none).unwrap());
        assert_eq!(
            url, "http://collector:4318/v1development/profiles",
            "{given}"
        );
        assert!(gzip);
    }
    let (url, _, _) = http(destination(Some(None), &[], None, &none).unwrap());
    assert_eq!(url, "http://localhost:4318/v1development/profiles");
    // The environment: the signal's endpoint as it is, else the base with the path.
    let base = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example:4318")]);
    let (url, _, _) = http(destination(Some(None), &[], None, &base).unwrap());
    assert_eq!(url, "https://otlp.example:4318/v1development/profiles");
    let signal = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        (
            "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
            "http://c:9999/custom",
        ),
    ]);
    let (url, _, _) = http(destination(Some(None), &[], None, &signal).unwrap());
    assert_eq!(url, "http://c:9999/custom");
    // A URL on the command line wins over the environment.
    let (url, _, _) = http(destination(Some(Some("http://flag:1")), &[], None, &signal).unwrap());
    assert_eq!(url, "http://flag:1/v1development/profiles");
    // Headers: both variables, percent-decoded, then the flags, key by key.
    let headers = env(&[
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Basic%20abc, x-tenant=a",
        ),
        ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-tenant=b"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
    ]);
    let flags = [
        "x-extra=1=2".to_owned(),
        "AUTHORIZATION=Bearer t".to_owned(),
    ];
    let (_, h, gzip) = http(destination(Some(None), &flags, None, &headers).unwrap());
    assert_eq!(
        h,
        [
            ("x-tenant".to_owned(), "b".to_owned()),
            ("x-extra".to_owned(), "1=2".to_owned()),
            ("AUTHORIZATION".to_owned(), "Bearer t".to_owned()),
        ]
    );
    assert!(!gzip);
    // What cannot work is said.
    let grpc = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
    assert!(destination(Some(None), &[], None, &grpc)
        .unwrap_err()
        .contains("HTTP/protobuf only"));
    assert!(destination(Some(Some("collector:4317")), &[], None, &none)
        .unwrap_err()
        .contains("http://"));
    assert!(
        destination(Some(None), &["novalue".to_owned()], None, &none)
            .unwrap_err()
            .contains("KEY=VALUE")
    );
    let path = std::path::Path::new("/tmp/x.otlp");
    assert_eq!(
        destination(None, &[], Some(path), &none),
        Ok(Some(Destination::File(path.to_owned())))
    );
    // Timeouts in milliseconds.
    assert_eq!(timeout(&none), Ok(DEFAULT_TIMEOUT));
    let t = env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")]);
    assert_eq!(timeout(&t), Ok(Duration::from_millis(2500)));
    assert!(timeout(&env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")])).is_err());
    assert_eq!(percent_decode("a%2Cb%zz%"), "a,b%zz%");
    assert_eq!(retry_after(" 7 "), Some(Duration::from_secs(7)));
    assert_eq!(retry_after("3600"), Some(MAX_BACKOFF));
    assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
}

/// A profile of `samples` samples of one thread under route `/cart`.
fn profile(pid: u32, samples: usize) -> Profile {
    let mut profiler = Profiler::new(pid, ProfileOptions::default());
    let attrs: &[(&str, &[u8])] = &[("http.route", b"/cart")];
    let context = SampleContext {
        trace_id: [0xab; 16],
        span_id: [0xcd; 8],
        trace_flags: 1,
        attributes: Attributes::List(attrs),
    };
    for _ in 0..samples {
        let sample = Sample::new(7, "worker", UserRegisters::default(), &[]);
        profiler.add(&sample.with_context(Some(context)));
    }
    profiler.profile()
}

fn scope() -> OtlpScope {
    OtlpScope {
        name: "otel-ctx".to_owned(),
        version: "test".to_owned(),
    }
}

/// One request as the receiver saw it.
struct Received {
    head: String,
    body: Vec<u8>,
}

/// A receiver on 127.0.0.1 that answers each request with the next of `answers`
/// (status, extra header lines), then 200; every request goes to the channel.
fn receiver(answers: Vec<(u16, &'static str)>) -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut answers = answers.into_iter();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let Some(request) = read_request(&stream) else {
                continue;
            };
            let (status, extra) = answers.next().unwrap_or((200, ""));
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n{extra}\r\n"
            );
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

fn decode_gzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

type Request = otlp::proto::collector::profiles::v1development::ExportProfilesServiceRequest;

#[test]
fn retries_what_the_collector_asks_to_retry_and_sends_it_whole() {
    let (url, requests) = receiver(vec![(503, "Retry-After: 1\r\n")]);
    let destination = Destination::Http {
        url: format!("{url}/{PROFILES_PATH}"),
        headers: vec![("Authorization".to_owned(), "Bearer t".to_owned())],
        gzip: true,
    };
    let exporter = Exporter::start(Options {
        destination,
        queue_bytes: 1 << 20,
        timeout: Duration::from_secs(5),
        scope: scope(),
    })
    .expect("start");
    exporter.submit(vec![profile(41, 3), profile(42, 2)]);
    let first = requests
        .recv_timeout(Duration::from_secs(5))
        .expect("a request");
    let started = Instant::now();
    let second = requests
        .recv_timeout(Duration::from_secs(5))
        .expect("the request again");
    // Retry-After: 1 was followed (not the 1 s first backoff by chance: both are 1 s,
    // so it is at least that).
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
    ] {
        assert!(head.contains(line), "{line} in {head}");
    }
    let request = Request::decode(&decode_gzip(&second.body)[..]).expect("a request");
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
    assert!(stats.last_error.unwrap().contains("503"));
    assert_eq!((stats.dropped, stats.queued), (0, 0));
}

#[test]
fn a_status_not_worth_retrying_rejects_the_request() {
    let (url, requests) = receiver(vec![(400, "")]);
    let exporter = Exporter::start(Options {
        destination: Destination::Http {
            url,
            headers: Vec::new(),
            gzip: false,
        },
        queue_bytes: 1 << 20,
        timeout: Duration::from_secs(5),
        scope: scope(),
    })
    .expect("start");
    exporter.submit(vec![profile(1, 1)]);
    let refused = requests.recv_timeout(Duration::from_secs(5)).expect("sent");
    // Not gzipped when told so: the protobuf itself.
    assert!(Request::decode(&refused.body[..]).is_ok());
    exporter.submit(vec![profile(1, 2)]);
    requests.recv_timeout(Duration::from_secs(5)).expect("next");
    let stats = exporter.finish();
    assert_eq!((stats.rejected, stats.sent, stats.retries), (1, 1, 0));
}

#[test]
fn while_the_collector_is_down_the_queue_keeps_its_bound() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let one = gzip(&otlp::export_request(&[profile(9, 4)], &scope()).encode_to_vec()).len();
    let exporter = Exporter::start(Options {
        destination: Destination::Http {
            url: format!("http://127.0.0.1:{port}"),
            headers: Vec::new(),
            gzip: true,
        },
        queue_bytes: one * 3 + one / 2,
        timeout: Duration::from_millis(300),
        scope: scope(),
    })
    .expect("start");
    for _ in 0..10 {
        exporter.submit(vec![profile(9, 4)]);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let now = exporter.stats();
    assert!(now.queue_peak <= one * 3 + one / 2, "{now:?}");
    assert_eq!(now.queued, 3, "{now:?}");
    assert_eq!(now.dropped, 7, "{now:?}");
    assert_eq!(now.dropped_samples, 28);
    assert!(now.retries >= 1 && now.sent == 0);
    assert!(now.last_error.as_deref().unwrap_or("").contains("POST"));
    // The final flush gives up at its deadline: what is left is dropped, counted.
    let started = Instant::now();
    let last = exporter.finish();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!((last.dropped, last.queued, last.sent), (10, 0, 0));
}

#[test]
fn a_file_of_length_prefixed_requests() {
    let path = std::env::temp_dir().join(format!("otel-ctx-otlp-{}.bin", std::process::id()));
    let exporter = Exporter::start(Options {
        destination: Destination::File(path.clone()),
        queue_bytes: 1 << 20,
        timeout: Duration::from_secs(1),
        scope: scope(),
    })
    .expect("start");
    exporter.submit(vec![profile(5, 1)]);
    exporter.submit(vec![profile(6, 2), profile(7, 3)]);
    let stats = exporter.finish();
    assert_eq!((stats.sent, stats.sent_samples), (2, 6));
    let bytes = std::fs::read(&path).expect("the file");
    let _ = std::fs::remove_file(&path);
    let mut rest = &bytes[..];
    let mut pids = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let request = Request::decode(&rest[4..4 + len]).expect("a request");
        pids.push(request.resource_profiles.len());
        rest = &rest[4 + len..];
    }
    assert_eq!(pids, [1, 2]);
    assert!(Exporter::start(Options {
        destination: Destination::File("/nonexistent/dir/x".into()),
        queue_bytes: 1,
        timeout: Duration::from_secs(1),
        scope: scope(),
    })
    .is_err());
}
