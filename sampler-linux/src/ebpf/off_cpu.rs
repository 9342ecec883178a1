//! Off-CPU samples: the program's two halves loaded and attached at BTF-typed
//! tracepoints, `note_switch` at `sched_switch` (a thread of a followed process first
//! leaves its CPU inside a system call: the time and its CPU time are noted) and
//! `sample_off_cpu` at `sys_exit` (the call returns, on the thread: the time since less
//! the CPU time since is its time away, sampled when long enough). Tracepoints, not a
//! kprobe or the BPF trampoline at `finish_task_switch`: kernels built without kprobes,
//! or that refuse the trampoline there (the function is often renamed
//! `finish_task_switch.isra.0`), still have them.

use std::time::{Duration, Instant};

use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf};

use super::error::{explain, load_error, EbpfError};

/// The programs, with their tracepoints.
const PROGRAMS: [(&str, &str, &str); 2] = [
    ("note_switch", "sched_switch", "sched/sched_switch"),
    ("sample_off_cpu", "sys_exit", "raw_syscalls/sys_exit"),
];

/// Loads both programs and attaches them. Dropping the [`Ebpf`] detaches them.
pub(super) fn attach(ebpf: &mut Ebpf) -> Result<(), EbpfError> {
    let btf = Btf::from_sys_fs().map_err(|e| {
        EbpfError::Setup(format!("cannot read the kernel's BTF: {}", explain(&e).0))
    })?;
    for (name, tracepoint, full_name) in PROGRAMS {
        let program = program(ebpf, name)?;
        program
            .load(tracepoint, &btf)
            .map_err(|e| load_error(&format!("load the BPF program at {full_name}"), &e))?;
        program.attach().map_err(|e| EbpfError::Tracepoint {
            name: full_name,
            message: explain(&e).0,
        })?;
    }
    Ok(())
}

/// Unloads both programs (detaching them), where they are loaded.
pub(super) fn detach(ebpf: &mut Ebpf) {
    for (name, ..) in PROGRAMS {
        if let Ok(program) = program(ebpf, name) {
            // Failing, the link stays until the drop.
            let _ = program.unload();
        }
    }
}

/// How often the pace of off-CPU samples is looked at.
pub(super) const PACE_EVERY: Duration = Duration::from_millis(250);

/// The shortest period of sampling by time: below it, every wait over the threshold is
/// sampled (the period 0).
const MIN_PERIOD_NS: u64 = 50_000;

/// The longest: what the program's arithmetic allows (4.3 s).
const MAX_PERIOD_NS: u64 = u32::MAX as u64;

/// The off-CPU samples' pace: the period of waiting per sample, kept so that the samples
/// come no faster than a bound. A wait of `t` shorter than the period is sampled with a
/// chance of `t / period` and then stands for the period, as a CPU profile samples time:
/// long waits are always sampled, short ones as often as their time asks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// The most samples a second (0: no bound).
    pub max_rate: u32,
    /// The period now (ns; 0: every wait sampled).
    pub period_ns: u64,
    /// When the samples were last counted, and how many had been taken then.
    pub at: Instant,
    pub taken: u64,
}

impl Pace {
    /// The pace at the start, for at most `max_rate` samples a second: a sample per
    /// `1 / max_rate` seconds of waiting (a thread that waits throughout is sampled at
    /// the bound's rate), every wait without a bound.
    pub fn new(max_rate: u32) -> Self {
        Self {
            max_rate,
            period_ns: match max_rate {
                0 => 0,
                rate => (1_000_000_000 / u64::from(rate)).clamp(MIN_PERIOD_NS, MAX_PERIOD_NS),
            },
            at: Instant::now(),
            taken: 0,
        }
    }

    /// The period from now on, the samples having come at `rate` a second under
    /// [`period_ns`](Self::period_ns): as much longer as the rate exceeds the bound by;
    /// half as long once they come at under half the bound, down to 0 (every wait)
    /// below 50 us; at most 4.3 s.
    pub fn next(&self, rate: f64) -> u64 {
        if self.max_rate == 0 {
            return 0;
        }
        let bound = f64::from(self.max_rate);
        let period = if rate > bound {
            (self.period_ns.max(MIN_PERIOD_NS) as f64 * rate / bound).ceil() as u64
        } else if rate < bound / 2.0 {
            self.period_ns / 2
        } else {
            self.period_ns
        };
        match period {
            p if p < MIN_PERIOD_NS => 0,
            p => p.min(MAX_PERIOD_NS),
        }
    }
}

/// Program `name` of the object, a BTF-typed tracepoint's.
fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut BtfTracePoint, EbpfError> {
    ebpf.program_mut(name)
        .ok_or_else(|| EbpfError::Setup(format!("the object has no program {name}")))?
        .try_into()
        .map_err(|e| EbpfError::Setup(explain(&e).0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_keeps_samples_within_the_bound() {
        let pace = |period_ns| Pace {
            period_ns,
            ..Pace::new(1000)
        };
        // A sample per millisecond of waiting at the start, for 1,000 a second.
        assert_eq!(Pace::new(1000).period_ns, 1_000_000);
        assert_eq!(Pace::new(100).period_ns, 10_000_000);
        // 9,500 samples a second: a period 9.5 times as long.
        assert_eq!(pace(1_000_000).next(9_500.0), 9_500_000);
        // Every wait sampled and too many: from the shortest period up.
        assert_eq!(pace(0).next(2_000.0), 100_000);
        // Within the bound: kept; well under it: halved, then every wait.
        assert_eq!(pace(1_000_000).next(800.0), 1_000_000);
        assert_eq!(pace(1_000_000).next(300.0), 500_000);
        assert_eq!(pace(60_000).next(0.0), 0);
        assert_eq!(pace(0).next(0.0), 0);
        // At most what the program's arithmetic takes.
        assert_eq!(pace(1 << 31).next(1e9), u64::from(u32::MAX));
        // No bound: every wait, whatever the rate.
        let unbounded = Pace::new(0);
        assert_eq!((unbounded.period_ns, unbounded.next(1e9)), (0, 0));
    }
}
