//! In-process check of the TLS resolver on the architecture the tests run on (on aarch64
//! under qemu-user, where ptrace is not available): the resolver computes this thread's
//! slot address from `/proc/self/maps`, the ELF files and this process's memory, and the
//! result must equal the address the writer's own code computes. Covers the executable's
//! local exec (through the Rust writer, whose symbol is only in `.symtab` here) and
//! TLSDESC, general dynamic and initial exec in dlopened C libraries.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;

use otel_ctx_reader::thread::tls::{loaded_modules, resolve_for, ElfCache, TargetMemory};
use otel_ctx_reader::thread::tls::{AccessModel, Libc, SymbolTable};
use otel_ctx_reader::ProcessMaps;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// This process's memory, through `/proc/self/mem` (which fails cleanly on unmapped
/// addresses, unlike a pointer read).
struct OwnMemory(File);

impl TargetMemory for OwnMemory {
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_exact_at(buf, addr)
    }
}

fn thread_pointer() -> u64 {
    let tp: u64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads the TCB's self pointer at %fs:0; writes nothing.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads the thread pointer register; touches no memory.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem))
    };
    tp
}

/// Builds a writer library with the C compiler for this architecture and loads it;
/// returns its path and the slot address its own code computes on this thread.
fn load(dir: &std::path::Path, name: &str, flag: &str) -> (String, u64) {
    let cc = if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu-gcc"
    } else {
        "cc"
    };
    let so = dir.join(format!("lib{name}.so"));
    let status = Command::new(cc)
        .args([
            "-O1",
            "-shared",
            "-fPIC",
            flag,
            &format!("{FIXTURES}/writer.c"),
            "-o",
        ])
        .arg(&so)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(status.success(), "{cc} failed for {name}");
    let path = so.to_str().expect("utf-8 path").to_owned();
    let c_path = CString::new(path.clone()).expect("no NUL in path");
    // SAFETY: dlopen with a valid C string; the library's constructors are the C
    // compiler's defaults (none of ours).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {path}");
    // SAFETY: looks a symbol up in a handle dlopen returned.
    let f = unsafe { libc::dlsym(handle, c"otel_fixture_slot".as_ptr()) };
    assert!(!f.is_null(), "otel_fixture_slot in {path}");
    // SAFETY: `otel_fixture_slot` is `void *(void)` in writer.c.
    let f: extern "C" fn() -> *mut u8 = unsafe { std::mem::transmute(f) };
    (path, f() as u64)
}

#[test]
fn resolver_agrees_with_the_writers_own_code() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tls-self-{}", std::env::consts::ARCH));
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let (desc, gd) = if cfg!(target_arch = "aarch64") {
        ("-mtls-dialect=desc", "-mtls-dialect=trad")
    } else {
        ("-mtls-dialect=gnu2", "-mtls-dialect=gnu")
    };
    // Without spare static TLS, glibc resolves TLSDESC dynamically.
    let no_static_tls = std::env::var("GLIBC_TUNABLES")
        .is_ok_and(|t| t.contains("glibc.rtld.optional_static_tls=0"));
    let desc_model = if no_static_tls {
        AccessModel::TlsDescDynamic
    } else {
        AccessModel::TlsDescStatic
    };
    let mut cases = vec![
        (load(&dir, "desc", desc), desc_model),
        (load(&dir, "gd", gd), AccessModel::GeneralDynamic),
    ];
    if !no_static_tls {
        // Initial exec in a dlopened library needs static TLS to spare.
        cases.push((
            load(&dir, "ie", "-ftls-model=initial-exec"),
            AccessModel::InitialExec,
        ));
    }

    let memory = OwnMemory(File::open("/proc/self/mem").expect("open /proc/self/mem"));
    let maps = ProcessMaps::read(std::process::id()).expect("maps");
    let modules = loaded_modules(&maps, &mut ElfCache::new()).loaded;
    let libc = Libc::of_modules(&modules);
    let tp = thread_pointer();
    for ((path, real), model) in cases {
        let module = modules
            .iter()
            .find(|m| m.path == path)
            .unwrap_or_else(|| panic!("{path} not among the modules"));
        let resolution = resolve_for(module, &modules, libc, &memory).expect("resolve");
        assert_eq!(resolution.model, model, "{path}");
        let slot = resolution.slot_address(tp, &memory).expect("slot");
        assert_eq!(slot, Some(real), "{path}: {resolution:?}");
    }

    // The Rust writer in this test executable: local exec, symbol in `.symtab` only.
    let real = otel_ctx_writer::thread::tls_slot_address() as u64;
    let exe = modules.iter().find(|m| m.is_main).expect("the executable");
    let resolution = resolve_for(exe, &modules, libc, &memory).expect("resolve the executable");
    assert_eq!(resolution.model, AccessModel::LocalExec);
    assert_eq!(resolution.symbol_table, SymbolTable::Symtab);
    assert_eq!(
        resolution.slot_address(tp, &memory).expect("slot"),
        Some(real)
    );
}
