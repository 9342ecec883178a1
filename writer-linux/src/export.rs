//! Build-script helpers that export `otel_thread_ctx_v1` in `.dynsym` (feature `std`).
//!
//! Readers find the thread-context slot through the dynamic symbol table, even in
//! executables, where linkers leave most symbols out of it. Call [`export_tls_symbol`]
//! from the `build.rs` of the package that builds the binary or `cdylib`, with this crate
//! as a build-dependency:
//!
//! ```toml
//! [build-dependencies]
//! otel-ctx-writer = { version = "0.1" }
//! ```
//!
//! ```no_run
//! // in build.rs, fn main():
//! otel_ctx_writer::export::export_tls_symbol();
//! ```
//!
//! What it asks of the linker, and why, is in `EXPORTING.md` beside this crate's
//! `Cargo.toml`. In short:
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

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::string::String;

use otel_ctx_codec::threadlocal::TLS_SYMBOL;

/// Exports `otel_thread_ctx_v1` from every executable and `cdylib` of the calling package;
/// call it from `build.rs`. See the [module documentation](self).
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

    /// Prints the `cargo:` lines for the current target. Panics (failing the build, with
    /// the reason) only when `OUT_DIR` is not writable.
    pub fn emit(&self) {
        for line in self.lines() {
            std::println!("{line}");
        }
    }

    /// The `cargo:` lines [`Export::emit`] prints.
    pub fn lines(&self) -> std::vec::Vec<String> {
        let mut lines = std::vec::Vec::new();
        if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
            return lines;
        }
        let lld = if self.bundled_lld {
            bundled_lld_args()
        } else {
            None
        };
        if self.executables {
            // `rustc-link-arg` reaches every binary of the package (bins, tests, benches,
            // examples) and also a `cdylib`, where the flag changes nothing.
            lines.push(std::format!(
                "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={TLS_SYMBOL}"
            ));
            if is_static_target() {
                if let Some(args) = &lld {
                    for arg in args {
                        lines.push(std::format!("cargo:rustc-link-arg={arg}"));
                    }
                }
            }
        }
        if self.cdylib.unwrap_or_else(declares_cdylib) {
            let script = write_version_script();
            lines.push(std::format!(
                "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
                script.display()
            ));
            if let Some(args) = &lld {
                for arg in args {
                    lines.push(std::format!("cargo:rustc-cdylib-link-arg={arg}"));
                }
            }
        }
        lines.push(String::from("cargo:rerun-if-env-changed=RUSTC"));
        lines.push(String::from("cargo:rerun-if-changed=Cargo.toml"));
        lines
    }
}

/// Whether the package being built declares a `cdylib` (cargo warns about cdylib link
/// arguments in a package without one).
fn declares_cdylib() -> bool {
    env::var_os("CARGO_MANIFEST_DIR")
        .map(|dir| PathBuf::from(dir).join("Cargo.toml"))
        .and_then(|manifest| fs::read_to_string(manifest).ok())
        .is_some_and(|text| text.contains("cdylib"))
}

/// Whether the target links static executables: `+crt-static`, or musl (static unless
/// `-crt-static` is in the flags; cargo leaves `crt-static` out of
/// `CARGO_CFG_TARGET_FEATURE` for musl targets).
fn is_static_target() -> bool {
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if features.split(',').any(|f| f == "crt-static") {
        return true;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("musl") && !flags.contains("-crt-static")
}

/// `-B <dir of the toolchain's ld.lld wrapper>` and `-fuse-ld=lld`, if the toolchain has
/// them.
fn bundled_lld_args() -> Option<[String; 2]> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| String::from("rustc"));
    let host = env::var("HOST").ok()?;
    let output = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(output.stdout).ok()?;
    let gcc_ld: PathBuf = [sysroot.trim(), "lib", "rustlib", &host, "bin", "gcc-ld"]
        .iter()
        .collect();
    if !gcc_ld.join("ld.lld").exists() {
        std::println!(
            "cargo:warning=otel-ctx-writer: no rust-lld in {}; linking with the default \
             linker, which cannot export otel_thread_ctx_v1 from a cdylib or static \
             executable if it is GNU ld (see EXPORTING.md)",
            gcc_ld.display()
        );
        return None;
    }
    Some([
        std::format!("-B{}", gcc_ld.display()),
        String::from("-fuse-ld=lld"),
    ])
}

/// Writes the version script that makes the symbol global, in `OUT_DIR`.
fn write_version_script() -> PathBuf {
    let out_dir = env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("otel-ctx-writer: export helpers run from build.rs, where OUT_DIR is set")
        });
    let path = out_dir.join("otel_thread_ctx_v1.ver");
    let script = std::format!("{{\n  global:\n    {TLS_SYMBOL};\n}};\n");
    if let Err(e) = fs::write(&path, script) {
        panic!(
            "otel-ctx-writer: cannot write the version script {}: {e}",
            path.display()
        );
    }
    path
}
