//! A CPU profile counts time on a CPU, nothing else: on a host made busy by more spinning
//! processes than it has CPUs, a target that gets only part of a CPU is sampled for the
//! time its scheduler says it ran, by ptrace rounds (each sample weighted by the thread's
//! own CPU time since the last round) and by the BPF program (a CPU-clock tick is one
//! period of CPU time), within 25% of the kernel's accounting for the same window. A
//! thread that stops running stops being sampled, though stopping it for a sample makes
//! it run a little. Root only (ptrace, BPF).

use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use otel_ctx_reader::procfs;
use otel_ctx_sampler::{Following, Method, Sampler, SamplerOptions};

mod spinner;
use spinner::Spinner;

/// Samples per second.
const HZ: u32 = 199;

/// The target's CPU time by the kernel, and by the samples, over `window`.
fn cpu_seconds(method: Method, window: Duration) -> (f64, f64) {
    let target = Spinner::start();
    // More spinners than CPUs: every one of them waits for a CPU part of the time.
    let cpus = std::thread::available_parallelism().map_or(2, usize::from);
    let _load: Vec<Spinner> = (0..cpus).map(|_| Spinner::start()).collect();
    let pid = target.id();
    let options = SamplerOptions::default()
        .with_method(Some(method))
        .with_frequency_hz(HZ)
        .with_stack_size(4096);
    let mut sampler = Sampler::new(options).expect("a sampler");
    assert!(matches!(
        sampler.add_process(pid).expect("follow the spinner"),
        Following::StacksOnly(_)
    ));
    let period_ns = 1_000_000_000 / u64::from(HZ);
    let (mut sampled_ns, mut first) = (0u64, None);
    let end = Instant::now() + window;
    while Instant::now() < end {
        sampler
            .step(Duration::from_millis(50), |s| {
                if s.pid == pid {
                    sampled_ns += match s.weight_ns {
                        0 => period_ns,
                        w => w,
                    };
                }
                false
            })
            .expect("a step");
        // The kernel's window starts after the first step: ptrace's first round only
        // sets each thread's baseline.
        first.get_or_insert_with(|| procfs::task_cpu_time(pid, pid).expect("schedstat"));
    }
    let kernel_ns = procfs::task_cpu_time(pid, pid).expect("schedstat") - first.unwrap_or(0);
    (kernel_ns as f64 / 1e9, sampled_ns as f64 / 1e9)
}

fn agrees(method: Method) {
    let (kernel, sampled) = cpu_seconds(method, Duration::from_secs(3));
    eprintln!("{method:?}: the kernel says {kernel:.2} s on a CPU, the samples {sampled:.2} s");
    assert!(kernel > 0.2, "the target hardly ran: {kernel:.2} s");
    assert!(
        (sampled - kernel).abs() <= 0.25 * kernel,
        "{method:?}: {sampled:.2} s sampled against {kernel:.2} s on a CPU"
    );
}

#[test]
fn ptrace_counts_cpu_time_as_the_kernel_does() {
    agrees(Method::Ptrace);
}

#[cfg(feature = "ebpf")]
#[test]
fn ebpf_counts_cpu_time_as_the_kernel_does() {
    agrees(Method::Ebpf);
}

/// The target's samples and their weight over `window`, by ptrace.
fn ptrace_samples(sampler: &mut Sampler, pid: u32, window: Duration) -> (u32, u64) {
    let (mut samples, mut weight_ns) = (0, 0);
    let end = Instant::now() + window;
    while Instant::now() < end {
        sampler
            .step(Duration::from_millis(50), |s| {
                if s.pid == pid {
                    samples += 1;
                    weight_ns += s.weight_ns;
                }
                false
            })
            .expect("a step");
    }
    (samples, weight_ns)
}

/// Stopping a sleeping thread for a sample wakes it, and resuming it does again: the next
/// round must not take that for the thread's own work, or one sample of an idle thread
/// would lead to the next for the rest of the profile.
#[test]
fn a_thread_that_stops_running_is_not_sampled_after() {
    // A shell that spins until SIGUSR1, then sleeps in `wait` for its `sleep`.
    let target = Spinner::script("trap 'sleep 60' USR1; while :; do :; done");
    let pid = target.id();
    let options = SamplerOptions::default()
        .with_method(Some(Method::Ptrace))
        .with_frequency_hz(HZ)
        .with_stack_size(4096);
    let mut sampler = Sampler::new(options).expect("a sampler");
    sampler.add_process(pid).expect("follow the shell");
    let (busy, _) = ptrace_samples(&mut sampler, pid, Duration::from_millis(500));
    assert!(busy > 10, "{busy} samples of a spinning shell in 0.5 s");
    let raw = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .expect("a pid");
    kill_process(raw, Signal::USR1).expect("signal the shell");
    let deadline = Instant::now() + Duration::from_secs(10);
    while procfs::task_stat(pid, pid).is_some_and(|s| s.is_running()) {
        assert!(
            Instant::now() < deadline,
            "the shell still spins after 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The round after the shell stopped spinning may still count its last moments.
    let (idle, weight_ns) = ptrace_samples(&mut sampler, pid, Duration::from_secs(1));
    assert!(
        idle <= 3,
        "{idle} samples ({weight_ns} ns) of a shell asleep for 1 s at {HZ} Hz"
    );
}
