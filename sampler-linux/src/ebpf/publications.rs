//! The publication hook: which processes publish or update a process context, as they
//! do it, without scanning `/proc`.
//!
//! OTEP 4719 (§Publication Protocol, §Updating Protocol) has every writer call
//! `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, "OTEL_CTX")` once its header is
//! valid, after every publication and every update, and even where the kernel has no
//! mapping names and the call fails, so that readers can hook it. A BPF program on the
//! `syscalls/sys_enter_prctl` tracepoint (`bpf/publications.bpf.c`) sends the caller's
//! process id for exactly that call; [`PublicationHook::next_pid`] hands the ids out. An
//! event is a hint, never a fact: the caller reads that process's maps and context as
//! the reading protocol says, and a process that calls `prctl` with that name and
//! publishes nothing is found to have no context.

use std::time::Duration;

use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader};

use super::error::{explain, load_error};
use super::maps::{counter, poll_readable};
use super::EbpfError;

/// The BPF object built from `bpf/publications.bpf.c`: the one checked in beside it, which
/// `build.rs` copies (or compiles again with `$OTEL_CTX_BPF_CLANG`).
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/publications.bpf.o"));
const PROGRAM_NAME: &str = "on_prctl";
const TRACEPOINT: (&str, &str) = ("syscalls", "sys_enter_prctl");
const TRACEPOINT_NAME: &str = "syscalls/sys_enter_prctl";

/// Counts kept by the hook's program, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublicationCounters {
    /// Calls that named a mapping `OTEL_CTX`, sent to user space.
    pub sent: u64,
    /// Calls lost because the ring was full (user space read too slowly); a periodic
    /// scan still finds their processes.
    pub lost: u64,
}

/// The publication hook: a BPF program on `syscalls/sys_enter_prctl` that reports each
/// process naming a mapping `OTEL_CTX`. Needs what the eBPF sampler needs (root, or
/// `CAP_BPF` and `CAP_PERFMON`), and tracefs mounted (`/sys/kernel/tracing`), where the
/// kernel lists its tracepoints. Dropping it detaches the program.
pub struct PublicationHook {
    /// The program and its link: dropping it detaches them.
    _ebpf: Ebpf,
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for PublicationHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicationHook").finish_non_exhaustive()
    }
}

impl PublicationHook {
    /// Loads the program and attaches it to the tracepoint.
    pub fn new() -> Result<Self, EbpfError> {
        let mut ebpf = EbpfLoader::new()
            .load(PROGRAM)
            .map_err(|e| load_error("load the publication hook's BPF object", &e))?;
        let setup = |e: aya::maps::MapError| EbpfError::Setup(explain(&e).0);
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| EbpfError::Setup(format!("the hook has no map {name:?}")))
        };
        let ring = RingBuf::try_from(take(&mut ebpf, "publications")?).map_err(setup)?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "counters")?).map_err(setup)?;
        let program: &mut TracePoint = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| EbpfError::Setup(format!("the hook has no program {PROGRAM_NAME}")))?
            .try_into()
            .map_err(|e| EbpfError::Setup(explain(&e).0))?;
        program
            .load()
            .map_err(|e| load_error("load the publication hook", &e))?;
        program.attach(TRACEPOINT.0, TRACEPOINT.1).map_err(|e| {
            match load_error("attach the publication hook", &e) {
                permission @ EbpfError::Permission { .. } => permission,
                _ => EbpfError::Tracepoint {
                    name: TRACEPOINT_NAME,
                    message: explain(&e).0,
                },
            }
        })?;
        Ok(Self {
            _ebpf: ebpf,
            ring,
            counters,
        })
    }

    /// Waits up to `timeout` for an event; whether one is waiting. Read them with
    /// [`next_pid`](Self::next_pid) after every wait.
    pub fn wait(&self, timeout: Duration) -> Result<bool, EbpfError> {
        poll_readable(&self.ring, timeout)
    }

    /// The process id of the next event, if one is waiting: a process that named a
    /// mapping `OTEL_CTX`, as a writer does right after it publishes or updates its
    /// process context. One process can come several times.
    pub fn next_pid(&mut self) -> Option<u32> {
        loop {
            let item = self.ring.next()?;
            // `struct publication`: the process id, then the thread id, native-endian.
            if let Some(pid) = item.get(..4) {
                let mut word = [0u8; 4];
                word.copy_from_slice(pid);
                return Some(u32::from_ne_bytes(word));
            }
        }
    }

    /// The program's counts, summed over CPUs.
    pub fn counters(&self) -> Result<PublicationCounters, EbpfError> {
        Ok(PublicationCounters {
            sent: counter(&self.counters, 0)?,
            lost: counter(&self.counters, 1)?,
        })
    }
}
