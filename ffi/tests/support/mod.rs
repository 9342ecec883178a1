//! What the tests share: the libraries and the `otel-ctx` tool, built through cargo.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// What cargo built: the shared library, the static library, and `otel-ctx`.
pub struct Built {
    /// `libotel_ctx_ffi.so`.
    pub shared: PathBuf,
    /// `libotel_ctx_ffi.a`.
    pub archive: PathBuf,
    /// The `otel-ctx` tool.
    pub otel_ctx: PathBuf,
}

/// Builds this package's libraries and the `otel-ctx` tool once, through cargo.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "-p", "otel-ctx-ffi", "-p", "otel-ctx"])
            .args(["--quiet", "--message-format=json"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo");
        assert!(out.status.success(), "cargo build failed");
        let mut files = Vec::new();
        let mut otel_ctx = None;
        for msg in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        {
            if msg["target"]["name"] == "otel-ctx" {
                if let Some(exe) = msg["executable"].as_str() {
                    otel_ctx = Some(PathBuf::from(exe));
                }
            }
            if msg["target"]["name"] == "otel_ctx_ffi" {
                for file in msg["filenames"].as_array().into_iter().flatten() {
                    files.push(PathBuf::from(file.as_str().expect("a path")));
                }
            }
        }
        let find = |ext: &str| {
            files
                .iter()
                .find(|f| f.extension().is_some_and(|e| e == ext))
                .unwrap_or_else(|| panic!("cargo built no libotel_ctx_ffi.{ext}: {files:?}"))
                .clone()
        };
        Built {
            shared: find("so"),
            archive: find("a"),
            otel_ctx: otel_ctx.expect("cargo named no otel-ctx executable"),
        }
    })
}

/// `libotel_ctx_ffi.a` built for `x86_64-unknown-linux-musl` (only the static library: a
/// `cdylib` cannot be built for a `crt-static` target), once, through cargo.
pub fn musl_archive() -> &'static PathBuf {
    static ARCHIVE: OnceLock<PathBuf> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "rustc",
                "-p",
                "otel-ctx-ffi",
                "--lib",
                "--crate-type",
                "staticlib",
            ])
            .args(["--target", MUSL_TARGET, "--quiet", "--message-format=json"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo");
        assert!(
            out.status.success(),
            "cargo rustc --target {MUSL_TARGET} failed (rustup target add {MUSL_TARGET})"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|msg| msg["target"]["name"] == "otel_ctx_ffi")
            .flat_map(|msg| {
                msg["filenames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(PathBuf::from))
                    .collect::<Vec<_>>()
            })
            .find(|f| f.extension().is_some_and(|e| e == "a"))
            .expect("cargo built no libotel_ctx_ffi.a for musl")
    })
}

/// The musl target of the static library.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

/// The output of `rustc <args>` (the toolchain cargo uses), trimmed.
fn rustc_print(args: &[&str]) -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(args)
        .output()
        .expect("cannot run rustc");
    assert!(out.status.success(), "rustc {args:?} failed");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What a C program linked statically against musl needs besides the archive: the
/// directory of Rust's own `libunwind.a` for musl (the archive's `-lunwind`; the
/// system's `libgcc_eh.a` is built for glibc), the directory of the `ld.lld` that runs
/// the toolchain's `rust-lld`, and musl's start files (the directory of the `Scrt1.o`
/// `musl-gcc` links).
pub struct MuslToolchain {
    /// `<sysroot>/lib/rustlib/x86_64-unknown-linux-musl/lib/self-contained`.
    pub unwind_dir: PathBuf,
    /// `<sysroot>/lib/rustlib/<host>/bin/gcc-ld`, for `-B <it> -fuse-ld=lld`.
    pub lld_dir: PathBuf,
    /// musl's `lib` directory (`rcrt1.o`, `crti.o`, `crtn.o`, `libc.a`).
    pub musl_lib: PathBuf,
}

/// The paths of [`MuslToolchain`], found once.
pub fn musl_toolchain() -> &'static MuslToolchain {
    static TOOLCHAIN: OnceLock<MuslToolchain> = OnceLock::new();
    TOOLCHAIN.get_or_init(|| {
        let sysroot = PathBuf::from(rustc_print(&["--print", "sysroot"]));
        let host = rustc_print(&["--print", "host-tuple"]);
        let rustlib = sysroot.join("lib/rustlib");
        let unwind_dir = rustlib.join(MUSL_TARGET).join("lib/self-contained");
        assert!(
            unwind_dir.join("libunwind.a").is_file(),
            "no {} (rustup target add {MUSL_TARGET})",
            unwind_dir.join("libunwind.a").display()
        );
        let lld_dir = rustlib.join(host).join("bin/gcc-ld");
        assert!(
            lld_dir.join("ld.lld").is_file(),
            "no {} (the toolchain's rust-lld wrapper)",
            lld_dir.join("ld.lld").display()
        );
        // `-###` prints the link command without running it; musl-gcc's specs name
        // musl's start files there.
        let out = Command::new("musl-gcc")
            .args(["-###", "-x", "c", "-", "-o", "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run musl-gcc: {e} (install musl-tools)"));
        let commands = String::from_utf8_lossy(&out.stderr);
        let scrt1 = commands
            .split(|c: char| c.is_whitespace() || c == '"')
            .find(|word| word.ends_with("/Scrt1.o"))
            .unwrap_or_else(|| panic!("musl-gcc -### names no Scrt1.o:\n{commands}"));
        let musl_lib = PathBuf::from(scrt1)
            .parent()
            .expect("a directory")
            .to_owned();
        MuslToolchain {
            unwind_dir,
            lld_dir,
            musl_lib,
        }
    })
}

/// How a C program is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// gcc, against `libotel_ctx_ffi.so`.
    Shared,
    /// gcc, against the glibc `libotel_ctx_ffi.a`, exporting the slot itself.
    Static,
    /// `musl-gcc -static` against the musl `libotel_ctx_ffi.a`: a static executable that
    /// is not position-independent, which has no `.dynsym` at all.
    MuslStatic,
    /// `musl-gcc` against the musl `libotel_ctx_ffi.a` as a static-PIE executable, linked
    /// by `rust-lld` and exporting the slot in its `.dynsym`.
    MuslStaticPie,
    /// `musl-gcc -static` against the musl `libotel_ctx_ffi.a`, linked by `rust-lld` with
    /// an empty shared object `--as-needed` (so that lld writes a `.dynsym`, which it does
    /// for an executable only when a shared object takes part in the link, and leaves no
    /// `DT_NEEDED`), exporting the slot there: still not position-independent, with no
    /// loader and no relocation.
    MuslStaticDynsym,
}

/// An empty shared object (no symbols, no code), linked once by the toolchain's lld.
pub fn empty_shared_object() -> &'static PathBuf {
    static EMPTY: OnceLock<PathBuf> = OnceLock::new();
    EMPTY.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-libempty.so", env!("CARGO_CRATE_NAME")));
        let status = Command::new("gcc")
            .arg("-B")
            .arg(&musl_toolchain().lld_dir)
            .args(["-fuse-ld=lld", "-shared", "-nostdlib", "-o"])
            .arg(&out)
            .args(["-x", "assembler", "/dev/null"])
            .status()
            .unwrap_or_else(|e| panic!("run gcc: {e}"));
        assert!(
            status.success(),
            "gcc could not link an empty shared object"
        );
        out
    })
}

/// Compiles `tests/c/<source>.c` against the library, linked as `link`.
pub fn compile(source: &str, link: Link) -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Named after the test binary too: two of them may compile the same program at once.
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-{source}-{link:?}", env!("CARGO_CRATE_NAME")));
    let src = root.join("tests/c").join(format!("{source}.c"));
    let compiler = match link {
        Link::Shared | Link::Static => "gcc",
        Link::MuslStatic | Link::MuslStaticPie | Link::MuslStaticDynsym => "musl-gcc",
    };
    let mut cc = Command::new(compiler);
    cc.args(["-std=c11", "-Wall", "-Werror", "-O1", "-pthread", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&out);
    match link {
        Link::Shared => {
            let dir = built().shared.parent().expect("a directory");
            cc.arg(&src)
                .arg(&built().shared)
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        // The static library brings the symbol; the executable must put it in .dynsym.
        Link::Static => {
            cc.arg(&src).arg(&built().archive).args([
                "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1",
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
            ]);
        }
        // The archive's unwinder is Rust's libunwind for musl (`-lunwind`).
        Link::MuslStatic => {
            cc.arg("-static")
                .arg(&src)
                .arg(musl_archive())
                .arg("-L")
                .arg(&musl_toolchain().unwind_dir)
                .arg("-lunwind");
        }
        // Undefined weak symbols (crtbegin.o's) stay static, resolved to 0, so that no
        // dynamic relocation is left for a loader that never runs.
        Link::MuslStaticDynsym => {
            cc.arg("-static")
                .arg("-B")
                .arg(&musl_toolchain().lld_dir)
                .args([
                    "-fuse-ld=lld",
                    "-Wl,--no-dynamic-linker,-z,nodynamic-undefined-weak",
                    "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1",
                ])
                .arg(&src)
                .arg(musl_archive())
                .arg("-L")
                .arg(&musl_toolchain().unwind_dir)
                .arg("-lunwind")
                .arg(format!(
                    "-Wl,-Bdynamic,--as-needed,{},-Bstatic",
                    empty_shared_object().display()
                ));
        }
        // musl-gcc's specs know no -static-pie: the start files of a self-relocating
        // executable (rcrt1.o) are named here, and the linker is told -static -pie. lld
        // relaxes the slot's TLSDESC access to local-exec; GNU ld would leave an
        // initial-exec access with a TPOFF64 relocation musl's start code never applies.
        Link::MuslStaticPie => {
            let musl = &musl_toolchain().musl_lib;
            let gcc_file = |name: &str| {
                let out = Command::new("musl-gcc")
                    .arg(format!("-print-file-name={name}"))
                    .output()
                    .expect("run musl-gcc");
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            };
            cc.args(["-fPIE", "-nostartfiles", "-B"])
                .arg(&musl_toolchain().lld_dir)
                .args([
                    "-fuse-ld=lld",
                    "-Wl,-static,-pie,--no-dynamic-linker,-z,text",
                    "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1",
                ])
                .arg(musl.join("rcrt1.o"))
                .arg(musl.join("crti.o"))
                .arg(gcc_file("crtbeginS.o"))
                .arg(&src)
                .arg(musl_archive())
                .arg("-L")
                .arg(&musl_toolchain().unwind_dir)
                .arg("-lunwind")
                .arg(gcc_file("crtendS.o"))
                .arg(musl.join("crtn.o"));
        }
    }
    let status = cc
        .status()
        .unwrap_or_else(|e| panic!("run {compiler}: {e} (install gcc and musl-tools)"));
    assert!(status.success(), "{compiler} {source}.c ({link:?}) failed");
    out
}
