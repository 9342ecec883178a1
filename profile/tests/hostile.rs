//! Hostile input: garbage registers and stacks, a stripped binary, a binary whose
//! `.eh_frame` is garbage, a module unmapped (and deleted) before the profile reads it,
//! a process gone before its modules are read. The profile completes, frames nothing
//! names print as `[unknown] ...`, nothing panics, and no sample takes long.
//!
//! Needs root (or CAP_SYS_PTRACE), gcc and strip.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use object::{Object, ObjectSection, ObjectSymbol};
use otel_ctx_profile::{Arch, Profile, ProfileOptions, Profiler, UnwindEnd};
use otel_ctx_reader::UserRegisters;
use otel_ctx_sampler::Sample;
use support::{
    build_plugin, build_routes, capture, folded_text, garbage, out_path, profile_of, profiles,
    replay, route_accuracy, thread_cpu_time, Fixture, ROUTES,
};

const ROUNDS: usize = 200;

/// Longest a sample may take, in CPU time, however hostile (a walk takes a few
/// microseconds in a release build; this leaves room for a debug build).
const SLOWEST: Duration = Duration::from_millis(50);

/// The file offset of symbol `name` in the ELF file at `path`, and its size.
fn file_range_of(path: &Path, name: &str) -> std::ops::Range<u64> {
    let bytes = std::fs::read(path).expect("read the binary");
    let elf = object::File::parse(&*bytes).expect("an ELF file");
    let symbol = elf
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    let section = elf
        .section_by_index(symbol.section_index().expect("in a section"))
        .expect("its section");
    let (offset, _) = section.file_range().expect("in the file");
    let start = offset + (symbol.address() - section.address());
    start..start + symbol.size()
}

/// The file offset an `[unknown] <basename>+0x<offset>` frame names.
fn unknown_offset(name: &str, basename: &str) -> Option<u64> {
    let hex = name.strip_prefix(&format!("[unknown] {basename}+0x"))?;
    u64::from_str_radix(hex, 16).ok()
}

#[test]
fn garbage_registers_and_stacks() {
    let program = build_routes("routes-garbage", &["-fomit-frame-pointer"]);
    let fixture = Fixture::start(&program, &[]);
    let captured = capture(fixture.pid, 5);
    let mut profiler = Profiler::new(fixture.pid, ProfileOptions::default());
    profiler.update_maps(&captured.maps);
    // The aarch64 unwinder on the same garbage (its modules are x86_64 ones, left out
    // with that reason, so it walks frame pointers alone).
    let other = match Arch::NATIVE {
        Arch::X86_64 => Arch::Aarch64,
        Arch::Aarch64 => Arch::X86_64,
    };
    let mut foreign = Profiler::new(fixture.pid, ProfileOptions::default().with_arch(other));
    foreign.update_maps(&captured.maps);
    // The caller's own depth limit.
    let mut shallow = Profiler::new(captured.pid, ProfileOptions::default().with_max_depth(16));
    shallow.update_maps(&captured.maps);
    fixture.finish();
    assert!(foreign
        .stats()
        .skipped_modules
        .iter()
        .all(|m| m.reason.starts_with("built for")));

    let mut next = garbage(0x9e37_79b9_7f4a_7c15);
    // Real code addresses too, so that CFI runs on the garbage.
    let leaf = captured
        .samples
        .iter()
        .find(|s| s.context.is_some())
        .expect("a sample with a context")
        .registers
        .ip;
    // The walk's time is what a hostile stack could stretch: the slowest one is
    // measured. Counting adds the aggregate's amortized growth: its mean is measured.
    let mut slowest = Duration::ZERO;
    let mut counting = Duration::ZERO;
    let mut frames = Vec::new();
    for i in 0..20_000u64 {
        let len = [0, 7, 64, 4096, 16 * 1024][(i % 5) as usize];
        let stack: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let near = |r: u64| leaf.wrapping_add(r % 4096).wrapping_sub(2048);
        let registers = UserRegisters {
            ip: if i % 2 == 0 { next() } else { near(next()) },
            sp: if i % 3 == 0 {
                next()
            } else {
                0x7ffd_0000_0000 + (next() % 4096)
            },
            fp: next(),
            lr: next(),
        };
        let started = thread_cpu_time();
        profiler.unwind(&registers, &stack, &mut frames);
        slowest = slowest.max(thread_cpu_time() - started);
        let sample = Sample::new(0, 1, "garbage", Some(registers), &stack);
        let started = thread_cpu_time();
        let outcome = profiler.add(&sample);
        counting += thread_cpu_time() - started;
        assert!(outcome.frames >= 1 && outcome.frames <= 256);
        assert_eq!(outcome.frames, frames.len());
        let outcome = foreign.add(&sample);
        assert!(outcome.frames >= 1 && outcome.frames <= 256);
    }
    assert_eq!(foreign.profile().stats.samples, 20_000);
    assert!(slowest < SLOWEST, "a garbage walk took {slowest:?}");
    let mean = counting / 20_000;
    assert!(
        mean < Duration::from_millis(1),
        "a garbage sample took {mean:?} on average"
    );

    // A stack of return addresses into a function whose CFI pops 8 bytes a frame: the
    // walk would go on for 2,048 frames, and stops at 256.
    let word = leaf.to_le_bytes();
    let stack: Vec<u8> = word.iter().copied().cycle().take(16 * 1024).collect();
    let registers = UserRegisters {
        ip: leaf,
        sp: 0x7ffd_0000_0000,
        fp: 0,
        lr: 0,
    };
    let outcome = profiler.add(&Sample::new(0, 1, "deep", Some(registers), &stack));
    assert_eq!(
        (outcome.end, outcome.frames),
        (Some(UnwindEnd::DepthLimit), 256)
    );
    // The same stack, with a limit of the caller's.
    let outcome = shallow.add(&Sample::new(0, 1, "deep", Some(registers), &stack));
    assert_eq!(
        (outcome.end, outcome.frames),
        (Some(UnwindEnd::DepthLimit), 16)
    );
    // A frame pointer that points at itself ends at once.
    let mut looped = vec![0u8; 64];
    looped[..8].copy_from_slice(&0x7ffd_0000_0000u64.to_le_bytes());
    looped[8..16].copy_from_slice(&0x1234u64.to_le_bytes());
    let registers = UserRegisters {
        ip: 0x10,
        sp: 0x7ffd_0000_0000,
        fp: 0x7ffd_0000_0000,
        lr: 0,
    };
    let outcome = profiler.add(&Sample::new(0, 1, "loop", Some(registers), &looped));
    assert!(
        outcome.end.is_some_and(UnwindEnd::is_failure) && outcome.frames <= 3,
        "{outcome:?}"
    );

    let profile = profiler.profile();
    let stats = &profile.stats;
    assert_eq!(stats.samples, 20_002);
    assert_eq!(stats.without_context, 20_002);
    assert!(stats.unwind_failures() > 0);
    assert!(stats.outside_modules > 0);
    assert!(stats.unwind_ends.contains_key(&UnwindEnd::NoStack));
    // Addresses in no module are named by their address.
    assert!(profile
        .locations
        .iter()
        .any(|l| l.symbols.is_empty() && l.unknown.starts_with("[unknown] 0x")));
    // And the writers take it all.
    profile.write_pprof(std::io::sink()).expect("pprof");
    profile
        .write_svg(&Default::default(), std::io::sink())
        .expect("svg");
}

/// For each route, the samples labeled with it whose three innermost frames are
/// `[unknown] <basename>+0x...` at offsets inside its leaf, middle and top functions
/// (as the unstripped build's symbol table places them).
fn unknown_accuracy(profile: &Profile, basename: &str, unstripped: &Path) -> Vec<(u64, u64)> {
    ROUTES
        .iter()
        .map(|&(route, prefix)| {
            let ranges =
                ["leaf", "mid", "top"].map(|f| file_range_of(unstripped, &format!("{prefix}_{f}")));
            let (mut labeled, mut right) = (0, 0);
            for entry in &profile.entries {
                if profile.label_sets[entry.labels].get("http.route") != Some(route) {
                    continue;
                }
                labeled += entry.samples;
                let stack = &profile.stacks[entry.stack.expect("no overflow")];
                let inside = stack.len() >= 3
                    && ranges.iter().zip(stack).all(|(range, &at)| {
                        let location = &profile.locations[at];
                        // Return addresses: the call is the byte before.
                        let back = u64::from(at != stack[0]);
                        location.symbols.is_empty()
                            && unknown_offset(&location.unknown, basename)
                                .is_some_and(|off| range.contains(&(off - back)))
                    });
                if inside {
                    right += entry.samples;
                }
            }
            (labeled, right)
        })
        .collect()
}

#[test]
fn stripped_binary() {
    let unstripped = build_routes("routes-unstripped", &["-fomit-frame-pointer"]);
    let stripped = out_path("routes-stripped");
    std::fs::copy(&unstripped, &stripped).expect("copy the binary");
    let status = Command::new("strip")
        .arg(&stripped)
        .status()
        .unwrap_or_else(|e| panic!("run strip: {e} (install binutils)"));
    assert!(status.success());
    let fixture = Fixture::start(&stripped, &[]);
    let (_, made) = profiles(fixture, ROUNDS, &[ProfileOptions::default()]);
    let profile = &made[0];
    let basename = stripped.file_name().unwrap().to_str().unwrap();
    for (labeled, right) in unknown_accuracy(profile, basename, &unstripped) {
        assert!(labeled > 0);
        // The names are gone, the CFI (.eh_frame survives strip) still finds the callers.
        assert!(
            right * 10 >= labeled * 9,
            "{right} of {labeled}\n{}",
            folded_text(profile)
        );
    }
    let mapping = profile
        .mappings
        .iter()
        .find(|m| m.path.ends_with("routes-stripped"))
        .expect("the stripped binary's mapping");
    assert!(mapping.symbolized && !mapping.debug_info, "{mapping:?}");
}

/// `path` with its `.eh_frame` bytes overwritten by garbage, as `name`.
fn corrupt_eh_frame(path: &Path, name: &str) -> std::path::PathBuf {
    let mut bytes = std::fs::read(path).expect("read the binary");
    let (offset, size) = {
        let elf = object::File::parse(&*bytes).expect("an ELF file");
        elf.section_by_name(".eh_frame")
            .and_then(|s| s.file_range())
            .expect("an .eh_frame")
    };
    let mut next = garbage(0x2545_f491_4f6c_dd1d);
    for b in &mut bytes[offset as usize..(offset + size) as usize] {
        *b = next() as u8;
    }
    let out = out_path(name);
    std::fs::write(&out, &bytes).expect("write the corrupt copy");
    let mut perms = std::fs::metadata(&out).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&out, perms).expect("chmod");
    out
}

#[test]
fn corrupt_eh_frame_ends_walks_and_keeps_names() {
    let good = build_routes("routes-for-corruption", &["-fomit-frame-pointer"]);
    let corrupt = corrupt_eh_frame(&good, "routes-corrupt-eh-frame");
    let fixture = Fixture::start(&corrupt, &[]);
    let captured = capture(fixture.pid, ROUNDS);
    let (profile, slowest) = profile_of(&captured, ProfileOptions::default());
    fixture.finish();
    assert!(slowest < SLOWEST, "a sample took {slowest:?}");
    // The symbol tables are intact: the leaf is named; its callers are not found (the
    // CFI is garbage, and there are no frame pointers to fall back on).
    for (route, labeled, _) in route_accuracy(&profile) {
        let named: u64 = profile
            .entries
            .iter()
            .filter(|e| profile.label_sets[e.labels].get("http.route") == Some(route))
            .filter(|e| {
                let stack = &profile.stacks[e.stack.expect("no overflow")];
                profile.locations[stack[0]].leaf_name().ends_with("_leaf")
            })
            .map(|e| e.samples)
            .sum();
        assert!(
            labeled > 0 && named * 10 >= labeled * 9,
            "{route}: {named} of {labeled}"
        );
    }
    assert!(
        profile.stats.unwind_failures() > 0,
        "{:?}",
        profile.stats.unwind_ends
    );
}

#[test]
fn module_unmapped_and_deleted_before_it_is_read() {
    let program = build_routes("routes-with-plugin", &["-fomit-frame-pointer"]);
    let plugin = build_plugin("libspin-unmapped.so");
    let mut fixture = Fixture::start(&program, &[&plugin]);
    let before = capture(fixture.pid, ROUNDS);
    fixture.command("unload", "unloaded");
    std::fs::remove_file(&plugin).expect("delete the plugin");
    // The maps from before: the plugin is in them, but neither its path nor its
    // map_files entry leads to it any more.
    let (profile, slowest) = profile_of(&before, ProfileOptions::default());
    fixture.finish();
    assert!(slowest < SLOWEST, "a sample took {slowest:?}");
    let skipped = profile
        .stats
        .skipped_modules
        .iter()
        .find(|m| m.path.ends_with("libspin-unmapped.so"))
        .unwrap_or_else(|| panic!("plugin not skipped: {:?}", profile.stats));
    assert!(skipped.reason.contains("not opened"), "{skipped:?}");
    let basename = plugin.file_name().unwrap().to_str().unwrap();
    let plugin_leaf: Vec<&str> = profile
        .entries
        .iter()
        .filter(|e| profile.label_sets[e.labels].get("http.route") == Some("/plugin"))
        .map(|e| {
            let stack = &profile.stacks[e.stack.expect("no overflow")];
            profile.locations[stack[0]].leaf_name()
        })
        .collect();
    assert!(!plugin_leaf.is_empty(), "no /plugin samples");
    assert!(
        plugin_leaf
            .iter()
            .all(|n| n.starts_with(&format!("[unknown] {basename}+0x"))),
        "{plugin_leaf:?}"
    );
    // The other modules were read: the other routes are whole.
    for (route, labeled, right) in route_accuracy(&profile) {
        assert!(right * 10 >= labeled * 9, "{route}: {right} of {labeled}");
    }
}

#[test]
fn process_gone_before_its_modules_are_read() {
    let program = build_routes("routes-gone", &["-fomit-frame-pointer"]);
    let fixture = Fixture::start(&program, &[]);
    let captured = capture(fixture.pid, 50);
    fixture.finish();
    let mut profiler = Profiler::new(captured.pid, ProfileOptions::default());
    profiler.update_maps(&captured.maps);
    let slowest = replay(&mut profiler, &captured.samples);
    assert!(slowest < SLOWEST, "a sample took {slowest:?}");
    let profile = profiler.profile();
    assert_eq!(profile.stats.samples, captured.samples.len() as u64);
    assert_eq!(profile.stats.modules, 0);
    assert!(!profile.stats.skipped_modules.is_empty());
    for location in &profile.locations {
        assert!(location.symbols.is_empty());
        assert!(location.unknown.starts_with("[unknown] "), "{location:?}");
    }
    let mut out = Vec::new();
    profile.write_pprof(&mut out).expect("pprof");
    assert!(!out.is_empty());
}

#[test]
fn modules_over_budget_are_skipped_and_named_by_offset() {
    let program = build_routes("routes-over-budget", &["-fomit-frame-pointer"]);
    let fixture = Fixture::start(&program, &[]);
    // 4 KiB: not even the fixture's section headers and symbol tables fit.
    let budget = otel_ctx_reader::files::FileBudget::default().with_max_bytes(4096);
    let (_, made) = profiles(
        fixture,
        50,
        &[ProfileOptions::default().with_module_budget(budget)],
    );
    let profile = &made[0];
    let basename = program.file_name().unwrap().to_str().unwrap();
    let skipped = profile
        .stats
        .skipped_modules
        .iter()
        .find(|m| m.path.ends_with(basename))
        .unwrap_or_else(|| panic!("not skipped: {:?}", profile.stats));
    assert!(skipped.reason.starts_with("skipped: "), "{skipped:?}");
    let leaf = file_range_of(&program, "cart_leaf");
    let mut cart = 0;
    for entry in &profile.entries {
        if profile.label_sets[entry.labels].get("http.route") != Some("/cart") {
            continue;
        }
        let location = &profile.locations[profile.stacks[entry.stack.unwrap()][0]];
        let offset =
            unknown_offset(&location.unknown, basename).unwrap_or_else(|| panic!("{location:?}"));
        assert!(
            location.symbols.is_empty() && leaf.contains(&offset),
            "{location:?}"
        );
        cart += entry.samples;
    }
    assert!(cart > 0);
}
