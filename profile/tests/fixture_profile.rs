//! Profiles of a running C fixture whose threads spin in known functions, each with its
//! own thread context: the stacks are unwound (by CFI where the code has no frame
//! pointers), symbolized and labeled with the right route, and the outputs are read by
//! independent consumers (`go tool pprof`, an XML parser).
//!
//! Needs root (or CAP_SYS_PTRACE) and gcc.

mod support;

use std::sync::OnceLock;

use otel_ctx_profile::Profile;
use otel_ctx_profile::{FoldedOptions, ProfileOptions, UnwindEnd};
use support::{
    build_routes, folded_text, go, out_path, pprof, profiles, route_accuracy, Capture, Fixture,
};

/// Sampling rounds (every thread once per round).
const ROUNDS: usize = 300;

/// The fixture built `-O2 -fomit-frame-pointer`, sampled once for every test here:
/// the samples, and their profiles by default, with frame pointers alone, and with
/// lines.
struct OmitFp {
    capture: Capture,
    default: Profile,
    fp_only: Profile,
    lines: Profile,
}

fn omit_fp() -> &'static OmitFp {
    static CAPTURE: OnceLock<OmitFp> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let program = build_routes("routes-omit-fp", &["-fomit-frame-pointer"]);
        let fixture = Fixture::start(&program, &[]);
        let options = [
            ProfileOptions::default(),
            ProfileOptions::default().with_cfi(false),
            ProfileOptions::default().with_lines(true),
        ];
        let (capture, mut made) = profiles(fixture, ROUNDS, &options);
        let lines = made.pop().expect("three profiles");
        let fp_only = made.pop().expect("three profiles");
        let default = made.pop().expect("three profiles");
        OmitFp {
            capture,
            default,
            fp_only,
            lines,
        }
    })
}

fn assert_accurate(profile: &otel_ctx_profile::Profile, what: &str) {
    for (route, labeled, right) in route_accuracy(profile) {
        assert!(
            labeled >= (ROUNDS as u64) * 2 / 3,
            "{what}: only {labeled} samples labeled {route}\n{}",
            folded_text(profile)
        );
        assert!(
            right * 10 >= labeled * 9,
            "{what}: {right} of {labeled} samples of {route} have its leaf, middle and top \
             functions innermost\n{}",
            folded_text(profile)
        );
    }
}

#[test]
fn cfi_unwinds_code_without_frame_pointers() {
    let OmitFp {
        capture,
        default: profile,
        fp_only,
        ..
    } = omit_fp();
    assert_accurate(profile, "-fomit-frame-pointer, CFI");
    let stats = &profile.stats;
    assert_eq!(stats.samples, capture.samples.len() as u64);
    assert!(
        stats.with_context >= 3 * (ROUNDS as u64) * 2 / 3,
        "{stats:?}"
    );
    // The main thread waits in read() without a context.
    assert!(
        stats.without_context >= (ROUNDS as u64) * 2 / 3,
        "{stats:?}"
    );
    assert!(stats.skipped_modules.is_empty(), "{stats:?}");
    // Most walks reach the outermost frame (clone3's or _start's CFI ends them).
    let roots = stats
        .unwind_ends
        .get(&UnwindEnd::Root)
        .copied()
        .unwrap_or(0);
    assert!(roots * 10 >= stats.samples * 9, "{stats:?}");

    // The same samples with frame pointers alone do not find the callers: the CFI did.
    let (labeled, right) = route_accuracy(fp_only)
        .iter()
        .fold((0, 0), |(l, r), &(_, labeled, right)| {
            (l + labeled, r + right)
        });
    assert!(
        right * 2 < labeled,
        "frame pointers alone found {right} of {labeled} stacks of code without them"
    );
}

#[test]
fn frame_pointers_unwind_code_with_them() {
    let program = build_routes("routes-fp", &["-fno-omit-frame-pointer"]);
    let fixture = Fixture::start(&program, &[]);
    // Frame pointers alone, and names from the symbol tables alone (no DWARF); and
    // with CFI, as by default.
    let options = [
        ProfileOptions::default()
            .with_cfi(false)
            .with_debug_info(false),
        ProfileOptions::default(),
    ];
    let (_, made) = profiles(fixture, ROUNDS, &options);
    assert_accurate(&made[0], "-fno-omit-frame-pointer, frame pointers only");
    assert!(made[0].mappings.iter().all(|m| !m.debug_info));
    assert_accurate(&made[1], "-fno-omit-frame-pointer, CFI");
}

#[test]
fn debug_frame_unwinds_code_without_unwind_tables() {
    let program = build_routes(
        "routes-debug-frame",
        &[
            "-fomit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let elf = std::fs::read(&program).expect("read the fixture");
    let file = object::File::parse(&*elf).expect("an ELF file");
    use object::{Object, ObjectSection};
    let size = |name: &str| file.section_by_name(name).map_or(0, |s| s.size());
    assert!(
        size(".debug_frame") > size(".eh_frame"),
        "the build put its CFI in .eh_frame ({} bytes), not .debug_frame ({} bytes)",
        size(".eh_frame"),
        size(".debug_frame")
    );
    let fixture = Fixture::start(&program, &[]);
    let (_, made) = profiles(fixture, ROUNDS, &[ProfileOptions::default()]);
    assert_accurate(&made[0], ".debug_frame");
}

#[test]
fn lines_and_resource() {
    let profile = &omit_fp().lines;
    assert_eq!(profile.service_name.as_deref(), Some("profile-fixture"));
    assert!(profile
        .resource
        .iter()
        .any(|(k, v)| k == "service.version" && v == "1.0.0"));
    let leaf = profile
        .locations
        .iter()
        .find(|l| l.leaf_name() == "cart_leaf")
        .expect("a cart_leaf frame");
    let symbol = &leaf.symbols[0];
    assert!(
        symbol
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("routes.c"))
            && symbol.line.is_some(),
        "{symbol:?}"
    );
    let mapping = &profile.mappings[leaf.mapping.expect("in a mapping")];
    assert!(mapping.path.ends_with("routes-omit-fp"), "{mapping:?}");
    assert!(mapping.build_id.as_ref().is_some_and(|id| id.len() >= 16));
    assert!(mapping.debug_info);
}

#[test]
fn folded_roots_are_routes() {
    let profile = &omit_fp().default;
    let lines = profile.folded(&FoldedOptions::default());
    for (route, prefix) in support::ROUTES {
        let hot: u64 = lines
            .iter()
            .filter(|(line, _)| {
                line.starts_with(&format!("{route};"))
                    && line.ends_with(&format!("{prefix}_top;{prefix}_mid;{prefix}_leaf"))
            })
            .map(|(_, n)| n)
            .sum();
        assert!(
            hot >= (ROUNDS as u64) / 2,
            "{hot} samples of {route} in its hot stack:\n{}",
            folded_text(profile)
        );
    }
    assert!(lines.keys().any(|l| l.starts_with("(no context);")));
    // By another label, and without a root frame.
    let by_thread = profile.folded(&FoldedOptions::default().with_by(Some("thread.name")));
    assert!(by_thread.keys().any(|l| l.starts_with("w-cart;")));
    let bare = profile.folded(&FoldedOptions::default().with_by(None::<String>));
    assert!(bare.keys().all(|l| !l.starts_with('/')));
}

#[test]
fn go_tool_pprof_reads_the_profile() {
    let Some(_) = go() else {
        eprintln!(
            "skipped: `go` is not installed (apt-get install golang-go); CI installs it to \
             check the pprof output with go tool pprof"
        );
        return;
    };
    let profile = &omit_fp().default;
    let path = out_path("routes.pb.gz");
    profile
        .write_pprof(std::fs::File::create(&path).expect("create the pprof file"))
        .expect("write pprof");

    for (route, prefix) in support::ROUTES {
        let top = pprof(&["-top", &format!("-tagfocus=http.route={route}")], &path);
        // The table's first row after its header is the hottest function.
        let first = top
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .unwrap_or_else(|| panic!("no rows in:\n{top}"));
        assert_eq!(
            first.split_whitespace().last(),
            Some(format!("{prefix}_leaf").as_str()),
            "go tool pprof -top -tagfocus=http.route={route}:\n{top}"
        );
        for (_, other) in support::ROUTES.iter().filter(|(_, p)| *p != prefix) {
            assert!(
                !top.contains(&format!("{other}_leaf")),
                "-tagfocus=http.route={route} shows {other}_leaf:\n{top}"
            );
        }
    }

    let tags = pprof(&["-tags"], &path);
    for needle in [
        "http.route",
        "/cart",
        "/checkout",
        "/search",
        "trace_id",
        "11111111111111111111111111111111",
        "22222222222222222222222222222222",
        "33333333333333333333333333333333",
        "span_id",
        "a0a0a0a0a0a0a0a0",
        "thread.name",
        "w-cart",
        "service.name",
        "profile-fixture",
    ] {
        assert!(
            tags.contains(needle),
            "no {needle} in go tool pprof -tags:\n{tags}"
        );
    }
    let raw = pprof(&["-raw"], &path);
    assert!(
        raw.contains("service.name=profile-fixture"),
        "no resource comment in go tool pprof -raw:\n{raw}"
    );
}

#[test]
fn svg_is_xml_with_the_hot_functions_under_their_routes() {
    let profile = &omit_fp().default;
    let mut svg = Vec::new();
    profile
        .write_svg(&FoldedOptions::default(), &mut svg)
        .expect("write the SVG");
    let text = String::from_utf8(svg).expect("UTF-8");
    std::fs::write(out_path("routes.svg"), &text).expect("keep the SVG");
    // inferno's SVG starts with a DOCTYPE (no entities).
    let parsing = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(&text, parsing).expect("well-formed XML");
    assert!(
        text.contains("profile-fixture"),
        "no service name in the title"
    );

    // Each frame is a <g> with a <title> "name (n samples, p%)" and a <rect> whose
    // fg:x and fg:w attributes are its first sample and its width in samples.
    const FG: &str = "http://github.com/jonhoo/inferno";
    struct Frame {
        name: String,
        x: u64,
        w: u64,
        y: f64,
    }
    let frames: Vec<Frame> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter_map(|g| {
            let title = g.children().find(|c| c.has_tag_name("title"))?.text()?;
            let rect = g.children().find(|c| c.has_tag_name("rect"))?;
            let name = title.rsplit_once(" (").map_or(title, |(n, _)| n).to_owned();
            Some(Frame {
                name,
                x: rect.attribute((FG, "x"))?.parse().ok()?,
                w: rect.attribute((FG, "w"))?.parse().ok()?,
                y: rect.attribute("y")?.parse().ok()?,
            })
        })
        .collect();
    assert!(!frames.is_empty(), "no frames found in the SVG");
    for (route, prefix) in support::ROUTES {
        let root = frames
            .iter()
            .find(|f| f.name == route)
            .unwrap_or_else(|| panic!("no {route} frame"));
        let leaf: u64 = frames
            .iter()
            .filter(|f| f.name == format!("{prefix}_leaf"))
            .filter(|f| f.x >= root.x && f.x + f.w <= root.x + root.w && f.y < root.y)
            .map(|f| f.w)
            .sum();
        assert!(
            leaf * 10 >= root.w * 8,
            "{prefix}_leaf covers {leaf} of the {} samples under {route}",
            root.w
        );
    }
}

#[test]
fn inlined_frames_from_dwarf() {
    let program = build_routes("routes-inline", &["-fomit-frame-pointer", "-DINLINE_STEP"]);
    let fixture = Fixture::start(&program, &[]);
    let captured = support::capture(fixture.pid, ROUNDS);
    let (profile, _) = support::profile_of(&captured, ProfileOptions::default().with_lines(true));
    let profile = &profile;
    // Sampled: every stack still has the route's function innermost, whichever
    // instruction of its loop the interrupt landed on (which differs between CPUs).
    let mut leaf_addresses = Vec::new();
    for entry in &profile.entries {
        if profile.label_sets[entry.labels].get("http.route") != Some("/cart") {
            continue;
        }
        let leaf = &profile.locations[profile.stacks[entry.stack.expect("no overflow")][0]];
        assert_eq!(leaf.function_name(), "cart_leaf", "{leaf:?}");
        assert!(leaf.symbols.iter().all(|s| s.line.is_some()), "{leaf:?}");
        leaf_addresses.push(leaf.address);
    }
    assert!(!leaf_addresses.is_empty(), "{}", folded_text(profile));
    // By construction: every byte of the code around a sampled address is symbolized
    // as the profile would name it, and the loop's inlined step is found among them,
    // named with its caller and both lines, wherever the samples happened to land.
    let mut profiler =
        otel_ctx_profile::Profiler::new(captured.pid, ProfileOptions::default().with_lines(true));
    profiler.update_maps(&captured.maps);
    let sampled = leaf_addresses[0];
    let (mut in_leaf, mut inlined) = (0, 0);
    for address in sampled.saturating_sub(512)..sampled + 512 {
        let symbols = profiler.symbolize(otel_ctx_profile::Frame {
            address,
            return_address: false,
        });
        if symbols.last().map(|s| s.name.as_str()) != Some("cart_leaf") {
            continue;
        }
        in_leaf += 1;
        if symbols.len() == 2 {
            assert_eq!(symbols[0].name, "route_step", "{symbols:?}");
            assert!(
                symbols.iter().all(|s| s.line.is_some()
                    && s.file.as_deref().is_some_and(|f| f.ends_with("routes.c"))),
                "{symbols:?}"
            );
            inlined += 1;
        }
    }
    assert!(
        inlined > 0 && inlined < in_leaf,
        "{inlined} of cart_leaf's {in_leaf} bytes in the inlined step"
    );
    fixture.finish();
}

#[test]
fn maps_read_again_on_evidence() {
    let program = build_routes("routes-refresh", &["-fomit-frame-pointer"]);
    let plugin = support::build_plugin("libspin-refresh.so");
    let fixture = Fixture::start(&program, &[&plugin]);
    let captured = support::capture(fixture.pid, 50);
    // A profiler that read the maps before the plugin was loaded.
    let mut early = captured.maps.clone();
    early
        .files
        .retain(|f| !f.path.ends_with("libspin-refresh.so"));
    let mut profiler = otel_ctx_profile::Profiler::new(fixture.pid, ProfileOptions::default());
    profiler.update_maps(&early);
    let plugin_samples: Vec<_> = captured
        .samples
        .iter()
        .filter(|s| s.thread_name == "w-plugin")
        .cloned()
        .collect();
    assert!(!plugin_samples.is_empty());
    support::replay(&mut profiler, &plugin_samples);
    let outside = profiler.stats().outside_modules;
    assert_eq!(
        outside,
        plugin_samples.len() as u64,
        "the evidence: ip in no module"
    );
    // The caller reads the maps again, and the plugin's frames get names.
    profiler.update_maps(&captured.maps);
    support::replay(&mut profiler, &plugin_samples);
    fixture.finish();
    let profile = profiler.profile();
    assert_eq!(profile.stats.outside_modules, outside, "no new evidence");
    let named: u64 = profile
        .entries
        .iter()
        .filter(|e| {
            let stack = &profile.stacks[e.stack.expect("no overflow")];
            profile.locations[stack[0]].function_name() == "plugin_leaf"
        })
        .map(|e| e.samples)
        .sum();
    assert!(
        named * 10 >= plugin_samples.len() as u64 * 9,
        "{named} of {} named after the refresh\n{}",
        plugin_samples.len(),
        folded_text(&profile)
    );
}

#[test]
fn plt_stubs_named_never_the_symbol_before() {
    use object::{Object, ObjectSection, ObjectSymbol};

    let program = support::build_plt("plt-rand", &[]);
    let fixture = Fixture::start(&program, &[]);
    let captured = support::capture_stacks(fixture.pid, ROUNDS);
    let (profile, _) = support::profile_of(&captured, ProfileOptions::default());
    // No frame of any sample is named _init, the symbol before the PLT; the thread
    // spends its time in rand_r, its stub and its caller, whichever instruction the
    // interrupts land on.
    let mut leaves = std::collections::BTreeMap::<&str, u64>::new();
    for entry in &profile.entries {
        let stack = &profile.stacks[entry.stack.expect("no overflow")];
        for &at in stack {
            let location = &profile.locations[at];
            assert!(
                location.symbols.iter().all(|s| s.name != "_init"),
                "{location:?}\n{}",
                folded_text(&profile)
            );
        }
        if profile.label_sets[entry.labels].get("thread.name") == Some("w-rand") {
            *leaves
                .entry(profile.locations[stack[0]].function_name())
                .or_default() += entry.samples;
        }
    }
    println!("w-rand's leaves: {leaves:?}");
    let in_rand_r =
        leaves.get("rand_r@plt").copied().unwrap_or(0) + leaves.get("rand_r").copied().unwrap_or(0);
    assert!(in_rand_r > 0, "{leaves:?}\n{}", folded_text(&profile));
    // By construction: every address of the running program's PLT sections is
    // symbolized as a stub (NAME@plt) or [plt], and its call goes through rand_r@plt.
    let bytes = std::fs::read(&program).expect("read the fixture");
    let elf = object::File::parse(&bytes[..]).expect("an ELF file");
    let file = captured
        .maps
        .files
        .iter()
        .find(|f| std::path::Path::new(&f.path) == program)
        .expect("the program is mapped");
    // gcc's PIE text segment is at the same offset and address in the file.
    let text = file
        .ranges
        .iter()
        .find(|r| r.is_executable())
        .expect("its code");
    let bias = text.start - text.offset;
    let mut profiler = otel_ctx_profile::Profiler::new(captured.pid, ProfileOptions::default());
    profiler.update_maps(&captured.maps);
    let name = |svma: u64| {
        let symbols = profiler.symbolize(otel_ctx_profile::Frame {
            address: bias + svma,
            return_address: false,
        });
        symbols.last().map(|s| s.name.clone()).unwrap_or_default()
    };
    let main = elf
        .symbols()
        .find(|s| s.name() == Ok("main"))
        .expect("main");
    assert_eq!(name(main.address()), "main", "the bias is right");
    let mut stubs = std::collections::BTreeMap::<String, u64>::new();
    for section in [".plt", ".plt.sec", ".plt.got"] {
        let Some(section) = elf.section_by_name(section) else {
            continue;
        };
        for svma in section.address()..section.address() + section.size() {
            let name = name(svma);
            assert!(
                name.ends_with("@plt") || name == "[plt]",
                "{svma:#x} named {name:?}"
            );
            *stubs.entry(name).or_default() += 1;
        }
    }
    println!("bytes of the PLT by name: {stubs:?}");
    assert_eq!(stubs.get("rand_r@plt"), Some(&16), "{stubs:?}");
    fixture.finish();
}
