//! Off-CPU samples: the program's two halves loaded and attached at BTF-typed
//! tracepoints, `note_switch` at `sched_switch` (a thread of a followed process first
//! leaves its CPU inside a system call: the time and its CPU time are noted) and
//! `sample_off_cpu` at `sys_exit` (the call returns, on the thread: the time since less
//! the CPU time since is its time away, sampled when long enough). Tracepoints, not a kprobe or the BPF
//! trampoline at `finish_task_switch`: kernels built without kprobes, or that refuse the
//! trampoline there (the function is often renamed `finish_task_switch.isra.0`), still
//! have them.

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

/// The most calls per one followed that the pace goes to by itself.
const MAX_ONE_IN: u32 = 1 << 16;

/// The off-CPU samples' pace: one call in how many the program follows, kept so that the
/// samples come no faster than a bound.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// The fewest calls per one followed (the options' `one_in`).
    pub least: u32,
    /// The most samples a second (0: no bound).
    pub max_rate: u32,
    /// One call in how many is followed now.
    pub one_in: u32,
    /// When the samples were last counted, and how many had been taken then.
    pub at: Instant,
    pub taken: u64,
}

impl Pace {
    /// One call in how many to follow from now on, the samples having come at `rate` a
    /// second while one in [`one_in`](Self::one_in) was followed: as many more as the
    /// rate exceeds the bound by; half as many once the samples come at under half the
    /// bound; never fewer than [`least`](Self::least) (up to 65,536), nor more than
    /// 65,536 unless `least` asks for more.
    pub fn next(&self, rate: f64) -> u32 {
        let least = self.least.max(1);
        if self.max_rate == 0 || least >= MAX_ONE_IN {
            return least;
        }
        let bound = f64::from(self.max_rate);
        let one_in = if rate > bound {
            (f64::from(self.one_in) * rate / bound).ceil() as u32
        } else if rate < bound / 2.0 {
            self.one_in / 2
        } else {
            self.one_in
        };
        one_in.clamp(least, MAX_ONE_IN)
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
        let pace = |one_in| Pace {
            least: 1,
            max_rate: 1000,
            one_in,
            at: Instant::now(),
            taken: 0,
        };
        // 9,500 samples a second following every call: one in 10 from now on.
        assert_eq!(pace(1).next(9_500.0), 10);
        // Within the bound: kept; well under it: halved, down to the least.
        assert_eq!(pace(10).next(800.0), 10);
        assert_eq!(pace(10).next(300.0), 5);
        assert_eq!(pace(1).next(0.0), 1);
        let least = Pace {
            least: 4,
            ..pace(4)
        };
        assert_eq!(least.next(0.0), 4);
        // No bound: the least, whatever the rate.
        let unbounded = Pace {
            max_rate: 0,
            ..pace(8)
        };
        assert_eq!(unbounded.next(1e9), 1);
        assert_eq!(pace(1 << 16).next(1e12), 1 << 16);
        // A least past the pace's own ceiling is kept as asked, at any rate.
        let huge = Pace {
            least: 100_000,
            ..pace(100_000)
        };
        assert_eq!((huge.next(1e9), huge.next(0.0)), (100_000, 100_000));
    }
}
