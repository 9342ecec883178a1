//! Off-CPU samples: the program's two halves loaded and attached at BTF-typed
//! tracepoints, `note_switch` at `sched_switch` (a thread of a followed process leaves
//! its CPU inside a system call: the time is noted; the thread switched to has its time
//! away added up) and `sample_off_cpu` at `sys_exit` (the call returns, on the thread:
//! sampled when it was away long enough). Tracepoints, not a kprobe or the BPF
//! trampoline at `finish_task_switch`: kernels built without kprobes, or that refuse the
//! trampoline there (the function is often renamed `finish_task_switch.isra.0`), still
//! have them.

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

/// Program `name` of the object, a BTF-typed tracepoint's.
fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut BtfTracePoint, EbpfError> {
    ebpf.program_mut(name)
        .ok_or_else(|| EbpfError::Setup(format!("the object has no program {name}")))?
        .try_into()
        .map_err(|e| EbpfError::Setup(explain(&e).0))
}
