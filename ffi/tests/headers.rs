//! The checked-in headers in `include/` are what cbindgen generates from the sources now.
//! With `OTEL_CTX_FFI_BLESS=1` the test rewrites them instead of failing.

use std::path::Path;

/// Generates the header of `source` with `config` and compares it with `header`.
fn check(source: &str, config: &str, header: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join(config))
        .unwrap_or_else(|e| panic!("read {config}: {e}"));
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join(source))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen on {source}: {e}"))
        .write(&mut generated);
    let path = root.join("include").join(header);
    if std::env::var_os("OTEL_CTX_FFI_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "ffi/include/{header} is stale: regenerate it with \
         `OTEL_CTX_FFI_BLESS=1 cargo test -p otel-ctx-ffi --test headers` and commit it"
    );
}

#[test]
fn process_header_is_up_to_date() {
    check(
        "src/process.rs",
        "cbindgen-process.toml",
        "otel_process_ctx.h",
    );
}

#[test]
fn thread_header_is_up_to_date() {
    check("src/thread.rs", "cbindgen-thread.toml", "otel_ctx.h");
}
