//! The Python part of `otel-ctx profile <pid>`'s summary: the process's CPython
//! interpreter (the sampler found it, and walks its frames with each sample: ptrace while
//! the thread is stopped, eBPF in the BPF program; the profile layer splices them into the
//! native stacks).

use otel_ctx_profile::Stats;
use otel_ctx_reader::Sampler;

/// The summary's line about process `pid`'s Python frames: the interpreter, the samples
/// with Python frames, the frames and the failures by reason; why a process that claims
/// to run Python has none; nothing for a process without Python.
pub fn summary(sampler: &Sampler, pid: u32, stats: &Stats) -> String {
    if let Some(refused) = sampler.python_refusal(pid) {
        return format!("python: none read: {refused}\n");
    }
    let Some(interpreter) = sampler.python(pid) else {
        return String::new();
    };
    let python = &stats.python;
    let mut line = format!(
        "python: CPython {} ({}): {} samples with Python frames, {} frames, {} distinct; {} \
         code objects named ({} KiB)",
        interpreter.version(),
        interpreter.module(),
        python.samples,
        python.frames,
        python.locations,
        interpreter.code_cache().reads,
        interpreter.code_cache().bytes().div_ceil(1024),
    );
    if !python.failures.is_empty() {
        let failures: Vec<String> = python
            .failures
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        line.push_str(&format!("; not walked: {}", failures.join(", ")));
    }
    line.push('\n');
    line
}
