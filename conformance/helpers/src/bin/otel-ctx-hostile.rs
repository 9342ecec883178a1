//! A process that maps files a reader must not trust, for the hostile-files tests.
//!
//! `otel-ctx-hostile <mode> <dir> [<host path>]` publishes a process context (service
//! `hostile`, key `http.route`), starts two threads that attach records with route
//! `/hostile` and sleep, then maps one more executable "module" in the way `<mode>` says,
//! prints `ready <module path as /proc/<pid>/maps shows it>` and runs until its standard
//! input closes:
//!
//! - `fifo`: maps a copy of its own executable from `<dir>/module.so`, then renames a FIFO
//!   over that path (an open of the path would block forever);
//! - `chardev`: maps `/dev/zero` executable (the path names a character device);
//! - `symlink-escape`: makes `<dir>/root` its root (`chroot`), with every file it maps
//!   linked at the same path inside, maps `/lib/module.so` there, then replaces that path
//!   (and the path maps shows for it, `<dir>/root/lib/module.so`, made inside too) with an
//!   absolute symlink to `<host path>`, which exists on the host only (a FIFO the test
//!   made): resolved against the reader's root instead of the target's, it would block
//!   the reader;
//! - `sparse`: maps the first page of `<dir>/sparse.so`, a 100 GiB sparse file whose ELF
//!   headers claim a 50 GiB symbol table;
//! - `churn`: maps a copy of its own executable from `<dir>/churn.so`, then, until it
//!   exits, one thread rewrites that file in place (truncated, garbage, then its bytes
//!   again) while another renames FIFOs and other files over its path.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use otel_ctx_writer::process::{global, Resource};
use otel_ctx_writer::thread::{register, ThreadContext};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("otel-ctx-hostile: {what}: {e}");
    std::process::exit(1);
}

/// Maps the first `len` bytes of `file` readable and executable, privately.
fn map_executable(file: &File, len: usize) {
    // SAFETY: a fresh private mapping at an address the kernel picks; nothing in this
    // program reads or writes it (it exists to be seen in /proc/<pid>/maps).
    let mapped = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::EXEC,
            rustix::mm::MapFlags::PRIVATE,
            file,
            0,
        )
    };
    if let Err(e) = mapped {
        fail("mmap the module", e);
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| fail("mkfifo", e));
}

/// Maps a copy of this executable from `path`.
fn map_copy_of_self(path: &Path) -> File {
    fs::copy("/proc/self/exe", path).unwrap_or_else(|e| fail("copy the executable", e));
    let file = File::open(path).unwrap_or_else(|e| fail("open the copy", e));
    map_executable(&file, 4096);
    file
}

/// The paths of every file this process maps.
fn mapped_paths() -> Vec<PathBuf> {
    let maps = fs::read_to_string("/proc/self/maps").unwrap_or_else(|e| fail("maps", e));
    let mut paths: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|name| name.starts_with('/'))
        .map(PathBuf::from)
        // Not the memfd of the context, nor a file removed since.
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// A 100 GiB sparse ELF file whose section headers claim a 50 GiB `.dynsym`.
fn sparse_elf(path: &Path) -> File {
    const GIB: u64 = 1 << 30;
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| fail("create the sparse file", e));
    file.set_len(100 * GIB)
        .unwrap_or_else(|e| fail("size the sparse file", e));
    let machine: u16 = if cfg!(target_arch = "aarch64") {
        183
    } else {
        62
    };
    let shoff = 100 * GIB - 4096;
    let mut header = Vec::with_capacity(64 + 56);
    header.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    header.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
    header.extend_from_slice(&machine.to_le_bytes());
    header.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    header.extend_from_slice(&0u64.to_le_bytes()); // e_entry
    header.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    header.extend_from_slice(&shoff.to_le_bytes()); // e_shoff
    header.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [64u16, 56, 1, 64, 3, 2] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        header.extend_from_slice(&half.to_le_bytes());
    }
    // One PT_LOAD of the first page, readable and executable.
    header.extend_from_slice(&1u32.to_le_bytes());
    header.extend_from_slice(&5u32.to_le_bytes());
    for word in [0u64, 0, 0, 4096, 4096, 4096] {
        header.extend_from_slice(&word.to_le_bytes());
    }
    file.write_all_at(&header, 0)
        .unwrap_or_else(|e| fail("write the ELF header", e));
    let section = |kind: u32, offset: u64, size: u64, link: u32, entsize: u64| {
        let mut s = Vec::with_capacity(64);
        s.extend_from_slice(&0u32.to_le_bytes()); // sh_name
        s.extend_from_slice(&kind.to_le_bytes());
        s.extend_from_slice(&2u64.to_le_bytes()); // SHF_ALLOC
        s.extend_from_slice(&0u64.to_le_bytes()); // sh_addr
        s.extend_from_slice(&offset.to_le_bytes());
        s.extend_from_slice(&size.to_le_bytes());
        s.extend_from_slice(&link.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes()); // sh_info
        s.extend_from_slice(&8u64.to_le_bytes()); // sh_addralign
        s.extend_from_slice(&entsize.to_le_bytes());
        s
    };
    let mut sections = vec![0u8; 64];
    sections.extend(section(11, GIB, 50 * GIB, 2, 24)); // SHT_DYNSYM
    sections.extend(section(3, 60 * GIB, GIB, 0, 0)); // SHT_STRTAB
    file.write_all_at(&sections, shoff)
        .unwrap_or_else(|e| fail("write the section headers", e));
    file
}

/// Rewrites `file` in place, forever: truncated, garbage, then `bytes` again.
fn rewrite_forever(file: File, bytes: Vec<u8>) {
    let garbage = vec![0xa5u8; 4096];
    loop {
        let _ = file.set_len(0);
        let _ = file.write_all_at(&garbage, 0);
        let _ = file.write_all_at(&bytes, 0);
        let _ = file.set_len(bytes.len() as u64);
    }
}

/// Renames a FIFO, then a small regular file, over `path`, forever.
fn replace_forever(path: PathBuf) {
    let fifo = path.with_extension("fifo");
    let other = path.with_extension("other");
    loop {
        let _ = fs::remove_file(&fifo);
        mkfifo(&fifo);
        let _ = fs::rename(&fifo, &path);
        let _ = fs::write(&other, b"\x7fELF not really");
        let _ = fs::rename(&other, &path);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(dir)) = (args.get(1), args.get(2)) else {
        fail(
            "usage",
            "otel-ctx-hostile fifo|chardev|symlink-escape|sparse|churn <dir> [<host path>]",
        );
    };
    let dir = PathBuf::from(dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| fail("create the directory", e));

    let resource = Resource::builder()
        .service_name("hostile")
        .build()
        .unwrap_or_else(|e| fail("resource", e));
    global::publish(resource).unwrap_or_else(|e| fail("publish", e));
    let route = register("http.route").unwrap_or_else(|e| fail("register", e));
    for n in 1u8..=2 {
        std::thread::spawn(move || {
            let context = ThreadContext::new([n; 16], [n; 8], 1, &[(route, "/hostile")])
                .unwrap_or_else(|e| fail("record", e));
            let _attached = context.attach();
            loop {
                std::thread::park();
            }
        });
    }

    let module: PathBuf = match mode.as_str() {
        "fifo" => {
            let path = dir.join("module.so");
            map_copy_of_self(&path);
            let fifo = dir.join("module.fifo");
            mkfifo(&fifo);
            fs::rename(&fifo, &path).unwrap_or_else(|e| fail("rename the FIFO", e));
            path
        }
        "chardev" => {
            let zero = File::open("/dev/zero").unwrap_or_else(|e| fail("open /dev/zero", e));
            map_executable(&zero, 65536);
            PathBuf::from("/dev/zero")
        }
        "symlink-escape" => {
            let Some(host) = args.get(3) else {
                fail("usage", "symlink-escape needs the host path");
            };
            let root = dir.join("root");
            for path in mapped_paths() {
                let inside = root.join(path.strip_prefix("/").unwrap_or(&path));
                if let Some(parent) = inside.parent() {
                    fs::create_dir_all(parent).unwrap_or_else(|e| fail("mkdir", e));
                }
                // The same inode at the same path inside: the reader finds it there.
                if fs::hard_link(&path, &inside).is_err() {
                    fs::copy(&path, &inside).unwrap_or_else(|e| fail("copy a module", e));
                }
            }
            fs::create_dir_all(root.join("lib")).unwrap_or_else(|e| fail("mkdir", e));
            let inside = root.join("lib/module.so");
            map_copy_of_self(&inside);
            // /proc/<pid>/maps of a process under chroot shows the paths of the whole
            // tree (`<dir>/root/lib/module.so`): a reader that resolves that path inside
            // the process's root finds the same path there, made a symlink too.
            let shown = std::fs::canonicalize(&inside).unwrap_or_else(|e| fail("canonicalize", e));
            let mirrored = root.join(shown.strip_prefix("/").unwrap_or(&shown));
            if let Some(parent) = mirrored.parent() {
                fs::create_dir_all(parent).unwrap_or_else(|e| fail("mkdir", e));
            }
            let c_root = CString::new(root.as_os_str().as_bytes()).expect("no NUL");
            rustix::process::chroot(c_root.as_c_str()).unwrap_or_else(|e| fail("chroot", e));
            std::env::set_current_dir("/").unwrap_or_else(|e| fail("chdir /", e));
            fs::remove_file("/lib/module.so").unwrap_or_else(|e| fail("unlink", e));
            for path in [Path::new("/lib/module.so"), shown.as_path()] {
                std::os::unix::fs::symlink(host, path).unwrap_or_else(|e| fail("symlink", e));
            }
            shown
        }
        "sparse" => {
            let path = dir.join("sparse.so");
            let file = sparse_elf(&path);
            map_executable(&file, 4096);
            path
        }
        "churn" => {
            let path = dir.join("churn.so");
            let file = map_copy_of_self(&path);
            let bytes = fs::read(&path).unwrap_or_else(|e| fail("read the copy", e));
            let writer = File::options()
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| fail("open the copy for writing", e));
            drop(file);
            std::thread::spawn(move || rewrite_forever(writer, bytes));
            let renamed = path.clone();
            std::thread::spawn(move || replace_forever(renamed));
            path
        }
        other => fail("mode", format!("unknown mode {other:?}")),
    };
    println!("ready {}", module.display());
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {
        line.clear();
    }
}
