//! `otel-ctx profile` names frames the way perf and samply name them, for any process:
//! the symbol sources' C fixture (`profile/tests/fixtures/symbols.c`, a process that
//! publishes no thread contexts) profiled by eBPF and by ptrace, with Debian's
//! debuginfod serving the one debug file of a stripped library:
//! - libc's `start_thread` and `msort_with_tmp` in the sorting thread's stacks;
//! - the vDSO's `clock_gettime`, with its caller;
//! - the stripped library's hidden function, from debuginfod;
//! - our share of named frames beside `perf record --call-graph dwarf` and `perf
//!   report`'s, in one run of the fixture;
//! - hostile sources, each bounded and reported, the profile still written: a perf map
//!   of 1 GiB, a perf map that is a FIFO, a debug file whose CRC does not match, a
//!   debuginfod that never answers and one whose body never ends.
//!
//! Root, the `ebpf` feature, gcc, binutils, xz, libc6-dbg, debuginfod and linux-perf
//! (.ci/run installs them).
#![cfg(feature = "ebpf")]

mod support;

#[path = "../../profile/tests/support/fixture.rs"]
mod fixture;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use fixture::{
    build_symbols, endless_server, out_path, silent_server, DebuginfodServer, PerfMapFile,
    SymbolsBuild, SymbolsFixture,
};
use support::{bounded, otel_ctx, text};

/// The vDSO's name of `clock_gettime`.
#[cfg(target_arch = "x86_64")]
const VDSO_CLOCK_GETTIME: &str = "__vdso_clock_gettime";
#[cfg(target_arch = "aarch64")]
const VDSO_CLOCK_GETTIME: &str = "__kernel_clock_gettime";

/// Folded stacks, root (the thread's name) first, to samples.
type Folded = BTreeMap<Vec<String>, u64>;

/// The fixture and the debuginfod server, made once for the tests of this file, which
/// take turns with them.
struct Scene {
    build: SymbolsBuild,
    fixture: SymbolsFixture,
    debuginfod: DebuginfodServer,
}

fn scene() -> MutexGuard<'static, Scene> {
    static SCENE: OnceLock<Mutex<Scene>> = OnceLock::new();
    SCENE
        .get_or_init(|| {
            let build = build_symbols(&out_path("symbols"));
            let debuginfod = DebuginfodServer::start(
                &build.debuginfod_dir,
                &out_path(&format!("debuginfod-{}", std::process::id())),
                &build.hidden_build_id,
            );
            eprintln!(
                "debuginfod indexed the debug file in {:?}",
                debuginfod.indexed_in
            );
            let fixture = SymbolsFixture::start(&build.exe);
            drop(PerfMapFile::new(fixture.pid));
            Mutex::new(Scene {
                build,
                fixture,
                debuginfod,
            })
        })
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("symbols-cli-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// A run of `otel-ctx profile <pid> --by thread.name -o <dir>/out.folded <args>`, with
/// `debuginfod` as `DEBUGINFOD_URLS` (and `env`) and a fresh client cache.
struct Run {
    output: Output,
    took: Duration,
    folded: Folded,
    written: PathBuf,
}

impl Run {
    /// What it printed, stdout then stderr.
    fn said(&self) -> String {
        text(&self.output.stdout) + &text(&self.output.stderr)
    }
}

fn profile(pid: u32, name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = scratch(name);
    let written = dir.join("out.folded");
    let mut command = Command::new(otel_ctx());
    command
        .args(["profile", &pid.to_string(), "--by", "thread.name", "-o"])
        .arg(&written)
        .args(args)
        .env_remove("DEBUGINFOD_URLS")
        .env("DEBUGINFOD_CACHE_PATH", dir.join("debuginfod-cache"))
        .envs(env.iter().copied());
    let started = Instant::now();
    // Each samples for a few seconds; a debuginfod that never answers could hold one
    // for elfutils' 90 s, which the tests below must see as too long, not as a hang.
    let output = bounded::output(&mut command, Duration::from_secs(180)).expect("run otel-ctx");
    let took = started.elapsed();
    let run = Run {
        folded: read_folded(&written),
        output,
        took,
        written,
    };
    assert_eq!(run.output.status.code(), Some(0), "{}", run.said());
    run
}

fn read_folded(path: &Path) -> Folded {
    let body = std::fs::read_to_string(path).unwrap_or_default();
    body.lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            let frames = stack.split(';').map(str::to_owned).collect();
            Some((frames, count.parse().ok()?))
        })
        .collect()
}

/// The stacks of thread `name` (without the root), with their samples.
fn thread<'f>(folded: &'f Folded, name: &str) -> Vec<(&'f [String], u64)> {
    folded
        .iter()
        .filter(|(frames, _)| frames[0] == name)
        .map(|(frames, n)| (&frames[1..], *n))
        .collect()
}

fn is_unknown(frame: &str) -> bool {
    frame.starts_with("[unknown]")
}

/// Profiles the fixture for 2 s with `flags`, the local debuginfod as
/// `DEBUGINFOD_URLS`, and checks what every sampler must name.
fn check_names(name: &str, flags: &[&str], sampler: &str) {
    let scene = scene();
    let url = scene.debuginfod.url.clone();
    let mut args = vec!["--duration", "2s"];
    args.extend_from_slice(flags);
    let run = profile(scene.fixture.pid, name, &args, &[("DEBUGINFOD_URLS", &url)]);
    let all = format!("{}\n{:#?}", run.said(), run.folded);
    let said = run.said();
    assert!(said.contains(&format!("({sampler})")), "{all}");
    assert!(said.contains("publishes no thread contexts"), "{all}");
    assert!(
        said.contains("debuginfod: 1 of 1 debug file fetched"),
        "{all}"
    );

    let sorter = thread(&run.folded, "sorter");
    assert!(
        sorter.iter().any(|(frames, _)| {
            frames.iter().any(|f| f == "start_thread")
                && frames.iter().any(|f| f.starts_with("msort_with_tmp"))
        }),
        "{sampler}: no sorter stack with start_thread and msort_with_tmp\n{all}"
    );

    let clock = thread(&run.folded, "clock");
    assert!(
        clock.iter().any(|(frames, _)| {
            let n = frames.len();
            n >= 2
                && frames[n - 1] == VDSO_CLOCK_GETTIME
                && !is_unknown(&frames[n - 2])
                && frames.iter().any(|f| f == "clock_loop")
        }),
        "{sampler}: no stack through the vDSO with its caller named\n{all}"
    );

    let hidden = thread(&run.folded, "hidden");
    assert!(
        hidden.iter().any(|(frames, _)| {
            frames.ends_with(&["hidden_entry".to_owned(), "hidden_hidden_work".to_owned()])
        }),
        "{sampler}: the stripped library's hidden function is not named\n{all}"
    );
}

#[test]
fn by_ptrace_libc_the_vdso_and_the_debuginfod_library_are_named() {
    check_names("ptrace", &["--ptrace"], "ptrace");
}

#[test]
fn by_ebpf_libc_the_vdso_and_the_debuginfod_library_are_named() {
    check_names("ebpf", &[], "eBPF");
}

/// Named frames and all frames of folded stacks, each frame counted once per sample.
fn share(stacks: impl Iterator<Item = (Vec<String>, u64)>, named: fn(&str) -> bool) -> (u64, u64) {
    stacks.fold((0, 0), |(n, all), (frames, samples)| {
        let named_frames = frames.iter().filter(|f| named(f)).count() as u64;
        (
            n + named_frames * samples,
            all + frames.len() as u64 * samples,
        )
    })
}

/// `perf report`'s folded callchains: `<samples> <caller;...;leaf>` lines.
fn perf_folded(report: &str) -> Vec<(Vec<String>, u64)> {
    report
        .lines()
        .filter_map(|line| {
            let (count, stack) = line.split_once(' ')?;
            let count: u64 = count.parse().ok()?;
            Some((stack.split(';').map(str::to_owned).collect(), count))
        })
        .collect()
}

#[test]
fn named_share_at_least_perfs_in_the_same_run() {
    if Command::new("perf").arg("--version").output().is_err() {
        eprintln!("skipped: perf is not installed (Debian package linux-perf)");
        return;
    }
    let scene = scene();
    let pid = scene.fixture.pid;
    let url = scene.debuginfod.url.clone();
    let dir = scratch("perf");
    let data = dir.join("perf.data");
    // perf samples user stacks (as otel-ctx does) with a DWARF copy of each, on the same
    // event (the CPU clock: perf's default, the cycles counter, is there on some machines
    // and not on others, and lands elsewhere), at the same rate, over the same seconds as
    // otel-ctx.
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "--all-user",
            "--call-graph",
            "dwarf",
            "-F",
            "99",
            "-p",
        ])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", "3"])
        .env("DEBUGINFOD_URLS", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run perf record");
    let ours = profile(
        pid,
        "perf-ours",
        &["--duration", "3s"],
        &[("DEBUGINFOD_URLS", &url)],
    );
    let recorded = bounded::wait_with_output(perf, "perf record", bounded::DEADLINE);
    assert!(
        recorded.status.success(),
        "perf record: {}",
        text(&recorded.stderr)
    );
    let report = fixture::tool(
        &dir,
        "perf",
        &[
            "report",
            "--stdio",
            "--no-children",
            "--percent-limit",
            "0",
            "-g",
            "folded,0,caller,count",
            "-i",
            data.to_str().expect("UTF-8 path"),
        ],
    );
    let perf_stacks = perf_folded(&report);
    assert!(!perf_stacks.is_empty(), "perf report gave no callchains");

    let (perf_named, perf_all) = share(perf_stacks.into_iter(), |f| {
        !f.starts_with("[unknown]") && !f.starts_with("0x")
    });
    let (our_named, our_all) = share(
        ours.folded
            .iter()
            .map(|(frames, n)| (frames[1..].to_vec(), *n)),
        |f| !is_unknown(f),
    );
    let percent = |n: u64, all: u64| 100.0 * n as f64 / all.max(1) as f64;
    eprintln!(
        "named frames: otel-ctx {our_named} of {our_all} ({:.1}%), perf {perf_named} of \
         {perf_all} ({:.1}%)",
        percent(our_named, our_all),
        percent(perf_named, perf_all)
    );
    assert!(our_all > 0 && perf_all > 0);
    // ours / our_all >= perf / perf_all, in integers.
    assert!(
        u128::from(our_named) * u128::from(perf_all)
            >= u128::from(perf_named) * u128::from(our_all),
        "otel-ctx named {our_named} of {our_all} frames, perf {perf_named} of {perf_all}\n{}",
        ours.said()
    );
}

#[test]
fn hostile_perf_maps_bounded_and_reported() {
    let scene = scene();
    let pid = scene.fixture.pid;
    let map = PerfMapFile::new(pid);

    // 1 GiB, sparse, the JIT code's line at its very end: read from its end, within the
    // module budget.
    map.write_sparse(1 << 30, &format!("{:x} 6 jit_spin_late", scene.fixture.jit));
    let run = profile(pid, "perf-map-1g", &["--duration", "1s", "--ptrace"], &[]);
    eprintln!(
        "a 1 GiB perf map: otel-ctx profile took {:?} (1 s of sampling)",
        run.took
    );
    let said = run.said();
    assert!(
        said.contains(&format!(
            "perf map {}: 1 function, 0 bad lines skipped",
            map.0
        )),
        "{said}"
    );
    assert!(
        said.contains("1024 MiB: only its last 64 MiB read"),
        "{said}"
    );
    assert!(run.written.is_file());
    assert!(
        thread(&run.folded, "jit")
            .iter()
            .any(|(frames, _)| frames.last().is_some_and(|f| f == "jit_spin_late")),
        "{said}\n{:#?}",
        run.folded
    );

    // A FIFO: refused, never opened for reading (which would block until a writer came).
    map.make_fifo();
    let run = profile(pid, "perf-map-fifo", &["--duration", "1s", "--ptrace"], &[]);
    eprintln!(
        "a FIFO perf map: otel-ctx profile took {:?} (1 s of sampling)",
        run.took
    );
    let said = run.said();
    assert!(said.contains("refused: it is a FIFO"), "{said}");
    assert!(run.written.is_file() && !run.folded.is_empty(), "{said}");
}

/// A debuginfod that accepts and never answers, with elfutils' 90 s timeout: a 2 s
/// profile still ends within 5 s of its start, by eBPF and by ptrace, and loses no
/// sample (the sampling stops before the fetch); the module's frames are `[unknown]`,
/// and the summary says why.
#[test]
fn a_silent_debuginfod_does_not_stretch_the_run() {
    let scene = scene();
    let hidden = format!("{}/libhidden.so", scene.build.dir.display());
    for sampler in ["ebpf", "ptrace"] {
        let silent = silent_server(Arc::new(AtomicU64::new(0)));
        let run = profile(
            scene.fixture.pid,
            &format!("debuginfod-never-{sampler}"),
            &["--duration", "2s", "--sampler", sampler],
            &[("DEBUGINFOD_URLS", &silent)],
        );
        let said = run.said();
        eprintln!(
            "{sampler}: a silent debuginfod, a 2 s profile took {:?}",
            run.took
        );
        assert!(run.took < Duration::from_secs(5), "{:?}\n{said}", run.took);
        assert!(said.contains(", 0 lost;"), "{said}");
        assert!(
            said.contains(&format!("symbols of {hidden} (debuginfod failure)"))
                && said.contains("left for fetching"),
            "{said}"
        );
    }
}

#[test]
fn hostile_debug_sources_bounded_and_reported() {
    let scene = scene();
    let pid = scene.fixture.pid;
    let hidden = format!("{}/libhidden.so", scene.build.dir.display());
    let crclink = format!("{}/libcrclink.so", scene.build.dir.display());

    // A debuginfod that accepts and never answers: given up after DEBUGINFOD_TIMEOUT
    // (within a longer time for fetching).
    let silent = silent_server(Arc::new(AtomicU64::new(0)));
    let run = profile(
        pid,
        "debuginfod-silent",
        &["--duration", "1s", "--ptrace", "--debuginfod-time", "10s"],
        &[("DEBUGINFOD_URLS", &silent), ("DEBUGINFOD_TIMEOUT", "2")],
    );
    eprintln!(
        "a silent debuginfod: otel-ctx profile took {:?} (1 s of sampling)",
        run.took
    );
    let said = run.said();
    assert!(
        said.contains(&format!("symbols of {hidden} (debuginfod failure)"))
            && said.contains("no answer within 2 s (DEBUGINFOD_TIMEOUT)"),
        "{said}"
    );
    assert!(
        said.contains("debuginfod: 0 of 1 debug file fetched"),
        "{said}"
    );
    assert!(said.contains("debuginfod failure)"), "{said}");
    assert!(run.written.is_file() && !run.folded.is_empty(), "{said}");

    // The debuglink file of another build, reported in every run.
    assert!(
        said.contains(&format!("symbols of {crclink} (missing debug file)"))
            && said.contains("its CRC-32 is"),
        "{said}"
    );

    // A debuginfod whose body never ends: stopped at DEBUGINFOD_MAXSIZE.
    let sent = Arc::new(AtomicU64::new(0));
    let endless = endless_server(sent.clone(), None);
    let run = profile(
        pid,
        "debuginfod-endless",
        &["--duration", "1s", "--ptrace"],
        &[
            ("DEBUGINFOD_URLS", &endless),
            ("DEBUGINFOD_MAXSIZE", "16777216"),
        ],
    );
    eprintln!(
        "an endless debuginfod body: otel-ctx profile took {:?} (1 s of sampling), {} MiB sent",
        run.took,
        sent.load(std::sync::atomic::Ordering::Relaxed) >> 20
    );
    let said = run.said();
    assert!(
        said.contains(&format!("symbols of {hidden} (debuginfod failure)"))
            && said.contains("DEBUGINFOD_MAXSIZE"),
        "{said}"
    );
    assert!(run.written.is_file() && !run.folded.is_empty(), "{said}");
}
