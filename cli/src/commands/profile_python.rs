//! The Python part of `otel-ctx profile <pid>`: the process's CPython interpreter, found
//! once at the start ([`PythonProcess::find`]), whose frames each sample walks (ptrace:
//! while the thread is stopped; eBPF: in the BPF program) and the profile layer splices
//! into the native stacks; and the summary's line about them.

use otel_ctx_profile::Stats;
use otel_ctx_reader::{ProcessMaps, PythonProcess, PythonStack};

/// The interpreter of the process profiled, if it runs one.
pub struct PythonSource {
    /// The interpreter (`None`: not Python, or refused).
    pub interpreter: Option<PythonProcess>,
    /// The frames' buffer, reused from sample to sample.
    pub frames: PythonStack,
    /// Why a process that looked like Python gets no Python frames.
    pub refused: Option<String>,
}

impl PythonSource {
    /// Looks for the interpreter of `maps`' process. A process that claims to be Python
    /// and is not (or runs a version the reader refuses) keeps its native frames; the
    /// reason is said now (unless `quiet`) and in the summary.
    pub fn find(maps: &ProcessMaps, quiet: bool) -> Self {
        let (interpreter, refused) = match PythonProcess::find(maps) {
            Ok(found) => (found, None),
            Err(e) => {
                if !quiet {
                    eprintln!("otel-ctx: no Python frames: {e}; native frames only");
                }
                (None, Some(format!("{} ({e})", e.kind())))
            }
        };
        Self {
            interpreter,
            frames: PythonStack::new(),
            refused,
        }
    }

    /// `sampler` with this process's Python frames walked by its program, when it runs
    /// Python.
    #[cfg(feature = "ebpf")]
    pub fn walked_by(
        &self,
        mut sampler: otel_ctx_reader::EbpfSampler,
    ) -> Result<otel_ctx_reader::EbpfSampler, otel_ctx_reader::EbpfError> {
        if let Some(interpreter) = &self.interpreter {
            sampler.set_process_python(interpreter.pid(), interpreter)?;
        }
        Ok(sampler)
    }

    /// Whether the process runs Python, or claims to (and keeps its native frames with
    /// the reason it has no Python ones).
    pub const fn claimed(&self) -> bool {
        self.interpreter.is_some() || self.refused.is_some()
    }

    /// The summary's line: the interpreter, the samples with Python frames, the frames
    /// and the failures by reason; `None` for a process without Python.
    pub fn summary(&self, stats: &Stats) -> Option<String> {
        if let Some(refused) = &self.refused {
            return Some(format!("python: none read: {refused}\n"));
        }
        let interpreter = self.interpreter.as_ref()?;
        let python = &stats.python;
        let mut line = format!(
            "python: CPython {} ({}): {} samples with Python frames, {} frames, {} distinct; \
             {} code objects named ({} KiB)",
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
        Some(line)
    }
}
