//! `otel-ctx profile <pid>`: a CPU profile of one process by trace and route. Every sample
//! is a thread's user registers and the top of its stack, with its thread context; the
//! stacks are unwound (DWARF CFI, frame pointers) and symbolized in user space by
//! `otel-ctx-profile`, and the profile is written as pprof, folded text or an SVG flame
//! graph.
//!
//! Samples come from the eBPF sampler (a CPU-clock tick on every CPU: threads are sampled
//! while they run) in a build with the `ebpf` feature, or with `--ptrace` (or when BPF
//! cannot be used) from ptrace rounds that stop every thread that is running or ready to
//! run (`R` in its `stat`) at the rate.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use otel_ctx_profile::{Filter, FoldedOptions, Profile, ProfileOptions, Profiler, Sample};
use otel_ctx_reader::{
    ProcessContextReader, ProcessMaps, ReaderOptions, RecordBuffer, SampleError, StackBuffer,
    ThreadError, ThreadReader, ThreadReaderOptions, DEFAULT_STACK_SIZE,
};

use super::profile_python::PythonSource;
use super::{catch_sigint, out, show, text, Failure, INTERRUPTED};

/// How often, at most, the maps are read again while samples land outside every known
/// module (a library loaded since): reading them takes the target's mmap lock.
const MAPS_REFRESH: Duration = Duration::from_secs(1);

/// `--max-processes` when not given: as many as the eBPF sampler has room for.
pub const DEFAULT_MAX_PROCESSES: usize = 1024;

/// The formats `--format` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Gzipped `profile.proto`, which `go tool pprof`, Pyroscope and Grafana read.
    Pprof,
    /// The folded text of flamegraph.pl (`root;caller;leaf count`).
    Folded,
    /// An SVG flame graph.
    Svg,
}

impl Format {
    /// The format an output file's name asks for: `.pb.gz` (or `.pb`, `.pprof`), `.folded`
    /// (or `.txt`), `.svg`.
    fn of_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        if name.ends_with(".pb.gz") || name.ends_with(".pb") || name.ends_with(".pprof") {
            Some(Self::Pprof)
        } else if name.ends_with(".folded") || name.ends_with(".txt") {
            Some(Self::Folded)
        } else if name.ends_with(".svg") {
            Some(Self::Svg)
        } else {
            None
        }
    }

    /// The extension of its files, without the dot.
    pub const fn extension(self) -> &'static str {
        match self {
            Self::Pprof => "pb.gz",
            Self::Folded => "folded",
            Self::Svg => "svg",
        }
    }
}

/// What `profile` was asked for.
#[derive(Clone, Debug, clap::Args)]
pub struct Request {
    /// The process id (or `--all`).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub pid: Option<u32>,
    /// Profile every process on the host that publishes a process context, and those
    /// that start publishing while it runs (eBPF only). Without --otlp or --otlp-file,
    /// writes one profile per process into the -o directory at the end.
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
    /// Where to write (`-`: standard output); default `profile.<pid>.pb.gz`.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// The format, when the output's name does not say it.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Sample with ptrace (stopping each running thread) instead of eBPF.
    #[arg(long)]
    pub ptrace: bool,
    /// Give frames their source file and line (from DWARF; Python frames from their
    /// code objects).
    #[arg(long)]
    pub lines: bool,
    /// Keep the native frames of Python processes (`--native false`: their Python
    /// frames alone, as py-spy shows them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub native: bool,
    /// Bytes of each sample's stack to copy for unwinding (at most 65536).
    #[arg(long, default_value_t = DEFAULT_STACK_SIZE)]
    pub stack_size: usize,
    /// No progress line, and the summary on stderr (as `demo --profile` runs it).
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
    /// How often the profiles are sent (OTLP).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub export_interval: Duration,
    /// With --all: how often /proc is scanned for new publishers (the publication hook
    /// finds most of them at once).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration, allow_negative_numbers = true)]
    pub rescan: Duration,
    /// With --all: the most processes followed at once.
    #[arg(long, default_value_t = DEFAULT_MAX_PROCESSES)]
    pub max_processes: usize,
}

impl Request {
    /// The request with the defaults of the command line.
    #[cfg(test)]
    pub fn new(pid: u32) -> Self {
        Self {
            pid: Some(pid),
            all: false,
            otlp: None,
            otlp_header: Vec::new(),
            otlp_file: None,
            otlp_queue: 64 << 20,
            otlp_timeout: None,
            export_interval: Duration::from_secs(10),
            rescan: Duration::from_secs(10),
            max_processes: 1024,
            duration: Duration::from_secs(10),
            hz: 99,
            by: "http.route".to_owned(),
            trace: None,
            output: None,
            format: None,
            ptrace: false,
            lines: false,
            native: true,
            stack_size: DEFAULT_STACK_SIZE,
            quiet: false,
        }
    }

    /// With `--all` (and no OTLP destination): the directory `-o` names (created if
    /// missing; default the current one), where `profile.<pid>.<ext>` files go.
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    pub fn output_dir(&self) -> Result<PathBuf, Failure> {
        let dir = self.output.clone().unwrap_or_else(|| PathBuf::from("."));
        if dir.as_os_str() == "-" {
            return Err(Failure::usage(
                "-o -: with --all, -o names a directory for one file per process",
            ));
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::Unusable(format!("cannot create {}: {e}", dir.display())))?;
        Ok(dir)
    }

    /// With `--all`: the format of the files, `--format` or pprof.
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    pub fn fleet_format(&self) -> Format {
        self.format.unwrap_or(Format::Pprof)
    }

    /// The output path and its format: the format asked for, else the one its name
    /// says, else pprof (and `profile.<pid>.pb.gz` when no output is named).
    fn output(&self, pid: u32) -> Result<(PathBuf, Format), Failure> {
        match (&self.output, self.format) {
            (Some(path), Some(format)) => Ok((path.clone(), format)),
            (Some(path), None) if path.as_os_str() == "-" => Ok((path.clone(), Format::Folded)),
            (Some(path), None) => match Format::of_path(path) {
                Some(format) => Ok((path.clone(), format)),
                None => Err(Failure::usage(format!(
                    "-o {}: name it .pb.gz, .folded or .svg, or give --format",
                    path.display()
                ))),
            },
            (None, format) => {
                let format = format.unwrap_or(Format::Pprof);
                Ok((
                    PathBuf::from(format!("profile.{pid}.{}", format.extension())),
                    format,
                ))
            }
        }
    }
}

/// `--trace`: 32 hex digits.
fn trace_id(text: &str) -> Result<[u8; 16], Failure> {
    let bytes = otel_ctx_codec::hex::decode(text)
        .map_err(|e| Failure::usage(format!("--trace {text}: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| Failure::usage(format!("--trace {text}: a trace id has 32 hex digits")))
}

/// Where samples come from.
enum Source {
    #[cfg(feature = "ebpf")]
    Ebpf(Box<otel_ctx_reader::EbpfSampler>),
    Ptrace {
        records: RecordBuffer,
        stack: StackBuffer,
    },
}

/// A profile being taken.
struct Session {
    pid: u32,
    /// The thread contexts' reader; `None` for a Python process that publishes none,
    /// profiled by its stacks (and Python frames) alone.
    reader: Option<ThreadReader>,
    profiler: Profiler,
    python: PythonSource,
    source: Source,
    names: HashMap<u32, String>,
    maps_read: Instant,
    maps_suspect: bool,
    unreadable: u64,
}

impl Session {
    fn open(request: &Request, pid: u32, filter: Filter) -> Result<Self, Failure> {
        let maps = show::read_maps(pid)?;
        let python = PythonSource::find(&maps, request.quiet);
        let reader = match ThreadReader::from_maps(&maps, ThreadReaderOptions::default()) {
            Ok(reader) => Some(reader),
            // A process that announces no known schema: its records are still read,
            // their attributes named by index.
            Err(ThreadError::Schema { .. }) => Some(ThreadReader::from_maps(
                &maps,
                ThreadReaderOptions::default().with_require_known_schema(false),
            )?),
            // A Python process without thread contexts: its stacks and Python frames.
            Err(ThreadError::NotExported { .. }) if python.claimed() => None,
            Err(e) => return Err(e.into()),
        };
        let period = 1_000_000_000 / u64::from(request.hz);
        let options = ProfileOptions::default()
            .with_period_ns(period)
            .with_lines(request.lines)
            .with_native(request.native)
            .with_filter(filter);
        let mut profiler = Profiler::new(pid, options);
        profiler.update_maps(&maps);
        let snapshot = ProcessContextReader::from_maps(&maps, ReaderOptions::default())
            .and_then(|mut r| r.read())
            .ok();
        profiler.set_process_context(snapshot.as_ref());
        let source = Self::source(request, pid, reader.as_ref(), &python)?;
        Ok(Self {
            pid,
            reader,
            profiler,
            python,
            source,
            names: HashMap::new(),
            maps_read: Instant::now(),
            maps_suspect: false,
            unreadable: 0,
        })
    }

    /// The eBPF sampler unless `--ptrace`; ptrace when BPF cannot be used (said on
    /// stderr).
    fn source(
        request: &Request,
        pid: u32,
        reader: Option<&ThreadReader>,
        python: &PythonSource,
    ) -> Result<Source, Failure> {
        let ptrace = || Source::Ptrace {
            records: RecordBuffer::new(),
            stack: StackBuffer::new(request.stack_size),
        };
        if request.ptrace {
            return Ok(ptrace());
        }
        #[cfg(feature = "ebpf")]
        {
            let options = otel_ctx_reader::EbpfOptions::default()
                .with_frequency_hz(u64::from(request.hz))
                .with_stack_size(request.stack_size);
            let started = match reader {
                Some(reader) => otel_ctx_reader::EbpfSampler::start(reader, options),
                None => otel_ctx_reader::EbpfSampler::new(options).and_then(|mut sampler| {
                    sampler.add_process_stacks(pid)?;
                    Ok(sampler)
                }),
            }
            .and_then(|sampler| python.walked_by(sampler));
            match started {
                Ok(sampler) => return Ok(Source::Ebpf(Box::new(sampler))),
                Err(e) => eprintln!("otel-ctx: {e}; sampling with ptrace instead"),
            }
        }
        #[cfg(not(feature = "ebpf"))]
        {
            let _ = (pid, reader, python);
            if !request.quiet {
                eprintln!(
                    "otel-ctx: this otel-ctx was built without the eBPF sampler (feature \
                     `ebpf`): sampling with ptrace"
                );
            }
        }
        Ok(ptrace())
    }

    const fn is_ebpf(&self) -> bool {
        match self.source {
            #[cfg(feature = "ebpf")]
            Source::Ebpf(_) => true,
            Source::Ptrace { .. } => false,
        }
    }

    /// The name of thread `tid`, read once.
    fn name(names: &mut HashMap<u32, String>, pid: u32, tid: u32) -> &str {
        names
            .entry(tid)
            .or_insert_with(|| otel_ctx_reader::procfs::thread_name(pid, tid))
    }

    /// One step: up to `wait` of eBPF samples, or one ptrace round.
    fn step(&mut self, wait: Duration) -> Result<(), Failure> {
        let pid = self.pid;
        match &mut self.source {
            #[cfg(feature = "ebpf")]
            Source::Ebpf(sampler) => {
                // A failed wait shows as no samples; the next step waits again.
                let _ = sampler.wait(wait);
                while let Some((stack, context)) = sampler.next_stack_sample(&mut self.reader) {
                    let context = match context {
                        Ok(context) => context,
                        Err(e) => {
                            self.unreadable += 1;
                            self.maps_suspect |= matches!(e, SampleError::Tls(_));
                            None
                        }
                    };
                    let name = Self::name(&mut self.names, pid, stack.tid);
                    let sample = Sample::new(stack.tid, name, stack.registers, stack.stack)
                        .with_context(context.as_ref().map(Into::into));
                    let python = &mut self.python;
                    let outcome = match python.interpreter.as_mut() {
                        Some(interpreter) if stack.python.is_walked() => {
                            let walked = stack.python.frames_into(&mut python.frames);
                            let frames = python.frames.frames();
                            self.profiler.add_with_python(
                                &sample,
                                interpreter,
                                walked.as_ref().map(|()| frames),
                            )
                        }
                        _ => self.profiler.add(&sample),
                    };
                    self.maps_suspect |= outcome.outside_modules;
                }
            }
            Source::Ptrace { records, stack } => {
                let _ = wait;
                let tids = otel_ctx_reader::thread_ids(pid).map_err(Failure::from)?;
                for tid in tids.into_iter().filter(|&tid| running(pid, tid)) {
                    let python = &mut self.python;
                    let taken = match (&mut self.reader, &python.interpreter) {
                        (Some(reader), Some(interpreter)) => reader
                            .sample_with_python_into(
                                tid,
                                records,
                                stack,
                                interpreter,
                                &mut python.frames,
                            )
                            .map(|(registers, context, walked)| (registers, context, Some(walked))),
                        (Some(reader), None) => reader
                            .sample_with_stack_into(tid, records, stack)
                            .map(|(registers, context)| (registers, context, None)),
                        (None, interpreter) => otel_ctx_reader::sample_stack_into(
                            pid,
                            tid,
                            stack,
                            interpreter.as_ref().map(|i| (i, &mut python.frames)),
                        )
                        .map(|(registers, walked)| (registers, None, walked)),
                    };
                    match taken {
                        Ok((registers, context, walked)) => {
                            let name = Self::name(&mut self.names, pid, tid);
                            let sample = Sample::new(tid, name, registers, stack.bytes())
                                .with_context(context.as_ref().map(Into::into));
                            let outcome = match (walked, python.interpreter.as_mut()) {
                                (Some(walked), Some(interpreter)) => {
                                    let frames = python.frames.frames();
                                    self.profiler.add_with_python(
                                        &sample,
                                        interpreter,
                                        walked.as_ref().map(|()| frames),
                                    )
                                }
                                _ => self.profiler.add(&sample),
                            };
                            self.maps_suspect |= outcome.outside_modules;
                        }
                        Err(SampleError::Ptrace(otel_ctx_reader::PtraceError::Gone)) => {}
                        Err(e) => {
                            self.unreadable += 1;
                            self.maps_suspect |= matches!(e, SampleError::Tls(_));
                        }
                    }
                }
            }
        }
        if self.maps_suspect && self.maps_read.elapsed() >= MAPS_REFRESH {
            self.maps_suspect = false;
            self.maps_read = Instant::now();
            if let Ok(maps) = ProcessMaps::read(pid) {
                self.profiler.update_maps(&maps);
            }
            if let Some(reader) = &mut self.reader {
                if let Ok(true) = reader.refresh_modules() {
                    #[cfg(feature = "ebpf")]
                    if let Source::Ebpf(sampler) = &mut self.source {
                        let _ = sampler.set_resolution(reader.resolution());
                    }
                }
                reader.refresh_key_map();
            }
        }
        Ok(())
    }

    /// Samples lost to a full ring buffer (eBPF only).
    fn lost(&self) -> u64 {
        match &self.source {
            #[cfg(feature = "ebpf")]
            Source::Ebpf(sampler) => sampler.counters().map_or(0, |c| c.lost),
            Source::Ptrace { .. } => 0,
        }
    }
}

/// Whether thread `tid` is running or ready to run (`R` in its `stat`): what a CPU
/// profile samples.
fn running(pid: u32, tid: u32) -> bool {
    otel_ctx_reader::procfs::task_stat(pid, tid).is_some_and(|stat| stat.is_running())
}

/// Runs `profile`.
pub fn run(request: &Request) -> Result<(), Failure> {
    if request.hz == 0 || request.hz > 10_000 {
        return Err(Failure::usage(format!(
            "--hz {}: use a rate between 1 and 10000",
            request.hz
        )));
    }
    let mut filter = Filter::default();
    if let Some(trace) = &request.trace {
        filter = filter.with_trace_id(trace_id(trace)?);
    }
    let fleet = request.all || request.otlp.is_some() || request.otlp_file.is_some();
    let pid = match request.pid {
        Some(pid) if !fleet => pid,
        _ => return run_fleet(request, filter),
    };
    let (path, format) = request.output(pid)?;
    catch_sigint().map_err(Failure::Unusable)?;
    let mut session = Session::open(request, pid, filter)?;
    let progress = !request.quiet && std::io::stderr().is_terminal();
    let started = Instant::now();
    let period = Duration::from_secs(1) / request.hz;
    let mut next = started;
    let mut last_progress = started;
    let forever = request.duration.is_zero();
    while (forever || started.elapsed() < request.duration) && !INTERRUPTED.load(Ordering::Relaxed)
    {
        let left = match forever {
            true => Duration::MAX,
            false => request.duration.saturating_sub(started.elapsed()),
        };
        match session.step(left.min(Duration::from_millis(100))) {
            Ok(()) => {}
            Err(_) if otel_ctx_reader::memory::is_gone(pid) => break,
            Err(e) => return Err(e),
        }
        if progress && last_progress.elapsed() >= Duration::from_millis(250) {
            last_progress = Instant::now();
            eprint!("\r\x1b[K{}", progress_line(&session, started, request));
        }
        if !session.is_ebpf() {
            next += period;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    let profile = session.profiler.profile();
    let folded = FoldedOptions::default().with_by(Some(request.by.clone()));
    write(&profile, format, &folded, &path)?;
    let summary = summary(&session, &profile, started.elapsed(), &path, format);
    if request.quiet || path.as_os_str() == "-" {
        eprint!("{summary}");
        Ok(())
    } else {
        out(&summary)
    }
}

/// `--all`, or an OTLP destination: many processes (or one) from one eBPF sampler,
/// exported as they go.
fn run_fleet(request: &Request, filter: Filter) -> Result<(), Failure> {
    if request.ptrace {
        return Err(Failure::usage(
            "--ptrace: profile --all, --otlp and --otlp-file sample with eBPF only",
        ));
    }
    #[cfg(feature = "ebpf")]
    {
        super::fleet::run(request, filter)
    }
    #[cfg(not(feature = "ebpf"))]
    {
        let _ = filter;
        Err(Failure::usage(
            "this otel-ctx was built without the eBPF sampler (feature `ebpf`), which \
             profile --all, --otlp and --otlp-file need: cargo install --path cli --features \
             ebpf",
        ))
    }
}

fn progress_line(session: &Session, started: Instant, request: &Request) -> String {
    let stats = session.profiler.stats();
    let of = match request.duration.is_zero() {
        true => "until stopped".to_owned(),
        false => format!("of {}", text::duration(request.duration.as_nanos() as u64)),
    };
    format!(
        "profiling {} ({}): {} {of}, {} samples, {} lost, {} threads",
        session.pid,
        if session.is_ebpf() { "eBPF" } else { "ptrace" },
        text::duration(started.elapsed().as_nanos() as u64),
        stats.samples,
        session.lost(),
        session.names.len()
    )
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
    match format {
        Format::Pprof => profile.write_pprof(&mut buffer),
        Format::Folded => profile.write_folded(folded, &mut buffer),
        Format::Svg => profile.write_svg(folded, &mut buffer),
    }
    .map_err(cannot)?;
    if path.as_os_str() == "-" {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&buffer)
            .and_then(|()| stdout.flush())
            .map_err(cannot);
    }
    std::fs::write(path, buffer).map_err(cannot)
}

/// The closing summary: samples, with and without a context, distinct stacks, unwinding
/// failures, the output.
fn summary(
    session: &Session,
    profile: &Profile,
    elapsed: Duration,
    path: &Path,
    format: Format,
) -> String {
    let stats = &profile.stats;
    let mut out = format!(
        "{} samples in {} ({}): {} with a thread context, {} without, {} filtered out, {} \
         unreadable, {} lost; {} distinct stacks; {} walks stopped short",
        stats.samples,
        text::duration(elapsed.as_nanos() as u64),
        if session.is_ebpf() { "eBPF" } else { "ptrace" },
        stats.with_context,
        stats.without_context,
        stats.filtered,
        session.unreadable,
        session.lost(),
        stats.distinct_stacks,
        stats.unwind_failures(),
    );
    let failures: Vec<String> = stats
        .unwind_ends
        .iter()
        .filter(|(end, _)| end.is_failure())
        .map(|(end, n)| format!("{n} {}", end.name()))
        .collect();
    if !failures.is_empty() {
        out.push_str(&format!(" ({})", failures.join(", ")));
    }
    out.push('\n');
    if let Some(python) = session.python.summary(stats) {
        out.push_str(&python);
    }
    for skipped in &stats.skipped_modules {
        out.push_str(&format!("skipped {}: {}\n", skipped.path, skipped.reason));
    }
    let what = match format {
        Format::Pprof => "pprof profile",
        Format::Folded => "folded stacks",
        Format::Svg => "flame graph",
    };
    if path.as_os_str() != "-" {
        out.push_str(&format!("{what} written to {}\n", path.display()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_and_formats() {
        let mut r = Request::new(42);
        assert_eq!(
            r.output(42).unwrap(),
            (PathBuf::from("profile.42.pb.gz"), Format::Pprof)
        );
        r.format = Some(Format::Svg);
        assert_eq!(
            r.output(42).unwrap(),
            (PathBuf::from("profile.42.svg"), Format::Svg)
        );
        r.format = None;
        for (name, format) in [
            ("cpu.pb.gz", Format::Pprof),
            ("x.folded", Format::Folded),
            ("flame.svg", Format::Svg),
            ("-", Format::Folded),
        ] {
            r.output = Some(PathBuf::from(name));
            assert_eq!(r.output(42).unwrap().1, format, "{name}");
        }
        r.output = Some(PathBuf::from("cpu.data"));
        assert!(r.output(42).unwrap_err().to_string().contains("--format"));
        r.format = Some(Format::Pprof);
        assert_eq!(r.output(42).unwrap().1, Format::Pprof);
    }

    #[test]
    fn trace_ids() {
        assert_eq!(trace_id(&"ab".repeat(16)).unwrap(), [0xab; 16]);
        assert!(trace_id("abc").is_err());
        assert!(trace_id(&"ab".repeat(8))
            .unwrap_err()
            .to_string()
            .contains("32 hex"));
    }
}
