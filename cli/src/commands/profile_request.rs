//! What `otel-ctx profile` is asked for ([`Request`], its flags), and the writing of one
//! profile to a file or standard output, shared by `profile <pid>` and `profile --all`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use otel_ctx_profile::{
    Filter, FoldedOptions, Format, Outputs, Profile, ProfileOptions, SessionOptions, Show,
};
use otel_ctx_sampler::stack::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
use otel_ctx_sampler::{OffCpu, SamplerOptions};

use super::Failure;

/// `--stack-size`: a number of bytes within the sampler's limit.
fn stack_size(text: &str) -> Result<usize, String> {
    let size: usize = text
        .parse()
        .map_err(|e| format!("{text}: give a number of bytes ({e})"))?;
    if size > MAX_STACK_SIZE {
        return Err(format!("{size}: at most {MAX_STACK_SIZE} bytes"));
    }
    Ok(size)
}

/// What `profile` was asked for.
#[derive(Clone, Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("process").required(true).args(["pid", "all"])))]
pub struct Request {
    /// The process id (`otel-ctx ps` lists those that publish), or `--all`.
    pub pid: Option<u32>,
    /// Profile every process on the host that publishes a process context, and those
    /// that start publishing while it runs (eBPF only). Without --otlp or --otlp-file,
    /// writes one profile per process at the end, as -o says.
    #[arg(long)]
    pub all: bool,
    /// How long to sample, such as `10s`; 0 runs until SIGTERM or Ctrl-C. Either stops
    /// earlier and still writes (or sends).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub duration: Duration,
    /// Samples per second: per CPU with eBPF, per running thread with ptrace.
    #[arg(long, default_value_t = 99)]
    pub hz: u32,
    /// The attribute whose value is the root frame of folded and SVG output.
    #[arg(long, default_value = "http.route")]
    pub by: String,
    /// Keep only the samples of this trace (32 hex digits).
    #[arg(long)]
    pub trace: Option<String>,
    /// Where to write (`-`: standard output); default `profile.<pid>.pb.gz`. A directory
    /// (one that exists, or a name ending in `/`) gets `profile.<pid>.<ext>`; with --all,
    /// a file name gets the process id before its extension (`out.svg`: `out.<pid>.svg`).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// The format of every file, when the output's name does not say it: pprof (the
    /// default), folded (the default on standard output) or svg.
    #[arg(long, value_parser = formats())]
    pub format: Option<Format>,
    #[command(flatten)]
    pub sampler: super::SamplerFlag,
    /// Give frames their source file and line (from DWARF; Python frames from their
    /// code objects).
    #[arg(long)]
    pub lines: bool,
    /// Keep the native frames of Python processes (`--native false`: their Python
    /// frames alone, as py-spy shows them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub native: bool,
    /// Keep also CPython's own C functions above a sample's Python frames (as
    /// `list_sort` under `sorted()`), which otherwise count in their Python caller.
    #[arg(long)]
    pub interpreter_frames: bool,
    /// Bytes of each sample's stack to copy for unwinding (a size past the sampler's
    /// limit is refused, with the limit).
    #[arg(long, default_value_t = DEFAULT_STACK_SIZE, value_parser = stack_size)]
    pub stack_size: usize,
    /// No progress line (as `demo --profile` runs it).
    #[arg(long, hide = true)]
    pub quiet: bool,
    /// Send the profiles to an OpenTelemetry Collector as OTLP profiles over HTTP/protobuf
    /// (`POST <URL>/v1development/profiles`, gzip) every --export-interval. Without a
    /// URL (write it `--otlp=URL`), OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318 (eBPF only).
    #[arg(long, value_name = "URL", num_args = 0..=1, require_equals = false)]
    pub otlp: Option<Option<String>>,
    /// A header for every OTLP request, such as `Authorization=Bearer xyz` (repeatable;
    /// added to OTEL_EXPORTER_OTLP_HEADERS).
    #[arg(long, value_name = "KEY=VALUE")]
    pub otlp_header: Vec<String>,
    /// Trust the receiver's certificate if it leads to one of the PEM file's
    /// certificates, in place of the Mozilla roots (an https:// --otlp; default:
    /// OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE or OTEL_EXPORTER_OTLP_CERTIFICATE).
    #[arg(long, value_name = "FILE")]
    pub otlp_ca: Option<PathBuf>,
    /// The client certificate (PEM) for a receiver that asks for one, with
    /// --otlp-client-key (default: OTEL_EXPORTER_OTLP_PROFILES_CLIENT_CERTIFICATE or
    /// OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE).
    #[arg(long, value_name = "FILE", requires = "otlp_client_key")]
    pub otlp_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM), with --otlp-client-cert (default:
    /// OTEL_EXPORTER_OTLP_PROFILES_CLIENT_KEY or OTEL_EXPORTER_OTLP_CLIENT_KEY).
    #[arg(long, value_name = "FILE", requires = "otlp_client_cert")]
    pub otlp_client_key: Option<PathBuf>,
    /// Append the OTLP requests to this file instead of sending them: each a 4-byte
    /// big-endian length, then the `ExportProfilesServiceRequest` protobuf (eBPF only).
    #[arg(long, value_name = "FILE", conflicts_with = "otlp")]
    pub otlp_file: Option<PathBuf>,
    /// The most memory the requests waiting for the collector may take; the oldest are
    /// dropped (and counted) first.
    #[arg(long, default_value = "64MiB", value_parser = super::otlp::parse_size)]
    pub otlp_queue: usize,
    /// How long one OTLP request may take, and the final flush (default:
    /// OTEL_EXPORTER_OTLP_TIMEOUT, else 10s).
    #[arg(long, value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub otlp_timeout: Option<Duration>,
    /// How long, in all, the debug files of stripped modules may be waited for from the
    /// debuginfod servers of DEBUGINFOD_URLS once sampling is over (0: none is asked).
    #[arg(long, default_value = "1s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub debuginfod_time: Duration,
    /// Ask the process, if it is a HotSpot JVM, to write its perf map while it is
    /// sampled (as `jcmd PID Compiler.perfmap` does, through its attach socket), so that
    /// its JIT-compiled Java methods are named; without it a JVM is never touched. One
    /// process, written to files.
    #[arg(long, conflicts_with_all = ["all", "otlp", "otlp_file"])]
    pub java_perf_map: bool,
    /// Measure off-CPU time too: pprof's value `off_cpu`, --show, and the time of each
    /// --by value (eBPF: each wait of --off-cpu-threshold or more, sampled as it ends;
    /// ptrace: every thread sampled, each sample split by its CPU clock).
    #[arg(long)]
    pub off_cpu: bool,
    /// With --off-cpu and eBPF: the shortest wait sampled.
    #[arg(long, default_value = "200us", value_parser = super::parse_duration, allow_negative_numbers = true, requires = "off_cpu")]
    pub off_cpu_threshold: Duration,
    /// With --off-cpu and eBPF: follow one system call in N, each sample standing for as
    /// many.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), requires = "off_cpu")]
    pub off_cpu_one_in: u32,
    /// With --off-cpu and eBPF: the most off-CPU samples a second; waits are sampled by
    /// time to keep within it, each standing for its share (0: every wait sampled).
    #[arg(long, default_value_t = otel_ctx_sampler::DEFAULT_OFF_CPU_MAX_RATE, requires = "off_cpu")]
    pub off_cpu_max_rate: u32,
    /// What folded and SVG output show with --off-cpu: cpu, off-cpu or wall (both).
    #[arg(long, default_value = "cpu", requires = "off_cpu")]
    pub show: Show,
    /// How often the profiles are sent (OTLP).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub export_interval: Duration,
    /// With --all: how often /proc is scanned for new publishers (the publication hook
    /// finds most of them at once).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub rescan: Duration,
    /// With --all: the most processes followed at once.
    #[arg(long, default_value_t = otel_ctx_sampler::MAX_PROCESSES)]
    pub max_processes: usize,
}

impl Request {
    /// The session's options: the sampler's (eBPF unless `--sampler ptrace`, with ptrace when BPF
    /// cannot be used), the profile's (lines, the filter).
    pub fn session(&self, filter: Filter) -> SessionOptions {
        let method = self.sampler.method();
        let sampler = SamplerOptions::default()
            .with_method(method)
            .with_frequency_hz(self.hz)
            .with_stack_size(self.stack_size)
            .with_max_processes(self.max_processes)
            .with_off_cpu(self.off_cpu.then(|| {
                let off_cpu = OffCpu::default().with_threshold(self.off_cpu_threshold);
                off_cpu
                    .with_one_in(self.off_cpu_one_in)
                    .with_max_rate(self.off_cpu_max_rate)
            }));
        let profile = ProfileOptions::default()
            .with_lines(self.lines)
            .with_native(self.native)
            .with_interpreter_frames(self.interpreter_frames)
            .with_filter(filter);
        SessionOptions::default()
            .with_sampler(sampler)
            .with_profile(profile)
            .with_debuginfod_time(self.debuginfod_time)
            .with_java_perf_map(self.java_perf_map)
    }

    /// Where the profiles go and in which format, by the rule of
    /// [`otel_ctx_profile::output`]; before sampling, the directory they go into is made
    /// when missing and a file checked to be writable there.
    pub fn outputs(&self) -> Result<Outputs, Failure> {
        let output = self.output.as_deref();
        let is_dir = output.is_some_and(Path::is_dir);
        let outputs =
            Outputs::new(output, self.format, self.all, is_dir).map_err(Failure::Unusable)?;
        outputs.prepare().map_err(|e| match output {
            Some(_) => Failure::Unusable(format!("-o {e}")),
            None => Failure::Unusable(format!("{e} (without -o, the current directory)")),
        })?;
        Ok(outputs)
    }
}

/// Writes the profile to `path` (`-`: standard output).
pub fn write(
    profile: &Profile,
    format: Format,
    folded: &FoldedOptions,
    path: &Path,
) -> Result<(), Failure> {
    let cannot =
        |e: std::io::Error| Failure::Unusable(format!("cannot write {}: {e}", path.display()));
    let mut buffer = Vec::new();
    profile.write(format, folded, &mut buffer).map_err(cannot)?;
    if path.as_os_str() == "-" {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&buffer)
            .and_then(|()| stdout.flush())
            .map_err(cannot);
    }
    std::fs::write(path, buffer).map_err(cannot)
}

/// `--format`: a format by its name, the names listed for `--help` and completions.
fn formats() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::TypedValueParser as _;
    let names =
        Format::ALL.map(|f| clap::builder::PossibleValue::new(f.name()).help(f.description()));
    clap::builder::PossibleValuesParser::new(names).try_map(|name| name.parse::<Format>())
}
