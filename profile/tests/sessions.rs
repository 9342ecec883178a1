//! The profile layer's sessions, as an embedder uses them: `examples/profile_pid.rs` (a
//! process profiled for a few seconds through the libraries alone) run on the C fixture
//! by ptrace and by the default sampler, and its pprof read back by `go tool pprof`; a
//! fleet given two processes. Root only (ptrace, BPF).

#[path = "support/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fixture::{bounded, build_routes, go, out_path, pprof, Fixture, ROUTES};
use otel_ctx_profile::{FleetOptions, FleetProfiler, ProcessProfiler, SessionOptions};
use otel_ctx_reader::procfs;
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
        // It profiles for 3 s; a minute leaves room for its start and its symbols.
        let mut command = Command::new(example());
        command.arg(fixture.pid.to_string()).arg(&out).args(how);
        let run =
            bounded::output(&mut command, bounded::DEADLINE).expect("run examples/profile_pid");
        let said = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{how:?}: {said}");
        assert!(said.contains("written to"), "{said}");
        if how.is_empty() && cfg!(not(feature = "ebpf")) {
            // Without the eBPF sampler built in, the default is ptrace, and the example
            // says why and how to get eBPF.
            assert!(said.contains("(ptrace)"), "{said}");
            assert!(
                said.contains("eBPF not used: ") && said.contains("--features ebpf"),
                "{said}"
            );
        }
        if how.is_empty() && cfg!(feature = "ebpf") {
            // Built with it: eBPF, or the reason it could not be used.
            assert!(
                said.contains("(eBPF)") || said.contains("eBPF not used: "),
                "{said}"
            );
        }
        if !how.is_empty() {
            assert!(!said.contains("eBPF not used"), "{said}");
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

/// Discovery without the publication hook (`with_publication_hook(false)`): the BPF hook
/// is not asked for, and a publisher is found by the scans of `/proc` alone.
#[test]
fn discovery_by_scans_alone() {
    let exe = build_routes("sessions-scan", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "scanned")]);
    let sampler = SamplerOptions::default().with_method(Some(Method::Ptrace));
    let options = FleetOptions::default()
        .with_session(SessionOptions::default().with_sampler(sampler))
        .with_discover(Some(Duration::from_millis(200)))
        .with_publication_hook(false);
    let mut fleet = FleetProfiler::start(options).expect("a fleet");
    assert_eq!(fleet.hook_refusal(), None, "the hook was not asked for");
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !fleet.members().iter().any(|m| m.pid == fixture.pid) {
        assert!(
            std::time::Instant::now() < end,
            "not found by a scan in 10 s"
        );
        fleet.step(Duration::from_millis(100)).expect("a step");
    }
    fixture.finish();
}

/// A process that sleeps throughout: the summary says that it never ran on a CPU, and the
/// profile's duration (the SVG's title) is the window sampled, the same as the summary's,
/// whatever making the profile took after it.
#[test]
fn an_idle_process_is_said_and_its_durations_agree() {
    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let sleeper = Kill(child);
    // Its start (the loader, `sleep`'s own set-up) is done before the window opens.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = sleeper.0.id();
    while procfs::task_stat(pid, pid).is_none_or(|s| s.is_running()) {
        assert!(Instant::now() < deadline, "sleep still runs after 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sampler = SamplerOptions::default().with_method(Some(Method::Ptrace));
    let options = SessionOptions::default().with_sampler(sampler);
    let mut session = ProcessProfiler::start(sleeper.0.id(), options).expect("a session");
    session
        .run(Duration::from_millis(500), |_| false)
        .expect("sampled");
    let window = session.elapsed();
    assert!(window >= Duration::from_millis(500), "{window:?}");
    // The window ended with the sampling.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(session.elapsed(), window);
    let profile = session.profile();
    assert_eq!(profile.duration, window);
    assert_eq!(profile.stats.samples, 0);
    let summary = session.summary(&profile).to_string();
    let seconds = format!("{:.1}", window.as_secs_f64());
    assert!(
        summary.contains(&format!(
            "process {} never ran on a CPU in the {seconds}s sampled",
            sleeper.0.id()
        )),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("0 samples in {seconds}s")),
        "{summary}"
    );
    assert!(
        profile
            .title()
            .contains(&format!(": {seconds} s, 0 samples")),
        "{}",
        profile.title()
    );
}
