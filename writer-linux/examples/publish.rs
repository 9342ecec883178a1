//! Publishes a process context, prints where it is, and waits so a reader can find it.
//!
//! ```text
//! cargo run -p otel-ctx-writer --example publish -- \
//!     [--service-name NAME] [--service-version V] [--environment ENV] \
//!     [--attribute KEY=VALUE]... [--seconds N]
//! ```
//!
//! Without `--seconds` it waits until killed.

use std::process::ExitCode;
use std::time::Duration;

use otel_ctx_writer::process::{Attributes, Backing, Publisher, Resource};

const USAGE: &str = "usage: publish [--service-name NAME] [--service-version V] \
[--environment ENV] [--attribute KEY=VALUE]... [--seconds N]";

struct Options {
    resource: Resource,
    seconds: Option<u64>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut builder = Resource::builder().service_name("otel-ctx-publish-example");
    let mut seconds = None;
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        builder = match flag.as_str() {
            "--service-name" => builder.service_name(value()?),
            "--service-version" => builder.service_version(value()?),
            "--environment" => builder.deployment_environment_name(value()?),
            "--attribute" => {
                let pair = value()?;
                let (key, val) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--attribute {pair:?} is not KEY=VALUE"))?;
                builder.attribute(key, val)
            }
            "--seconds" => {
                let n = value()?;
                seconds = Some(
                    n.parse()
                        .map_err(|_| format!("--seconds {n:?} is not a whole number"))?,
                );
                builder
            }
            "--help" | "-h" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        };
    }
    let resource = builder.build().map_err(|e| e.to_string())?;
    Ok(Options { resource, seconds })
}

/// The line of `/proc/self/maps` that starts at `address`.
fn maps_line(address: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let prefix = format!("{address:x}-");
    maps.lines()
        .find(|line| line.starts_with(&prefix))
        .map(str::to_string)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let publisher = match Publisher::publish(options.resource, Attributes::new()) {
        Ok(publisher) => publisher,
        Err(e) => {
            eprintln!("publish failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("pid {}", publisher.pid());
    println!(
        "mapping {:#x}, {} bytes, {}, {}",
        publisher.address(),
        publisher.mapping_len(),
        match publisher.backing() {
            Backing::Memfd => "memfd".to_string(),
            Backing::Anonymous { memfd_error } =>
                format!("anonymous (memfd_create: {memfd_error})"),
        },
        if publisher.is_named() {
            "named"
        } else {
            "not named (prctl PR_SET_VMA_ANON_NAME refused)"
        }
    );
    if let Some(line) = maps_line(publisher.address()) {
        println!("maps {line}");
    }
    for attribute in publisher.resource().attributes() {
        println!("  {} = {:?}", attribute.key, attribute.value);
    }
    println!(
        "monotonic_published_at_ns {}, payload {} bytes",
        publisher.monotonic_published_at_ns(),
        publisher.payload().len()
    );
    match options.seconds {
        Some(seconds) => {
            println!("waiting {seconds} s");
            std::thread::sleep(Duration::from_secs(seconds));
        }
        None => {
            println!("waiting until killed");
            loop {
                std::thread::park();
            }
        }
    }
    match publisher.unpublish() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("unpublish failed: {e}");
            ExitCode::FAILURE
        }
    }
}
