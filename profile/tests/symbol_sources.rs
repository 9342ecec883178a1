//! Every symbol source, on the symbol sources' C fixture (`symbols.c`: a process that
//! publishes no thread contexts), sampled by its stacks alone:
//! - libc's inner frames (`msort_with_tmp` under `start_thread`) from its separate
//!   debug file, found by build id (Debian's `libc6-dbg`);
//! - the vDSO's `clock_gettime`, named from its image in memory, with its caller: the
//!   walk goes on through the vDSO's CFI;
//! - a stripped library's static function from MiniDebugInfo (`.gnu_debugdata`);
//! - a debuglink whose debug file has another CRC, refused and reported;
//! - a stripped library's static function from debuginfod (a local server), cached, and
//!   the client's bounds against a server that never answers and one that never stops;
//! - JIT code named by a perf map, and hostile perf maps (1 GiB, a FIFO) bounded.
//!
//! Needs root (ptrace), gcc, binutils, xz and libc6-dbg (see .ci/run).

mod support;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use otel_ctx_profile::{Location, Profile, ProfileOptions, Profiler, SymbolSource, UnknownCause};
use support::{
    build_symbols, capture_stacks, out_path, profile_of, replay, Capture, PerfMapFile,
    SymbolsBuild, SymbolsFixture,
};

/// The fixture, built and started once for the tests of this file, which take turns.
struct Scene {
    /// Its files (the debug file a debuginfod serves).
    #[cfg_attr(not(feature = "debuginfod"), allow(dead_code))]
    build: SymbolsBuild,
    fixture: SymbolsFixture,
}

fn scene() -> MutexGuard<'static, Scene> {
    static SCENE: OnceLock<Mutex<Scene>> = OnceLock::new();
    SCENE
        .get_or_init(|| {
            let build = build_symbols(&out_path("symbols"));
            let fixture = SymbolsFixture::start(&build.exe);
            drop(PerfMapFile::new(fixture.pid));
            Mutex::new(Scene { build, fixture })
        })
        .lock()
        // A test that failed holding it leaves the fixture as it was.
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The stacks of thread `name`, leaf first, with their sample counts.
fn stacks<'p>(profile: &'p Profile, name: &str) -> Vec<(Vec<&'p Location>, u64)> {
    profile
        .entries
        .iter()
        .filter(|e| profile.label_sets[e.labels].get("thread.name") == Some(name))
        .filter_map(|e| {
            let stack = &profile.stacks[e.stack?];
            Some((
                stack.iter().map(|&at| &profile.locations[at]).collect(),
                e.samples,
            ))
        })
        .collect()
}

/// The folded stacks of `profile`, for failure messages.
fn folded(profile: &Profile) -> String {
    support::folded_text(profile)
}

fn named(location: &Location) -> bool {
    !location.symbols.is_empty()
}

fn capture(scene: &Scene) -> Capture {
    capture_stacks(scene.fixture.pid, 60)
}

#[test]
fn local_sources_name_libc_the_vdso_and_minidebuginfo() {
    let scene = scene();
    let captured = capture(&scene);
    let (profile, _) = profile_of(&captured, ProfileOptions::default());
    let all = folded(&profile);
    assert!(profile.stats.samples > 0, "no samples");
    assert!(
        profile.label_sets.iter().all(|l| !l.has_context),
        "the fixture publishes no thread context"
    );

    // libc's inner frames, from libc6-dbg's debug file (by build id).
    let sorter = stacks(&profile, "sorter");
    let has = |stacks: &[(Vec<&Location>, u64)], pred: &dyn Fn(&str) -> bool| {
        stacks
            .iter()
            .any(|(s, _)| s.iter().any(|l| pred(l.function_name())))
    };
    assert!(has(&sorter, &|n| n == "start_thread"), "{all}");
    assert!(has(&sorter, &|n| n.starts_with("msort_with_tmp")), "{all}");
    let libc = profile
        .mappings
        .iter()
        .find(|m| m.basename().starts_with("libc.so"))
        .expect("libc in the profile");
    assert!(
        libc.sources
            .iter()
            .any(|s| matches!(s, SymbolSource::BuildId { path, .. } if path.starts_with("/usr/lib/debug/.build-id/"))),
        "{:?}",
        libc.sources
    );
    // Its DWARF (thousands of compilation units) parsed only where the frames fell.
    let dwarf = profile.stats.debug_info;
    assert!(
        dwarf.modules >= 1 && dwarf.units_parsed >= 1 && dwarf.units_parsed * 10 < dwarf.units,
        "{dwarf:?}"
    );

    // The vDSO: its frame named, its caller named, and the walk on to clock_loop.
    let clock = stacks(&profile, "clock");
    let through_vdso = clock.iter().find(|(s, _)| {
        s.first().is_some_and(|leaf| {
            leaf.mapping
                .is_some_and(|m| profile.mappings[m].path == "[vdso]")
                && leaf.function_name().contains("clock_gettime")
        }) && s.get(1).is_some_and(|caller| named(caller))
            && s.iter().any(|l| l.function_name() == "clock_loop")
    });
    assert!(through_vdso.is_some(), "no stack through the vDSO:\n{all}");
    let vdso = profile
        .mappings
        .iter()
        .find(|m| m.path == "[vdso]")
        .unwrap();
    assert_eq!(vdso.sources, [SymbolSource::Vdso]);

    // MiniDebugInfo names the static function of the stripped libmini.so.
    assert!(
        has(&stacks(&profile, "mini"), &|n| n == "mini_hidden_work"),
        "{all}"
    );
    let mini = profile
        .mappings
        .iter()
        .find(|m| m.basename() == "libmini.so")
        .unwrap();
    assert!(
        mini.sources.contains(&SymbolSource::MiniDebugInfo),
        "{:?}",
        mini.sources
    );

    // The debuglink file of another build: refused, reported, its frames counted.
    let stats = &profile.stats;
    let crc = stats
        .symbol_problems
        .iter()
        .find(|p| p.subject.ends_with("/libcrclink.so"))
        .unwrap_or_else(|| panic!("{:?}", stats.symbol_problems));
    assert_eq!(crc.cause, UnknownCause::MissingDebugFile);
    assert!(crc.problem.contains("CRC-32"), "{}", crc.problem);
    assert!(
        !has(&stacks(&profile, "crclink"), &|n| n
            == "crclink_hidden_work"),
        "{all}"
    );
    // libhidden.so is stripped and has no debug file on disk (only debuginfod has it).
    let hidden = stats
        .symbol_problems
        .iter()
        .find(|p| p.subject.ends_with("/libhidden.so"))
        .unwrap_or_else(|| panic!("{:?}", stats.symbol_problems));
    assert!(
        hidden.problem.contains("no debug file"),
        "{}",
        hidden.problem
    );
    assert!(
        stats.unknown_frames.get(&UnknownCause::MissingDebugFile) >= Some(&2),
        "{:?}",
        stats.unknown_frames
    );
    // The JIT code: no module, and no perf map yet.
    assert!(stats.unknown_frames.get(&UnknownCause::NoSymbols) >= Some(&1));
    assert_eq!(stats.perf_map, None);
    assert_eq!(
        stats.unknown_frame_count(),
        profile.locations.iter().filter(|l| !named(l)).count() as u64
    );
}

#[test]
fn perf_maps_name_jit_code_and_hostile_ones_are_bounded() {
    let scene = scene();
    let captured = capture(&scene);
    let jit = scene.fixture.jit;
    let file = PerfMapFile::new(captured.pid);
    let mut profiler = Profiler::new(captured.pid, ProfileOptions::default());
    profiler.update_maps(&captured.maps);
    replay(&mut profiler, &captured.samples);
    let jit_leaf = |p: &Profile| -> Vec<String> {
        stacks(p, "jit")
            .iter()
            .filter_map(|(s, _)| s.first().map(|l| l.leaf_name().to_owned()))
            .collect()
    };

    // A perf map written after the samples were taken: read when the profile is made.
    std::fs::write(&file.0, format!("not a line\n{jit:x} 6 jit_spin\n")).unwrap();
    let profile = profiler.profile();
    assert!(
        jit_leaf(&profile).iter().all(|n| n == "jit_spin"),
        "{}",
        folded(&profile)
    );
    let map = profile
        .stats
        .perf_map
        .clone()
        .expect("the perf map was read");
    assert_eq!((map.symbols, map.bad_lines, map.partial), (1, 1, false));
    assert_eq!(map.path, file.0);

    // 1 GiB (sparse): its last 64 MiB read (the newest lines), said, bounded.
    file.write_sparse(1 << 30, &format!("{jit:x} 6 jit_spin_late"));
    let started = Instant::now();
    let profile = profiler.profile();
    let took = started.elapsed();
    let map = profile.stats.perf_map.clone().unwrap();
    assert!(map.partial, "{map:?}");
    assert!(
        map.problem
            .as_deref()
            .is_some_and(|p| p.contains("1024 MiB: only its last 64 MiB")),
        "{map:?}"
    );
    assert!(
        jit_leaf(&profile).iter().all(|n| n == "jit_spin_late"),
        "{}",
        folded(&profile)
    );
    assert!(profile
        .stats
        .symbol_problems
        .iter()
        .any(|p| p.subject == file.0 && p.cause == UnknownCause::Budget));
    eprintln!("a 1 GiB perf map: profile made in {took:?}");

    // A FIFO: refused without being opened for reading (which would block).
    file.make_fifo();
    let started = Instant::now();
    let profile = profiler.profile();
    eprintln!("a FIFO perf map: profile made in {:?}", started.elapsed());
    let map = profile.stats.perf_map.clone().unwrap();
    assert_eq!(map.symbols, 0);
    assert!(
        map.problem.as_deref().is_some_and(|p| p.contains("a FIFO")),
        "{map:?}"
    );
    assert!(jit_leaf(&profile)
        .iter()
        .all(|n| n.starts_with("[unknown]")));
    assert!(profile.stats.unknown_frames.get(&UnknownCause::NoSymbols) >= Some(&1));
}

/// debuginfod (the crate's feature `debuginfod`): a local server's debug file, and the
/// client's bounds.
#[cfg(feature = "debuginfod")]
mod debuginfod {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use otel_ctx_profile::{
        Debuginfod, DebuginfodOptions, Profile, ProfileOptions, Profiler, SymbolSource,
        UnknownCause,
    };

    use super::support::{endless_server, file_server, out_path, replay, silent_server};
    use super::{capture, folded, scene, stacks};

    #[test]
    fn debuginfod_names_the_stripped_library_and_caches_it() {
        let scene = scene();
        let captured = capture(&scene);
        let id = &scene.build.hidden_build_id;
        let debug = std::fs::read(scene.build.debuginfod_dir.join("libhidden.debug")).unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let url = file_server(
            HashMap::from([(format!("/buildid/{id}/debuginfo"), debug)]),
            hits.clone(),
        );
        let cache = out_path("debuginfod-cache");
        let _ = std::fs::remove_dir_all(&cache);
        let client = Debuginfod::new(DebuginfodOptions::new(vec![url.clone()], cache.clone()));

        let mut profiler = Profiler::new(captured.pid, ProfileOptions::default());
        profiler.update_maps(&captured.maps);
        replay(&mut profiler, &captured.samples);
        let before = profiler.profile();
        let hidden_named = |p: &Profile| {
            stacks(p, "hidden").iter().any(|(s, _)| {
                s.first()
                    .is_some_and(|l| l.function_name() == "hidden_hidden_work")
            })
        };
        assert!(!hidden_named(&before), "{}", folded(&before));

        let fetches = profiler.fetch_debug_files(&client, far());
        assert_eq!(
            fetches.len(),
            1,
            "only the stripped library with a build id: {fetches:?}"
        );
        assert!(fetches[0].module.ends_with("/libhidden.so"));
        assert_eq!(&fetches[0].build_id, id);
        assert!(
            matches!(&fetches[0].outcome, Ok(SymbolSource::Debuginfod { url: from, .. }) if *from == url),
            "{fetches:?}"
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        assert!(cache.join(id).join("debuginfo").is_file());

        let after = profiler.profile();
        assert!(hidden_named(&after), "{}", folded(&after));
        let missing = |p: &Profile| {
            p.stats
                .unknown_frames
                .get(&UnknownCause::MissingDebugFile)
                .copied()
        };
        assert!(
            missing(&after) < missing(&before),
            "{:?}",
            after.stats.unknown_frames
        );
        assert!(!after
            .stats
            .symbol_problems
            .iter()
            .any(|p| p.subject.ends_with("/libhidden.so")));

        // Another profiler and client with the same cache: the file is taken from it.
        let again = Debuginfod::new(DebuginfodOptions::new(vec![url], cache.clone()));
        let mut second = Profiler::new(captured.pid, ProfileOptions::default());
        second.update_maps(&captured.maps);
        replay(&mut second, &captured.samples);
        let fetches = second.fetch_debug_files(&again, far());
        assert!(
            matches!(&fetches[0].outcome, Ok(SymbolSource::Debuginfod { url, .. }) if url == "cache"),
            "{fetches:?}"
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1, "asked the server again");

        // A build id the server has not: both artifacts asked once, then remembered.
        let unknown = [0xab; 20];
        let error = again.fetch(&unknown, far()).unwrap_err();
        assert!(error.contains("not found"), "{error}");
        assert_eq!(hits.load(Ordering::Relaxed), 3);
        let error = again.fetch(&unknown, far()).unwrap_err();
        assert!(error.contains("remembered miss"), "{error}");
        assert_eq!(
            hits.load(Ordering::Relaxed),
            3,
            "asked again for a remembered miss"
        );
    }

    #[test]
    fn debuginfod_client_bounded_against_hostile_servers() {
        let cache = out_path("debuginfod-hostile");
        let _ = std::fs::remove_dir_all(&cache);

        // A server that accepts and stays silent: the timeout, once per client.
        let silent_hits = Arc::new(AtomicU64::new(0));
        let silent = silent_server(silent_hits.clone());
        let client = Debuginfod::new(
            DebuginfodOptions::new(vec![silent], cache.clone())
                .with_timeout(Duration::from_secs(1)),
        );
        let started = Instant::now();
        let error = client.fetch(&[1; 20], far()).unwrap_err();
        eprintln!("a silent debuginfod: given up in {:?}", started.elapsed());
        assert!(error.contains("DEBUGINFOD_TIMEOUT"), "{error}");
        let error = client.fetch(&[2; 20], far()).unwrap_err();
        assert!(error.contains("failed before"), "{error}");
        assert_eq!(silent_hits.load(Ordering::Relaxed), 1);
        // Not a "not found": nothing remembered in the cache.
        assert!(!cache
            .join(otel_ctx_codec::hex::encode(&[1; 20]))
            .join("debuginfo")
            .exists());

        // A body that never ends: stopped at the byte bound, nothing left in the cache.
        let sent = Arc::new(AtomicU64::new(0));
        let endless = endless_server(sent.clone(), None);
        let client = Debuginfod::new(
            DebuginfodOptions::new(vec![endless.clone()], cache.clone()).with_max_bytes(4 << 20),
        );
        let started = Instant::now();
        let error = client.fetch(&[3; 20], far()).unwrap_err();
        eprintln!(
            "an endless debuginfod body: stopped in {:?} after {} MiB sent",
            started.elapsed(),
            sent.load(Ordering::Relaxed) >> 20
        );
        assert!(error.contains("DEBUGINFOD_MAXSIZE"), "{error}");
        let dir = cache.join(otel_ctx_codec::hex::encode(&[3; 20]));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");

        // A body that trickles on: stopped at the time bound.
        let trickle = endless_server(sent, Some(Duration::from_millis(50)));
        let client = Debuginfod::new(
            DebuginfodOptions::new(vec![trickle], cache.clone())
                .with_max_time(Duration::from_secs(1)),
        );
        let error = client.fetch(&[4; 20], far()).unwrap_err();
        assert!(error.contains("DEBUGINFOD_MAXTIME"), "{error}");

        // A silent server and elfutils' 90 s timeout, with a second left for fetching:
        // the fetch ends with the second, and says why.
        let silent = silent_server(Arc::new(AtomicU64::new(0)));
        let client = Debuginfod::new(DebuginfodOptions::new(vec![silent], cache.clone()));
        let started = Instant::now();
        let error = client
            .fetch(&[5; 20], started + Duration::from_secs(1))
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(error.contains("left for fetching"), "{error}");
        // Past its time, nothing is asked.
        let hits = Arc::new(AtomicU64::new(0));
        let client = Debuginfod::new(DebuginfodOptions::new(
            vec![silent_server(hits.clone())],
            cache.clone(),
        ));
        let error = client.fetch(&[6; 20], Instant::now()).unwrap_err();
        assert_eq!(hits.load(Ordering::Relaxed), 0);
        assert!(error.contains("time for fetching ran out"), "{error}");
    }

    /// Far enough away not to bound a fetch.
    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }
}
