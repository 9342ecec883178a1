//! The directives for targets other than the host's, from fake build environments.

use std::path::{Path, PathBuf};

use super::{BuildEnv, Export, RustLld, TLS_SYMBOL, VERSION_SCRIPT};

const GCC_LD: &str = "/toolchain/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld";
const OUT_DIR: &str = "/target/debug/build/app-0123/out";

const EXPORT: &str = "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1";
const RERUN: [&str; 2] = [
    "cargo:rerun-if-env-changed=RUSTC",
    "cargo:rerun-if-changed=Cargo.toml",
];

/// The environment cargo gives a build script for `triple`, with the `target_os`,
/// `target_env` and `target_feature` values of `rustc --print cfg --target <triple>`, and a
/// toolchain that ships `rust-lld`.
fn target(triple: &str) -> BuildEnv {
    let (os, env, features) = match triple {
        "x86_64-apple-darwin" => ("macos", "", "cmpxchg16b,fxsr,sse,sse2,sse3,sse4.1,ssse3"),
        "x86_64-pc-windows-msvc" => ("windows", "msvc", "cmpxchg16b,fxsr,sse,sse2,sse3"),
        "x86_64-unknown-linux-gnu" => ("linux", "gnu", "fxsr,sse,sse2"),
        "aarch64-unknown-linux-gnu" => ("linux", "gnu", "neon"),
        "x86_64-unknown-linux-musl" => ("linux", "musl", "crt-static,fxsr,sse,sse2"),
        "aarch64-unknown-linux-musl" => ("linux", "musl", "crt-static,neon"),
        _ => panic!("no cfg values for {triple} in this test"),
    };
    BuildEnv {
        target_os: String::from(os),
        target_env: String::from(env),
        target_features: String::from(features),
        rust_lld: RustLld::Found(PathBuf::from(GCC_LD)),
        out_dir: Some(PathBuf::from(OUT_DIR)),
        ..BuildEnv::default()
    }
}

fn lines(export: &Export, env: &BuildEnv) -> Vec<String> {
    export.directives(env).lines
}

fn lld(kind: &str) -> [String; 2] {
    [
        format!("cargo:{kind}=-B{GCC_LD}"),
        format!("cargo:{kind}=-fuse-ld=lld"),
    ]
}

fn version_script_arg() -> String {
    format!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={OUT_DIR}/otel_thread_ctx_v1.ver")
}

#[test]
fn the_symbol_is_the_codecs() {
    assert_eq!(TLS_SYMBOL, otel_ctx_codec::threadlocal::TLS_SYMBOL);
    assert_eq!(
        VERSION_SCRIPT,
        format!("{{\n  global:\n    {TLS_SYMBOL};\n}};\n")
    );
}

#[test]
fn other_systems_get_nothing() {
    for triple in ["x86_64-apple-darwin", "x86_64-pc-windows-msvc"] {
        let mut env = target(triple);
        env.declares_cdylib = true;
        env.rust_lld = RustLld::Missing(PathBuf::from(GCC_LD));
        let directives = Export::new().directives(&env);
        assert!(directives.lines.is_empty(), "{triple}: {directives:?}");
        assert_eq!(directives.version_script, None, "{triple}");
    }
    assert!(lines(&Export::new(), &BuildEnv::default()).is_empty());
}

#[test]
fn dynamic_executables_get_the_export_only() {
    for triple in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let directives = Export::new().directives(&target(triple));
        assert_eq!(directives.lines, [EXPORT, RERUN[0], RERUN[1]], "{triple}");
        assert_eq!(directives.version_script, None, "{triple}");
    }
}

#[test]
fn static_executables_link_with_rust_lld() {
    let expected = [
        String::from(EXPORT),
        lld("rustc-link-arg")[0].clone(),
        lld("rustc-link-arg")[1].clone(),
        String::from(RERUN[0]),
        String::from(RERUN[1]),
    ];
    for triple in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        assert_eq!(lines(&Export::new(), &target(triple)), expected, "{triple}");
        // Musl without `crt-static` among the features is still static by default.
        let mut env = target(triple);
        env.target_features = env.target_features.replace("crt-static,", "");
        assert_eq!(lines(&Export::new(), &env), expected, "{triple}");
    }
    let mut glibc_static = target("aarch64-unknown-linux-gnu");
    glibc_static.target_features = String::from("crt-static,neon");
    assert_eq!(lines(&Export::new(), &glibc_static), expected);
}

#[test]
fn musl_with_minus_crt_static_is_dynamic() {
    let mut env = target("aarch64-unknown-linux-musl");
    env.target_features = String::from("neon");
    env.encoded_rustflags = String::from("-C\u{1f}target-feature=-crt-static");
    assert_eq!(lines(&Export::new(), &env), [EXPORT, RERUN[0], RERUN[1]]);
}

#[test]
fn a_cdylib_gets_a_version_script_and_rust_lld() {
    let mut env = target("aarch64-unknown-linux-gnu");
    env.declares_cdylib = true;
    let directives = Export::new().directives(&env);
    let [lld_b, lld_fuse] = lld("rustc-cdylib-link-arg");
    assert_eq!(
        directives.lines,
        [
            String::from(EXPORT),
            version_script_arg(),
            lld_b,
            lld_fuse,
            String::from(RERUN[0]),
            String::from(RERUN[1]),
        ]
    );
    assert_eq!(
        directives.version_script.as_deref(),
        Some(Path::new(OUT_DIR).join("otel_thread_ctx_v1.ver").as_path())
    );
}

#[test]
fn a_static_cdylib_package_gets_both() {
    let mut env = target("x86_64-unknown-linux-musl");
    env.declares_cdylib = true;
    let [exe_b, exe_fuse] = lld("rustc-link-arg");
    let [lib_b, lib_fuse] = lld("rustc-cdylib-link-arg");
    assert_eq!(
        lines(&Export::new(), &env),
        [
            String::from(EXPORT),
            exe_b,
            exe_fuse,
            version_script_arg(),
            lib_b,
            lib_fuse,
            String::from(RERUN[0]),
            String::from(RERUN[1]),
        ]
    );
}

#[test]
fn the_builder_overrides_the_defaults() {
    let mut env = target("x86_64-unknown-linux-musl");
    env.declares_cdylib = true;

    // The manifest's `cdylib` is ignored when the caller says no, and the reverse.
    let no_cdylib = Export::new().cdylib(false).directives(&env);
    assert_eq!(no_cdylib.version_script, None);
    assert!(!no_cdylib.lines.contains(&version_script_arg()));
    let mut no_manifest_cdylib = env.clone();
    no_manifest_cdylib.declares_cdylib = false;
    let forced = Export::new().cdylib(true).directives(&no_manifest_cdylib);
    assert!(forced.lines.contains(&version_script_arg()));

    // No executables: only the cdylib's lines.
    let [lib_b, lib_fuse] = lld("rustc-cdylib-link-arg");
    assert_eq!(
        lines(&Export::new().executables(false), &env),
        [
            version_script_arg(),
            lib_b,
            lib_fuse,
            String::from(RERUN[0]),
            String::from(RERUN[1]),
        ]
    );

    // No bundled lld: no -B / -fuse-ld anywhere, even when the toolchain has it.
    assert_eq!(
        lines(&Export::new().bundled_lld(false), &env),
        [
            String::from(EXPORT),
            version_script_arg(),
            String::from(RERUN[0]),
            String::from(RERUN[1]),
        ]
    );
}

#[test]
fn a_toolchain_without_rust_lld_is_a_warning() {
    let mut env = target("aarch64-unknown-linux-musl");
    env.rust_lld = RustLld::Missing(PathBuf::from(GCC_LD));
    let lines = lines(&Export::new(), &env);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!(
            "cargo:warning=otel-ctx-export: no rust-lld in {GCC_LD};"
        )),
        "{lines:?}"
    );
    assert_eq!(lines[1..], [EXPORT, RERUN[0], RERUN[1]]);

    // Not asked for it: no warning. Not found out: no warning either.
    assert_eq!(
        self::lines(&Export::new().bundled_lld(false), &env),
        [EXPORT, RERUN[0], RERUN[1]]
    );
    env.rust_lld = RustLld::Unknown;
    assert_eq!(
        self::lines(&Export::new(), &env),
        [EXPORT, RERUN[0], RERUN[1]]
    );
}

#[test]
#[should_panic(expected = "OUT_DIR is set")]
fn a_cdylib_needs_out_dir() {
    let mut env = target("x86_64-unknown-linux-gnu");
    env.declares_cdylib = true;
    env.out_dir = None;
    Export::new().directives(&env);
}
