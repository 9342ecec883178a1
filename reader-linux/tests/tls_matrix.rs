//! The thread reader against writers built in every TLS access model: C programs (gcc
//! and musl-gcc; executable, shared library at startup, dlopen, static, static-pie) and a
//! Rust program using `otel-ctx-writer`. Each runs three threads with distinct records and
//! one thread without a context; the reader, through ptrace, must find exactly each
//! thread's record. (ptrace and the host compilers: x86_64 only; aarch64 is checked in
//! `tls_selfcheck.rs` and `tls_elf.rs`.)
#![cfg(target_arch = "x86_64")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use otel_ctx_reader::{
    loaded_modules, read_stopped, resolve, AccessModel, ElfCache, Libc, SlotState, StoppedThread,
};
use otel_ctx_reader::{ProcessMemory, ReadMethod, ThreadReader, ThreadReaderOptions};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// What a fixture thread printed about itself.
struct Printed {
    tid: u32,
    tp: u64,
    slot: Option<u64>,
    record: u64,
}

struct Target {
    child: Child,
    threads: Vec<Printed>,
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(field: &str, prefix: &str) -> u64 {
    u64::from_str_radix(field.trim_start_matches(prefix), 16)
        .unwrap_or_else(|e| panic!("{field}: {e}"))
}

fn start(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Target {
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut threads = Vec::new();
    for line in stdout.lines() {
        let line = line.expect("fixture output");
        if line == "ready" {
            break;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 5, "unexpected fixture line {line:?}");
        let slot = f[3].trim_start_matches("slot=");
        threads.push(Printed {
            tid: f[1].parse().expect("tid"),
            tp: hex(f[2], "tp="),
            slot: (slot != "-").then(|| hex(slot, "")),
            record: hex(f[4], "record="),
        });
    }
    assert!(
        threads.len() >= 4,
        "{}: fixture printed {threads:?} threads",
        exe.display(),
        threads = threads.len()
    );
    Target { child, threads }
}

fn compile<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(compiler: &str, out: &Path, args: &[S]) {
    let status = Command::new(compiler)
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("run {compiler}: {e} (install gcc and musl-tools)"));
    assert!(status.success(), "{compiler} {args:?} failed");
}

/// Checks one running fixture: the access model, every slot address, every record.
fn check(name: &str, target: &Target, model: AccessModel, named: bool) {
    let pid = target.child.id();
    let modules = loaded_modules(pid, &mut ElfCache::new()).expect("modules");
    let libc = Libc::detect(modules.iter().map(|m| m.path.as_str()));
    let memory = ProcessMemory::new(pid, ReadMethod::Auto);
    let resolution = resolve(&modules, libc, &memory).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(resolution.model, model, "{name}: {resolution:?}");

    // The C fixtures publish no process context, so no schema: read the slot regardless
    // (the Rust writer announces one, and must be read with the default options too).
    let options = ThreadReaderOptions::default().with_require_known_schema(named);
    let mut reader =
        ThreadReader::with_options(pid, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut with_context = 0;
    for t in &target.threads {
        // The slot, as the low-level pieces compute it.
        let stopped = StoppedThread::stop(t.tid).expect("stop the thread");
        let sample = read_stopped(&stopped, &resolution, &memory, 640).expect("sample");
        drop(stopped);
        assert_eq!(
            sample.thread_pointer, t.tp,
            "{name}: thread pointer of {}",
            t.tid
        );
        match t.slot {
            Some(slot) => assert_eq!(sample.slot, Some(slot), "{name}: slot of {}", t.tid),
            // Started before the library was loaded: no TLS block, or a NULL slot.
            None => assert!(
                matches!(sample.state, SlotState::NoTlsBlock | SlotState::Null),
                "{name}: {:?}",
                sample.state
            ),
        }
        // The context, as the thread reader returns it.
        let context = reader
            .read_thread(t.tid)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        match context {
            None => assert_eq!(t.record, 0, "{name}: thread {} lost its context", t.tid),
            Some(c) => {
                with_context += 1;
                assert_eq!(c.record_address, t.record, "{name}");
                let n = c.trace_id()[0] / 16;
                assert!(
                    (1..=3).contains(&n),
                    "{name}: trace id {:02x?}",
                    c.trace_id()
                );
                assert_eq!(c.span_id()[0], 0x80 + n * 8, "{name}");
                let route = ["/checkout", "/cart", "/search"][usize::from(n % 3)];
                if named {
                    assert_eq!(
                        c.attributes.first(),
                        Some(&("http.route".into(), route.into())),
                        "{name}"
                    );
                } else {
                    // No key map: OTEP 4947 has the reader ignore every entry; the
                    // record still holds it.
                    assert!(c.attributes.is_empty(), "{name}: {:?}", c.attributes);
                    let entries: Vec<(u8, &[u8])> =
                        otel_ctx_codec::attrs::AttrsIter::new(&c.attrs_data).collect();
                    assert_eq!(entries, [(0, route.as_bytes())], "{name}");
                }
            }
        }
    }
    assert_eq!(with_context, 3, "{name}: contexts found");
}

#[test]
fn every_access_model_on_glibc_and_musl() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tls-matrix");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let main = format!("{FIXTURES}/main.c");
    let writer = format!("{FIXTURES}/writer.c");
    let at = |n: &str| dir.join(n);
    let path = |n: &str| at(n).to_str().expect("utf-8 path").to_owned();
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let common = ["-O1", "-pthread"];
    for (cc, tag) in [("gcc", "glibc"), ("musl-gcc", "musl")] {
        let with = |extra: &[&str]| -> Vec<String> {
            common.iter().chain(extra).map(|s| s.to_string()).collect()
        };
        // The executable defines the slot, next to a 64-aligned TLS variable.
        compile(
            cc,
            &at(&format!("le-{tag}")),
            &with(&["-DWITH_ALIGNED", "-rdynamic", &main, &writer]),
        );
        compile(
            cc,
            &at(&format!("ie-exe-{tag}")),
            &with(&[
                "-fPIC",
                "-ftls-model=initial-exec",
                "-rdynamic",
                &main,
                &writer,
            ]),
        );
        for (lib, flag) in [
            ("desc", "-mtls-dialect=gnu2"),
            ("gd", "-mtls-dialect=gnu"),
            ("ie", "-ftls-model=initial-exec"),
        ] {
            let so = path(&format!("lib{lib}-{tag}.so"));
            compile(
                cc,
                &at(&format!("lib{lib}-{tag}.so")),
                &with(&["-shared", "-fPIC", flag, &writer]),
            );
            compile(
                cc,
                &at(&format!("{lib}-{tag}")),
                &with(&[&main, &so, &rpath]),
            );
        }
        compile(
            cc,
            &at(&format!("dl-{tag}")),
            &with(&["-DDLOPEN", &main, "-ldl"]),
        );
    }
    compile(
        "musl-gcc",
        &at("static-musl"),
        &["-O1", "-pthread", "-static", &main, &writer],
    );
    compile(
        "musl-gcc",
        &at("static-pie-musl"),
        &["-O1", "-pthread", "-static-pie", "-fPIE", &main, &writer],
    );

    use AccessModel::*;
    let none: &[&str] = &[];
    for tag in ["glibc", "musl"] {
        let case = |name: &str, args: &[&str], env: &[(&str, &str)], model| {
            let exe = at(&format!("{name}-{tag}"));
            let target = start(&exe, args, env);
            check(&format!("{name}-{tag}"), &target, model, false);
        };
        case("le", none, &[], LocalExec);
        case("ie-exe", none, &[], InitialExec);
        case("desc", none, &[], TlsDescStatic);
        case("gd", none, &[], GeneralDynamic);
        case("ie", none, &[], InitialExec);
        // glibc puts a dlopened library in spare static TLS; musl reaches it via the DTV.
        let dl_desc = if tag == "glibc" {
            TlsDescStatic
        } else {
            TlsDescDynamic
        };
        case("dl", &[&path(&format!("libdesc-{tag}.so"))], &[], dl_desc);
        case(
            "dl",
            &[&path(&format!("libgd-{tag}.so"))],
            &[],
            GeneralDynamic,
        );
    }
    // No spare static TLS: glibc's TLSDESC goes through the dynamic resolver and the DTV.
    let target = start(
        &at("dl-glibc"),
        &[&path("libdesc-glibc.so")],
        &[("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=0")],
    );
    check("dl-glibc-dtv", &target, TlsDescDynamic, false);
    for name in ["static-musl", "static-pie-musl"] {
        let target = start(&at(name), none, &[]);
        check(name, &target, LocalExec, false);
    }
}

#[test]
fn rust_writer_with_key_map() {
    // Examples are built next to the test binaries' directory.
    let exe = std::env::current_exe()
        .expect("test binary path")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("examples/thread_fixture");
    let target = start(&exe, &[], &[]);
    check("rust-writer", &target, AccessModel::LocalExec, true);
}
