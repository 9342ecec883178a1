//! Off-CPU time, as an embedder takes it: the C fixture whose four routes each wait their
//! own way (`fixtures/off_cpu.c`) profiled for 5 s by ptrace's wall-clock rounds, each
//! sample split by the thread's CPU clock; then the share of each route's time spent off
//! a CPU, the stacks it waited in, and pprof's third value read back. Root only (ptrace).

#[path = "support/fixture.rs"]
mod fixture;

use std::time::Duration;

use fixture::{build_publisher, go, out_path, pprof, Fixture};
use otel_ctx_profile::{FoldedOptions, ProcessProfiler, Profile, SessionOptions, Show};
use otel_ctx_sampler::{Method, OffCpu, SamplerOptions};

/// Each route, its own function, and the least (or, for `/cpu`, the most) share of its
/// wall-clock time the profile must find off a CPU.
const ROUTES: [(&str, &str, f64); 4] = [
    ("/cpu", "cpu_route", 0.25),
    ("/sleep", "sleep_route", 0.60),
    ("/lock", "lock_route", 0.50),
    ("/pipe", "pipe_route", 0.60),
];

/// The off-CPU time of `route`'s samples, in all and in stacks through `function`.
fn off_cpu_through(profile: &Profile, route: &str, function: &str) -> (u64, u64) {
    let (mut all, mut through) = (0, 0);
    for entry in &profile.entries {
        let labels = &profile.label_sets[entry.labels];
        if labels.get("http.route") != Some(route) {
            continue;
        }
        all += entry.off_cpu_nanos;
        let stack = entry.stack.map_or(&[][..], |s| &profile.stacks[s][..]);
        if stack
            .iter()
            .any(|&l| profile.locations[l].function_name() == function)
        {
            through += entry.off_cpu_nanos;
        }
    }
    (all, through)
}

#[test]
fn each_route_waits_where_it_waits() {
    let exe = build_publisher("off_cpu.c", "off-cpu", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    let sampler = SamplerOptions::default()
        .with_method(Some(Method::Ptrace))
        .with_off_cpu(Some(OffCpu::default()));
    let options = SessionOptions::default().with_sampler(sampler);
    let mut session = ProcessProfiler::start(fixture.pid, options).expect("a session");
    session.run(Duration::from_secs(5), |_| false).expect("run");
    session.finish();
    let profile = session.profile();
    assert!(profile.off_cpu);
    let summary = session.summary(&profile).to_string();
    assert!(
        summary.contains("time by http.route, on a CPU and off it:"),
        "{summary}"
    );
    let times = profile.time_by("http.route");
    for (route, function, bound) in ROUTES {
        let &(_, on, off) = times
            .iter()
            .find(|(group, ..)| group == route)
            .unwrap_or_else(|| panic!("no {route} in {times:?}"));
        // Five seconds of one thread, give or take the first round (its baseline).
        let wall = on + off;
        assert!(
            (4_000_000_000..5_500_000_000).contains(&wall),
            "{route}: {wall} ns of wall time\n{summary}"
        );
        let share = off as f64 / wall as f64;
        if route == "/cpu" {
            assert!(share < bound, "{route}: {share:.2} off a CPU\n{summary}");
            continue;
        }
        assert!(share >= bound, "{route}: {share:.2} off a CPU\n{summary}");
        let (all, through) = off_cpu_through(&profile, route, function);
        assert_eq!(all, off);
        assert!(
            through as f64 >= 0.8 * all as f64,
            "{route}: {through} of {all} ns off a CPU through {function}"
        );
        assert!(summary.contains(&format!("  {route}: ")), "{summary}");
    }
    // The flame graph of off-CPU time has the waits, and not the spinning.
    let folded = profile.folded(&FoldedOptions::default().with_show(Show::OffCpu));
    let waits: u64 = folded
        .iter()
        .filter(|(line, _)| line.starts_with("/sleep;") && line.contains("sleep_route"))
        .map(|(_, micros)| micros)
        .sum();
    assert!(
        waits > 2_000_000,
        "{waits} us of /sleep off a CPU: {folded:?}"
    );
    let wall = profile.folded(&FoldedOptions::default().with_show(Show::Wall));
    let cpu = profile.folded(&FoldedOptions::default().with_show(Show::Cpu));
    let total = |lines: &std::collections::BTreeMap<String, u64>| lines.values().sum::<u64>();
    assert!(
        total(&wall) >= total(&cpu) + total(&folded) - 1_000,
        "{wall:?}"
    );
    // pprof: a third value, off_cpu in nanoseconds, which go tool pprof reads.
    let out = out_path("off-cpu.pb.gz");
    profile
        .write_pprof(std::fs::File::create(&out).expect("create"))
        .expect("write pprof");
    if go().is_some() {
        let top = pprof(&["-sample_index=off_cpu", "-top", "-nodecount=200"], &out);
        assert!(
            top.contains("sleep_route") && top.contains("pipe_route"),
            "{top}"
        );
        let types = pprof(&["-raw"], &out);
        assert!(types.contains("off_cpu/nanoseconds"), "{types}");
    }
    fixture.finish();
}
