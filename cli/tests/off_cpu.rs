//! Off-CPU time through the tool, as a user asks for it: `profile PID --off-cpu` on the C
//! fixture whose four routes each wait their own way (`/cpu` spins, `/sleep` naps, `/lock`
//! waits for a mutex held 90% of the time, `/pipe` reads a pipe fed every 20 ms), by
//! eBPF and then by ptrace's wall-clock rounds; the summary's time per route, the
//! off-CPU flame graph's stacks, and `watch --off-cpu` (OTLP's second profile is in
//! `fleet_otlp.rs`, with the decoder).
//! A build with the eBPF sampler; root (ptrace, BPF) and gcc.
#![cfg(feature = "ebpf")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use fixture::{build_publisher, Fixture};
use support::{read_folded, run, scratch, text};

/// A fixture's `/cpu` thread spins on a CPU, and a second one beside it would make it
/// wait for one: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Each route, its own function, and the share of its wall-clock time off a CPU that
/// eBPF must find: at least this much (at most, for `/cpu`).
const ROUTES: [(&str, &str, f64); 4] = [
    ("/cpu", "cpu_route", 0.25),
    ("/sleep", "sleep_route", 0.60),
    ("/lock", "lock_route", 0.50),
    ("/pipe", "pipe_route", 0.60),
];

/// The summary's `  <route>: 1.2s on a CPU, 3.4s off (..)` lines: route to (on, off).
fn times(summary: &str) -> BTreeMap<String, (f64, f64)> {
    let seconds = |s: &str| s.trim().trim_end_matches('s').parse::<f64>().ok();
    summary
        .lines()
        .filter_map(|line| {
            let (route, rest) = line.strip_prefix("  ")?.split_once(": ")?;
            let (on, rest) = rest.split_once(" on a CPU, ")?;
            let (off, _) = rest.split_once(" off (")?;
            Some((route.to_owned(), (seconds(on)?, seconds(off)?)))
        })
        .collect()
}

/// Profiles `pid` for 5 s with `sampler`: the summary's times per route, and the
/// off-CPU flame graph's stacks.
fn profile(pid: u32, sampler: &str, dir: &Path) -> (BTreeMap<String, (f64, f64)>, support::Folded) {
    let out = dir.join(format!("{sampler}.folded"));
    let run = run(&[
        "profile",
        &pid.to_string(),
        "--off-cpu",
        // More samples than by default: the shares are compared within 15 points.
        "--off-cpu-max-rate",
        "1000",
        "--sampler",
        sampler,
        "--duration",
        "5s",
        "--show",
        "off-cpu",
        "-o",
        out.to_str().unwrap(),
    ]);
    let summary = text(&run.stderr);
    assert!(run.status.success(), "{sampler}: {summary}");
    assert!(
        summary.contains("time by http.route, on a CPU and off it:"),
        "{summary}"
    );
    (times(&summary), read_folded(&out))
}

/// The share of `route`'s off-CPU time (in the folded stacks) in stacks through
/// `function`.
fn through(folded: &support::Folded, route: &str, function: &str) -> f64 {
    let mut all = 0;
    let mut via = 0;
    for (frames, micros) in folded {
        if frames.first().map(String::as_str) != Some(route) {
            continue;
        }
        all += micros;
        if frames.iter().any(|f| f == function) {
            via += micros;
        }
    }
    via as f64 / all.max(1) as f64
}

#[test]
fn each_route_waits_where_it_waits_by_both_samplers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = build_publisher("off_cpu.c", "cli-off-cpu", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    let dir = scratch("off-cpu");
    let (ebpf, folded) = profile(fixture.pid, "ebpf", &dir);
    let (ptrace, _) = profile(fixture.pid, "ptrace", &dir);
    let share = |times: &BTreeMap<String, (f64, f64)>, route: &str| {
        let &(on, off) = times
            .get(route)
            .unwrap_or_else(|| panic!("no {route} in {times:?}"));
        off / (on + off).max(1e-9)
    };
    for (route, function, bound) in ROUTES {
        let by_ebpf = share(&ebpf, route);
        let by_ptrace = share(&ptrace, route);
        let said = format!("{route}: eBPF {ebpf:?}, ptrace {ptrace:?}");
        if route == "/cpu" {
            assert!(by_ebpf < bound, "{said}");
        } else {
            assert!(by_ebpf >= bound, "{said}");
            // Where each wait sits: under the route's own function.
            let via = through(&folded, route, function);
            assert!(
                via >= 0.8,
                "{route}: {via:.2} of its off-CPU time through {function}"
            );
        }
        assert!((by_ebpf - by_ptrace).abs() <= 0.15, "{said}");
    }
    // The stack of a wait ends in the C library's call that blocked.
    let leaves: Vec<&String> = folded.keys().filter_map(|frames| frames.last()).collect();
    for call in ["nanosleep", "read", "futex_wait"] {
        assert!(
            leaves.iter().any(|leaf| leaf.contains(call)),
            "no stack ends in {call}: {leaves:?}"
        );
    }
    fixture.finish();
}

#[test]
fn watch_shows_the_split() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = build_publisher(
        "off_cpu.c",
        "cli-off-cpu-watch",
        &["-fno-omit-frame-pointer"],
    );
    let fixture = Fixture::start(&exe, &[]);
    let pid = fixture.pid.to_string();
    let watch = run(&["watch", &pid, "--off-cpu", "--duration", "2s", "--json"]);
    assert!(watch.status.success(), "{}", text(&watch.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&watch.stdout).expect("JSON");
    let counts = doc["counts"].as_array().expect("counts");
    let off_share = |route: &str| {
        let row = counts
            .iter()
            .find(|c| c["value"] == route)
            .unwrap_or_else(|| panic!("no {route} in {doc}"));
        let (on, off) = (
            row["cpu_s"].as_f64().unwrap(),
            row["off_cpu_s"].as_f64().unwrap(),
        );
        off / (on + off).max(1e-9)
    };
    assert!(
        off_share("/sleep") >= 0.6 && off_share("/cpu") < 0.25,
        "{doc}"
    );
    // Each wait labeled with the system call it was in: a flame graph of them.
    let dir = scratch("off-cpu-syscalls");
    let out = dir.join("calls.folded");
    let args = [
        "profile",
        &pid,
        "--off-cpu",
        "--show",
        "off-cpu",
        "--duration",
        "2s",
    ];
    let by = ["--by", "off_cpu.syscall", "-o", out.to_str().unwrap()];
    let calls = run(&[&args[..], &by[..]].concat());
    assert!(calls.status.success(), "{}", text(&calls.stderr));
    let mut roots: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, micros) in read_folded(&out) {
        *roots.entry(frames[0].clone()).or_default() += micros;
    }
    // /pipe reads, /lock and the holder wait on a futex, /sleep, the holder and the
    // feeder nap.
    for call in ["read", "futex", "clock_nanosleep"] {
        assert!(
            roots.get(call).is_some_and(|&us| us > 100_000),
            "{call}: {roots:?}"
        );
    }
    fixture.finish();
}

/// `--off-cpu-one-in 4` follows one system call in four and weighs each sample by four:
/// every route's off-CPU time comes out as when every call is followed (each wait
/// sampled, no bound on the rate, so that only the choice of calls varies). The dice
/// are rolled once a call, however many times it leaves its CPU.
///
/// The calls followed are a binomial draw: with `n` calls of about equal waits, the
/// estimate's relative deviation is `sqrt(3 / n)`. The pipe is fed every 4 ms and each
/// run lasts 6 s, so that the route with the fewest calls, `/lock` (one wait of about
/// 9 ms every 10 ms, some 600 calls), keeps 25% at 3.5 deviations, and `/pipe` (some
/// 1,500 calls) at 5.
#[test]
fn one_call_in_n_stands_for_n() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = build_publisher(
        "off_cpu.c",
        "cli-off-cpu-one-in",
        &["-fno-omit-frame-pointer"],
    );
    let fixture = Fixture::start_with_env(&exe, &[], &[("OFF_CPU_FEED_US", "4000")]);
    let pid = fixture.pid.to_string();
    let dir = scratch("off-cpu-one-in");
    let off_by_route = |one_in: &str| {
        let out = dir.join(format!("one-in-{one_in}.folded"));
        let args = ["profile", &pid, "--off-cpu", "--off-cpu-max-rate", "0"];
        let more = ["--off-cpu-one-in", one_in, "--duration", "6s", "-o"];
        let out = run(&[&args[..], &more[..], &[out.to_str().unwrap()]].concat());
        let summary = text(&out.stderr);
        assert!(out.status.success(), "{summary}");
        let times = times(&summary);
        assert!(times.len() >= 4, "{summary}");
        times
    };
    let every = off_by_route("1");
    let one_in_four = off_by_route("4");
    for (route, &(_, off)) in &every {
        if route == "/cpu" {
            continue;
        }
        let quarter = one_in_four.get(route).map_or(0.0, |t| t.1);
        let ratio = quarter / off.max(1e-9);
        assert!(
            (0.75..=1.25).contains(&ratio),
            "{route}: {quarter:.2} s off a CPU following one call in 4, {off:.2} s following all"
        );
    }
    fixture.finish();
}
