//! The static `otel-ctx` of `scripts/build-static.sh` (musl, with the eBPF sampler), built
//! by that command as the README gives it: `ldd` finds it static, it runs, and it profiles
//! the C fixture by route, with the eBPF sampler and with ptrace. Root (ptrace, BPF), gcc,
//! musl-gcc and the rustup target x86_64-unknown-linux-musl.
//!
//! The command builds in release mode; unless CARGO_PROFILE_RELEASE_OPT_LEVEL says
//! otherwise, without optimizations (0): what this checks is what the command makes, not
//! how fast the tool runs, at a third of the build's time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use fixture::{build_routes, Fixture, ROUTES};
use support::{bounded, text};

/// Runs `bash scripts/build-static.sh`; the executable it names on its last line.
fn build_static() -> PathBuf {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/build-static.sh");
    let level = std::env::var("CARGO_PROFILE_RELEASE_OPT_LEVEL").unwrap_or_else(|_| "0".into());
    let out = Command::new("bash")
        .arg(script)
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", level)
        .stderr(Stdio::inherit())
        .output()
        .expect("run bash");
    assert!(out.status.success(), "scripts/build-static.sh failed");
    let said = text(&out.stdout);
    let path = PathBuf::from(said.lines().last().expect("a path").trim());
    assert!(path.is_file(), "{said}");
    path
}

/// Samples per route, and whether each route's leaf function was among them.
fn by_route(folded: &str) -> BTreeMap<String, (u64, bool)> {
    let mut routes: BTreeMap<String, (u64, bool)> = BTreeMap::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("`stack count`");
        let frames: Vec<&str> = stack.split(';').collect();
        let entry = routes.entry(frames[0].to_owned()).or_default();
        entry.0 += n.parse::<u64>().expect("a count");
        entry.1 |= frames.last().is_some_and(|leaf| leaf.ends_with("_leaf"));
    }
    routes
}

fn profile(tool: &Path, pid: u32, dir: &Path, name: &str, extra: &[&str]) -> String {
    let path = dir.join(format!("{name}.folded"));
    let out = bounded::output(
        Command::new(tool)
            .args(["profile", &pid.to_string(), "--duration", "2s", "-o"])
            .arg(&path)
            .args(extra)
            .stdin(Stdio::null()),
        bounded::DEADLINE,
    )
    .expect("run the static otel-ctx");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{name}: {stderr}");
    let routes = by_route(&std::fs::read_to_string(&path).expect("the profile"));
    for (route, prefix) in ROUTES {
        let (samples, leaf) = routes.get(route).copied().unwrap_or_default();
        assert!(
            samples >= 10 && leaf,
            "{name}: {route} ({prefix}): {routes:?}"
        );
    }
    stderr
}

#[test]
fn the_static_build_is_static_runs_and_profiles() {
    let tool = build_static();

    let ldd = Command::new("ldd").arg(&tool).output().expect("run ldd");
    let said = format!("{}{}", text(&ldd.stdout), text(&ldd.stderr));
    assert!(
        said.contains("statically linked") || said.contains("not a dynamic executable"),
        "ldd {}: {said}",
        tool.display()
    );

    let version =
        bounded::output(Command::new(&tool).arg("--version"), bounded::DEADLINE).expect("run it");
    assert!(version.status.success());
    assert_eq!(
        text(&version.stdout).trim(),
        format!("otel-ctx {}", env!("CARGO_PKG_VERSION"))
    );

    let exe = build_routes("static-routes", &["-fomit-frame-pointer"]);
    let fixture = Fixture::start_with_env(&exe, &[], &[("OTEL_SERVICE_NAME", "static-check")]);
    let ps = bounded::output(
        Command::new(&tool).args(["ps", "--json"]),
        bounded::DEADLINE,
    )
    .expect("run ps");
    let doc: serde_json::Value = serde_json::from_slice(&ps.stdout).expect("ps --json");
    assert!(
        doc["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .any(|p| p["pid"] == fixture.pid && p["service.name"] == "static-check"),
        "{doc}"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("static-binary");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let by_ebpf = profile(&tool, fixture.pid, &dir, "ebpf", &[]);
    assert!(by_ebpf.contains("(eBPF)"), "{by_ebpf}");
    let by_ptrace = profile(&tool, fixture.pid, &dir, "ptrace", &["--ptrace"]);
    assert!(by_ptrace.contains("(ptrace)"), "{by_ptrace}");
    fixture.finish();
}
