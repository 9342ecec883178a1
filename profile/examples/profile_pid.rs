//! `profile_pid PID OUT.pb.gz [--ptrace]`: a CPU profile of a process for a few seconds,
//! through the libraries alone, written as pprof. It samples with eBPF when built with
//! the feature (`cargo run --release -p otel-ctx-profile --features ebpf --example
//! profile_pid -- PID cpu.pb.gz`) and BPF can be used, with ptrace otherwise, and says
//! why.

use std::time::Duration;

use otel_ctx_profile::{ProcessProfiler, SessionOptions};
use otel_ctx_sampler::{Method, SamplerOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(pid), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: profile_pid PID OUT.pb.gz [--ptrace]".into());
    };
    // eBPF when it can be used, ptrace otherwise (or when asked).
    let ptrace = args.get(2).is_some_and(|a| a == "--ptrace");
    let sampler = SamplerOptions::default().with_method(ptrace.then_some(Method::Ptrace));
    let options = SessionOptions::default().with_sampler(sampler);
    let mut session = ProcessProfiler::start(pid.parse()?, options)?;
    if let Some(why) = session.sampler().fallback() {
        eprintln!("eBPF not used: {why}");
    }
    session.run(Duration::from_secs(3), |_| false)?;
    session.finish(); // sampling stops; debuginfod, if DEBUGINFOD_URLS is set, for 1 s at most
    let profile = session.profile();
    profile.write_pprof(std::fs::File::create(out)?)?;
    let how = session.sampler().method().name();
    eprintln!("{} samples ({how}) written to {out}", profile.stats.samples);
    Ok(())
}
