//! The profile layer's sessions, as an embedder uses them: `examples/profile_pid.rs` (a
//! process profiled for a few seconds through the libraries alone) run on the C fixture
//! by ptrace and by the default sampler, and its pprof read back by `go tool pprof`; a
//! fleet given two processes. Root only (ptrace, BPF).

#[path = "support/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fixture::{build_routes, go, out_path, pprof, Fixture, ROUTES};
use otel_ctx_profile::{FleetOptions, FleetProfiler, SessionOptions};
use otel_ctx_sampler::{Method, SamplerOptions};

/// `examples/profile_pid`, built next to the test binaries' directory.
fn example() -> PathBuf {
    std::env::current_exe()
        .expect("test binary path")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("examples/profile_pid")
}

#[test]
fn the_forty_line_example_profiles_a_process() {
    let exe = build_routes("sessions-routes", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&exe, &[]);
    for how in [&["--ptrace"][..], &[]] {
        let out = out_path(&format!("profile_pid{}.pb.gz", how.concat()));
        let run = Command::new(example())
            .arg(fixture.pid.to_string())
            .arg(&out)
            .args(how)
            .output()
            .expect("run examples/profile_pid");
        let said = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{how:?}: {said}");
        assert!(said.contains("written to"), "{said}");
        if how.is_empty() && cfg!(not(feature = "ebpf")) {
            // Without the eBPF sampler built in, the default is ptrace.
            assert!(said.contains("(ptrace)"), "{said}");
        }
        let Some(_) = go() else {
            eprintln!("go is not installed: the pprof file is not read back");
            continue;
        };
        // Every route's handler is in the profile, under its own label.
        let top = pprof(&["-top", "-nodecount=200"], &out);
        for (route, prefix) in ROUTES {
            assert!(
                top.contains(prefix),
                "{how:?}: no {prefix} frame for {route}\n{top}"
            );
        }
        let tags = pprof(&["-tags"], &out);
        assert!(tags.contains("http.route"), "{tags}");
    }
    fixture.finish();
}

/// Steps the fleet for `time` (a ptrace step lasts one round).
fn step_for(fleet: &mut FleetProfiler, time: Duration) {
    let end = std::time::Instant::now() + time;
    while std::time::Instant::now() < end {
        fleet.step(Duration::from_millis(100)).expect("a step");
    }
}

#[test]
fn a_fleet_given_its_processes_profiles_each_apart() {
    let exe = build_routes("sessions-fleet", &["-fno-omit-frame-pointer"]);
    let a = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "fleet-a")]);
    let b = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "fleet-b")]);
    let sampler = SamplerOptions::default().with_method(Some(Method::Ptrace));
    let options =
        FleetOptions::default().with_session(SessionOptions::default().with_sampler(sampler));
    let mut fleet = FleetProfiler::start(options).expect("a fleet");
    for pid in [a.pid, b.pid] {
        assert!(fleet.follow(pid).expect("follow").has_contexts());
    }
    let members = fleet.members();
    assert_eq!(members.len(), 2, "{members:?}");
    step_for(&mut fleet, Duration::from_secs(1));
    let profiles = fleet.take_profiles();
    assert_eq!(profiles.len(), 2);
    for profile in &profiles {
        let want = if profile.pid == a.pid {
            "fleet-a"
        } else {
            "fleet-b"
        };
        assert_eq!(profile.service_name.as_deref(), Some(want));
        assert!(profile.stats.samples > 0 && profile.stats.with_context > 0);
    }
    // The next interval starts empty.
    assert!(fleet.take_profiles().is_empty());
    // A process that exits is dropped, its last samples kept for the next interval.
    a.finish();
    step_for(&mut fleet, Duration::from_millis(2500));
    assert_eq!(fleet.members().len(), 1);
    assert_eq!(fleet.counts().exited, 1);
    b.finish();
}
