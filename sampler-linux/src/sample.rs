//! One sample, the one shape in which a sampler hands over what it took of a thread.

use otel_ctx_reader::thread::tls::SampleError;
use otel_ctx_reader::thread::ThreadContextRef;
use otel_ctx_reader::UserRegisters;

use crate::python::{PythonError, PythonFrame, PythonNames};

/// One sample, as [`Sampler::step`](crate::Sampler::step) hands it over (borrowed until
/// the callback returns), and as a profiler takes it: the one shape of a sample from the
/// sampler up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Sample<'a> {
    /// The thread's process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// Its name (`/proc/<pid>/task/<tid>/comm`, read once per thread), empty when it
    /// could not be read.
    pub thread_name: &'a str,
    /// The name its Python code gave it (`threading.Thread(name=...)`), when its process
    /// runs CPython and the thread is in `threading`'s registry
    /// ([`PythonThreadNames`](crate::python::PythonThreadNames)); `None` otherwise,
    /// or when the registry could not be read.
    pub python_thread_name: Option<&'a str>,
    /// Its user registers, when the sampler copies stacks and could take them.
    pub registers: Option<UserRegisters>,
    /// The top of its user stack, from the stack pointer up (empty without registers).
    pub stack: &'a [u8],
    /// Its thread context (`Ok(None)`: none attached, or the process is followed for its
    /// stacks only), or why it could not be read.
    pub context: Result<Option<ThreadContextRef<'a>>, &'a SampleError>,
    /// Its Python frames, when its process runs CPython
    /// ([`SamplerOptions::python`](crate::SamplerOptions::python)).
    pub python: Option<PythonSample<'a>>,
    /// The time on a CPU it stands for, in nanoseconds; 0: one sampling period (none
    /// when [`off_cpu_ns`](Self::off_cpu_ns) is not 0).
    pub weight_ns: u64,
    /// The time off a CPU it stands for, in nanoseconds (sleeping, blocked, or runnable
    /// without a CPU), with [`SamplerOptions::off_cpu`](crate::SamplerOptions::off_cpu);
    /// 0 otherwise.
    pub off_cpu_ns: u64,
    /// With off-CPU time, by eBPF: the number of the system call the thread waited in
    /// ([`syscall_name`](crate::syscall_name) names it); `None` otherwise.
    pub syscall: Option<u16>,
}

/// A sample's Python frames, with the names of their code objects, read by the sampler
/// before it hands the sample over.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PythonSample<'a> {
    /// The frames, newest first, as the walk found them (shims among them), or why it
    /// could not walk them (the sample keeps its native stack).
    pub frames: Result<&'a [PythonFrame], &'a PythonError>,
    /// Their names ([`PythonNames::frame_info`]) and where the evaluation loop is.
    pub names: PythonNames<'a>,
}

impl<'a> Sample<'a> {
    /// A sample of thread `tid` (named `thread_name`) of process `pid`: its registers and
    /// stack copy, without a context or Python frames, of one sampling period's weight.
    pub fn new(
        pid: u32,
        tid: u32,
        thread_name: &'a str,
        registers: Option<UserRegisters>,
        stack: &'a [u8],
    ) -> Self {
        Self {
            pid,
            tid,
            thread_name,
            python_thread_name: None,
            registers,
            stack,
            context: Ok(None),
            python: None,
            weight_ns: 0,
            off_cpu_ns: 0,
            syscall: None,
        }
    }

    /// Sets [`context`](Self::context): a record read some other way.
    #[must_use]
    pub fn with_context(mut self, context: Option<ThreadContextRef<'a>>) -> Self {
        self.context = Ok(context);
        self
    }

    /// Sets [`python_thread_name`](Self::python_thread_name).
    #[must_use]
    pub const fn with_python_thread_name(mut self, name: Option<&'a str>) -> Self {
        self.python_thread_name = name;
        self
    }

    /// The name a profile gives the thread: its Python name when it has one, else its
    /// kernel name.
    pub fn display_thread_name(&self) -> &'a str {
        self.python_thread_name.unwrap_or(self.thread_name)
    }

    /// Sets [`weight_ns`](Self::weight_ns).
    #[must_use]
    pub const fn with_weight_ns(mut self, weight: u64) -> Self {
        self.weight_ns = weight;
        self
    }

    /// Sets [`off_cpu_ns`](Self::off_cpu_ns).
    #[must_use]
    pub const fn with_off_cpu_ns(mut self, off_cpu: u64) -> Self {
        self.off_cpu_ns = off_cpu;
        self
    }

    /// The time on a CPU it stands for, in nanoseconds, where a sample of one period
    /// stands for `period_ns`.
    pub const fn cpu_ns(&self, period_ns: u64) -> u64 {
        match (self.weight_ns, self.off_cpu_ns) {
            (0, 0) => period_ns,
            (weight, _) => weight,
        }
    }

    /// The thread context, if the sample has one.
    pub fn context(&self) -> Option<&ThreadContextRef<'a>> {
        self.context.as_ref().ok().and_then(Option::as_ref)
    }
}
