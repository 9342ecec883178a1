//! `otel-ctx`: find and read OpenTelemetry process and thread contexts.

fn main() {
    eprintln!("otel-ctx: no command yet");
    std::process::exit(2);
}
