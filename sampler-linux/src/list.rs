//! Every thread of one process read once, with its context: what `otel-ctx show`
//! lists.

use std::time::Duration;

use otel_ctx_codec::attrs::{ResolvedAttrs, MAX_KEYS};
use otel_ctx_reader::thread::tls::SkippedModule;
use otel_ctx_reader::thread::{OwnedThreadContext, ThreadReport};
use otel_ctx_reader::{ProcessMaps, ThreadError, ThreadReader};

use crate::{Following, Method, PreparedProcess, Sampler, SamplerError, SamplerOptions, Threads};

/// What `show` learned of a process's threads.
pub enum ThreadList {
    /// No module (of those that could be analysed) exports `otel_thread_ctx_v1`.
    NotPublished {
        /// The executable mappings left out of the analysis.
        skipped: Vec<SkippedModule>,
    },
    /// The slot could not be located, or the threads could not be listed.
    Failed(String),
    /// Every thread, read through the sampler's reader of the process.
    Read {
        /// The reader, which knows the resolution.
        reader: Box<ThreadReader>,
        /// One report per thread.
        reports: Vec<ThreadReport>,
    },
}

impl ThreadList {
    /// The executable mappings whose files were left out, and why.
    pub fn skipped(&self) -> &[SkippedModule] {
        match self {
            Self::NotPublished { skipped } => skipped,
            Self::Read { reader, .. } => reader.skipped_modules(),
            Self::Failed(_) => &[],
        }
    }
}

/// With `--raw-keys`: every entry of the record named by its key index (`#3`), the last
/// occurrence of each, whatever the key map says.
fn name_raw_keys(context: &mut OwnedThreadContext) {
    context.attributes = ResolvedAttrs::resolve(&context.attrs_data, MAX_KEYS)
        .iter()
        .map(|(key, value)| {
            (
                format!("#{key}"),
                String::from_utf8_lossy(value).into_owned(),
            )
        })
        .collect();
}

/// How long [`ThreadList::read`] samples by eBPF.
pub const EBPF_WINDOW: Duration = Duration::from_millis(300);

impl ThreadList {
    /// Reads every thread of the process of `maps`: stopped and read one by one (ptrace),
    /// or by eBPF, the threads that ran during [`EBPF_WINDOW`] as the BPF program last
    /// sampled them (a thread that did not run is not listed). By default only a process
    /// whose context announces a thread-context schema the reader knows is read, its
    /// attributes named through the key map (OTEP 4947); `raw_keys` reads the slot whatever
    /// the process context says, and names every entry by its key index (`#3`). What
    /// prevents reading the threads is the list's own [`Failed`](Self::Failed); an error is
    /// a sampler that could not start.
    pub fn read(maps: ProcessMaps, raw_keys: bool, method: Method) -> Result<Self, SamplerError> {
        let options = SamplerOptions::default()
            .with_method(Some(method))
            .with_frequency_hz(999)
            .with_stack_size(0)
            .with_threads(Threads::All)
            .with_require_known_schema(!raw_keys);
        let mut sampler = Sampler::new(options)?;
        let pid = maps.pid;
        let prepared = match PreparedProcess::from_maps(maps, sampler.options()) {
            Ok(prepared) => prepared,
            Err(SamplerError::Thread(e)) => return Ok(Self::Failed(e.to_string())),
            Err(e) => return Err(e),
        };
        let following = sampler.adopt(prepared)?.0;
        match following {
            Following::StacksOnly(ThreadError::NotExported { skipped }) => {
                return Ok(Self::NotPublished { skipped })
            }
            Following::StacksOnly(e) => return Ok(Self::Failed(e.to_string())),
            _ => {}
        }
        let mut reports: Vec<ThreadReport> = match sampler.snapshot(EBPF_WINDOW) {
            Ok(reports) => reports.into_iter().map(|(_, report)| report).collect(),
            Err(e) => return Ok(Self::Failed(e.to_string())),
        };
        if raw_keys {
            for report in &mut reports {
                if let Ok(Some(context)) = &mut report.context {
                    name_raw_keys(context);
                }
            }
        }
        match sampler.take_reader(pid) {
            Some(reader) => Ok(Self::Read {
                reader: Box::new(reader),
                reports,
            }),
            None => Ok(Self::Failed(format!("process {pid} has exited"))),
        }
    }
}
