//! Build-script helper that exports `otel_thread_ctx_v1` in `.dynsym`.
//!
//! ```no_run
//! // In `fn main()` of the `build.rs` of the package that builds the binary or `cdylib`,
//! // with this crate in its `[build-dependencies]` (`otel-ctx-export = { version = "0.1" }`):
//! otel_ctx_export::export_tls_symbol();
//! ```
//!
//! Readers of thread context (OTEP 4947) find the thread-context slot through the dynamic
//! symbol table, even in executables, where linkers leave most symbols out of it. Call
//! [`export_tls_symbol`] from the `build.rs` of the package that builds the binary or
//! `cdylib`, with this crate as a build-dependency, as above.
//!
//! A build-dependency is compiled for the build host, not for the target, so this crate has
//! no platform code and no dependency but `std`: it reads the target from cargo's
//! environment, prints `cargo:` directives, and builds wherever cargo runs. The writer
//! (`otel-ctx-writer`), which defines the symbol, stays an ordinary dependency.
//!
//! What it asks of the linker, and why, is in `EXPORTING.md` beside the writer's
//! `Cargo.toml` (`writer-linux/` in the repository). In short:
//!
//! - executables (bins, tests, benches, examples):
//!   `-Wl,--export-dynamic-symbol=otel_thread_ctx_v1` (GNU ld 2.35 or later, lld, mold);
//! - static-PIE executables (musl's default, or `crt-static`): the same, linked with the
//!   `rust-lld` shipped with the Rust toolchain, because GNU ld leaves an initial-exec
//!   access with a dynamic `TPOFF64` relocation that no dynamic loader ever applies in a
//!   static binary (the thread pointer offset stays 0 and the program crashes);
//! - `cdylib`s: a version script that makes the symbol global (rustc's own script makes
//!   every other symbol local), linked with `rust-lld`, because GNU ld refuses a second
//!   anonymous version script.
//!
//! Only Linux targets get link arguments; others get none.
//!
//! The decision is [`Export::directives`], a pure function of the [`BuildEnv`] values it
//! is given; [`Export::emit`] reads them from cargo's environment, writes the version
//! script and prints the lines.

#![warn(missing_docs)]

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The thread-context TLS symbol of OTEP 4947, `otel_ctx_codec::threadlocal::TLS_SYMBOL`.
///
/// Repeated here rather than imported so that this crate depends on nothing; a test checks
/// that the two agree.
pub const TLS_SYMBOL: &str = "otel_thread_ctx_v1";

/// The version script that makes [`TLS_SYMBOL`] global in a `cdylib`.
pub const VERSION_SCRIPT: &str = "{\n  global:\n    otel_thread_ctx_v1;\n};\n";

/// The file name of [`VERSION_SCRIPT`] in `OUT_DIR`.
pub const VERSION_SCRIPT_FILE: &str = "otel_thread_ctx_v1.ver";

/// Exports `otel_thread_ctx_v1` from every executable and `cdylib` of the calling package;
/// call it from `build.rs`. See the [crate documentation](crate).
pub fn export_tls_symbol() {
    Export::new().emit();
}

/// What [`Export::emit`] asks of the linker; the defaults are those of
/// [`export_tls_symbol`].
#[derive(Clone, Debug)]
pub struct Export {
    executables: bool,
    /// `None`: when the package's manifest declares a `cdylib`.
    cdylib: Option<bool>,
    bundled_lld: bool,
}

impl Default for Export {
    fn default() -> Self {
        Self::new()
    }
}

impl Export {
    /// Executables, and the `cdylib` if the package's `Cargo.toml` declares one, with the
    /// toolchain's `rust-lld` where GNU ld cannot do it.
    pub fn new() -> Self {
        Self {
            executables: true,
            cdylib: None,
            bundled_lld: true,
        }
    }

    /// Whether to export from executables (bins, tests, benches, examples).
    pub fn executables(mut self, yes: bool) -> Self {
        self.executables = yes;
        self
    }

    /// Whether to export from a `cdylib` (through a version script); by default, when the
    /// package's `Cargo.toml` mentions `cdylib`.
    pub fn cdylib(mut self, yes: bool) -> Self {
        self.cdylib = Some(yes);
        self
    }

    /// Whether to link `cdylib`s and static-PIE executables with the `rust-lld` of the
    /// Rust toolchain (`-B <sysroot>/lib/rustlib/<host>/bin/gcc-ld -fuse-ld=lld`). Turn it
    /// off when the linker is already lld or mold (set elsewhere).
    pub fn bundled_lld(mut self, yes: bool) -> Self {
        self.bundled_lld = yes;
        self
    }

    /// Prints the `cargo:` lines for the target cargo is building for. Panics (failing the
    /// build, with the reason) only when `OUT_DIR` is unset or not writable.
    pub fn emit(&self) {
        for line in self.lines() {
            println!("{line}");
        }
    }

    /// The `cargo:` lines [`Export::emit`] prints, for the environment cargo gave the build
    /// script; writes the version script they name, if any, first. Panics as
    /// [`Export::emit`] does.
    pub fn lines(&self) -> Vec<String> {
        let directives = self.directives(&BuildEnv::from_cargo(self));
        if let Some(path) = &directives.version_script {
            write_version_script(path);
        }
        directives.lines
    }

    /// What to print, and which version script to write, for the build environment `env`.
    /// Reads nothing but `env`, so it answers for any target on any host.
    ///
    /// # Panics
    ///
    /// When a `cdylib` is to be exported and `env.out_dir` is `None` (cargo always sets
    /// `OUT_DIR` for a build script).
    pub fn directives(&self, env: &BuildEnv) -> Directives {
        let mut directives = Directives {
            lines: Vec::new(),
            version_script: None,
        };
        if env.target_os != "linux" {
            return directives;
        }
        let lines = &mut directives.lines;
        let lld = if self.bundled_lld {
            match &env.rust_lld {
                RustLld::Found(gcc_ld) => Some(lld_args(gcc_ld)),
                RustLld::Missing(gcc_ld) => {
                    // Warned for every Linux target, not only those that need it: a
                    // toolchain without rust-lld is worth knowing about before the day a
                    // static or cdylib build silently loses the export.
                    lines.push(format!(
                        "cargo:warning=otel-ctx-export: no rust-lld in {}; linking with the \
                         default linker, which cannot export {TLS_SYMBOL} from a cdylib or \
                         static executable if it is GNU ld (see otel-ctx-writer's \
                         EXPORTING.md)",
                        gcc_ld.display()
                    ));
                    None
                }
                RustLld::Unknown => None,
            }
        } else {
            None
        };
        if self.executables {
            // `rustc-link-arg` reaches every binary of the package (bins, tests, benches,
            // examples) and also a `cdylib`, where the flag changes nothing.
            lines.push(format!(
                "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={TLS_SYMBOL}"
            ));
            if env.links_static() {
                if let Some(args) = &lld {
                    for arg in args {
                        lines.push(format!("cargo:rustc-link-arg={arg}"));
                    }
                }
            }
        }
        if self.cdylib.unwrap_or(env.declares_cdylib) {
            let out_dir = env.out_dir.as_deref().unwrap_or_else(|| {
                panic!("otel-ctx-export: export helpers run from build.rs, where OUT_DIR is set")
            });
            let script = out_dir.join(VERSION_SCRIPT_FILE);
            lines.push(format!(
                "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
                script.display()
            ));
            if let Some(args) = &lld {
                for arg in args {
                    lines.push(format!("cargo:rustc-cdylib-link-arg={arg}"));
                }
            }
            directives.version_script = Some(script);
        }
        lines.push(String::from("cargo:rerun-if-env-changed=RUSTC"));
        lines.push(String::from("cargo:rerun-if-changed=Cargo.toml"));
        directives
    }
}

/// What [`Export::directives`] decided for one build environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directives {
    /// The `cargo:` lines to print, in order.
    pub lines: Vec<String>,
    /// Where to write [`VERSION_SCRIPT`] before printing them (`$OUT_DIR/`
    /// [`VERSION_SCRIPT_FILE`]), when a `cdylib` is exported.
    pub version_script: Option<PathBuf>,
}

/// The values of cargo's build-script environment that [`Export::directives`] depends on.
///
/// Start from [`BuildEnv::default`] (no target: no directives) and set the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuildEnv {
    /// `CARGO_CFG_TARGET_OS` (`linux`, `macos`, ...); only `linux` gets directives.
    pub target_os: String,
    /// `CARGO_CFG_TARGET_ENV` (`gnu`, `musl`, or empty).
    pub target_env: String,
    /// `CARGO_CFG_TARGET_FEATURE`, comma-separated (`crt-static` among them for a static
    /// build).
    pub target_features: String,
    /// `CARGO_ENCODED_RUSTFLAGS`, searched for `-crt-static` only.
    pub encoded_rustflags: String,
    /// Whether the `Cargo.toml` in `CARGO_MANIFEST_DIR` mentions `cdylib`.
    pub declares_cdylib: bool,
    /// Where the toolchain's `ld.lld` wrapper is, from `rustc --print sysroot` and `HOST`.
    pub rust_lld: RustLld,
    /// `OUT_DIR`, where the `cdylib` version script goes.
    pub out_dir: Option<PathBuf>,
}

/// Whether the Rust toolchain ships the `ld.lld` wrapper (`<sysroot>/lib/rustlib/<host>/
/// bin/gcc-ld/ld.lld`) that `-fuse-ld=lld` finds through `-B`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RustLld {
    /// Not looked for (`HOST` unset or `rustc` would not run): no `rust-lld` arguments and
    /// no warning.
    #[default]
    Unknown,
    /// The `gcc-ld` directory that holds `ld.lld`.
    Found(PathBuf),
    /// The `gcc-ld` directory looked in, which has no `ld.lld`: no `rust-lld` arguments,
    /// and a warning.
    Missing(PathBuf),
}

impl BuildEnv {
    /// Reads cargo's environment, asking `rustc` for the sysroot and reading the package's
    /// `Cargo.toml` only when `export` can use the answer (a Linux target, the bundled lld
    /// wanted, the `cdylib` choice left to the manifest).
    fn from_cargo(export: &Export) -> Self {
        let var = |name| env::var(name).unwrap_or_default();
        let target_os = var("CARGO_CFG_TARGET_OS");
        let linux = target_os == "linux";
        Self {
            target_env: var("CARGO_CFG_TARGET_ENV"),
            target_features: var("CARGO_CFG_TARGET_FEATURE"),
            encoded_rustflags: var("CARGO_ENCODED_RUSTFLAGS"),
            declares_cdylib: linux && export.cdylib.is_none() && manifest_declares_cdylib(),
            rust_lld: if linux && export.bundled_lld {
                find_rust_lld()
            } else {
                RustLld::Unknown
            },
            out_dir: env::var_os("OUT_DIR").map(PathBuf::from),
            target_os,
        }
    }

    /// Whether the target links static executables: `+crt-static`, or musl (static unless
    /// `-crt-static` is in the flags, whether or not `crt-static` is listed among the
    /// target features).
    fn links_static(&self) -> bool {
        if self.target_features.split(',').any(|f| f == "crt-static") {
            return true;
        }
        self.target_env == "musl" && !self.encoded_rustflags.contains("-crt-static")
    }
}

/// Whether the package being built declares a `cdylib` (cargo warns about cdylib link
/// arguments in a package without one).
fn manifest_declares_cdylib() -> bool {
    env::var_os("CARGO_MANIFEST_DIR")
        .map(|dir| PathBuf::from(dir).join("Cargo.toml"))
        .and_then(|manifest| fs::read_to_string(manifest).ok())
        .is_some_and(|text| text.contains("cdylib"))
}

/// Looks for the `ld.lld` wrapper of the toolchain that cargo runs (`RUSTC`).
fn find_rust_lld() -> RustLld {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| String::from("rustc"));
    let Ok(host) = env::var("HOST") else {
        return RustLld::Unknown;
    };
    let Ok(output) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return RustLld::Unknown;
    };
    let Ok(sysroot) = String::from_utf8(output.stdout) else {
        return RustLld::Unknown;
    };
    let gcc_ld: PathBuf = [sysroot.trim(), "lib", "rustlib", &host, "bin", "gcc-ld"]
        .iter()
        .collect();
    if gcc_ld.join("ld.lld").exists() {
        RustLld::Found(gcc_ld)
    } else {
        RustLld::Missing(gcc_ld)
    }
}

/// `-B <dir of the toolchain's ld.lld wrapper>` and `-fuse-ld=lld`.
fn lld_args(gcc_ld: &Path) -> [String; 2] {
    [
        format!("-B{}", gcc_ld.display()),
        String::from("-fuse-ld=lld"),
    ]
}

/// Writes [`VERSION_SCRIPT`] to `path`, failing the build with the reason if it cannot.
fn write_version_script(path: &Path) {
    if let Err(e) = fs::write(path, VERSION_SCRIPT) {
        panic!(
            "otel-ctx-export: cannot write the version script {}: {e}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests;
