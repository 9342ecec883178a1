//! Opening a target's mapped files (`files::open_mapped`), on this process's own
//! mappings: with `openat2`, and on a kernel without it (a seccomp filter answers
//! `ENOSYS`), where the path is walked without following symlinks. Files a target names
//! (`files::open_in`), and a budgeted stream of one (`files::BudgetedReader`).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use otel_ctx_reader::files::{
    open_in, open_mapped, BudgetedReader, Exceeded, FileBudget, OpenedVia, Refusal, Root,
};
use otel_ctx_reader::maps::{FileRange, MappedFile};
use otel_ctx_reader::ProcessMaps;

/// This test binary as its maps show it.
fn own_executable() -> MappedFile {
    let exe = std::fs::read_link("/proc/self/exe").expect("own executable");
    let maps = ProcessMaps::read(std::process::id()).expect("own maps");
    maps.files
        .into_iter()
        .find(|f| exe == std::path::Path::new(&f.path))
        .expect("the executable among the mapped files")
}

/// A mapped file as if its maps line named it by `path` (which leads to `real`), at an
/// address range that is not mapped, so that map_files has nothing to give.
fn named(path: &str, real: &std::path::Path) -> MappedFile {
    let meta = std::fs::metadata(real).expect("metadata");
    MappedFile {
        path: path.to_owned(),
        deleted: false,
        dev: meta.dev(),
        inode: meta.ino(),
        ranges: vec![FileRange {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            perms: *b"r-xp",
        }],
    }
}

/// Runs `f` on a thread whose `openat2` answers ENOSYS, as on kernels before 5.6.
fn without_openat2<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(|| {
        let rules = [(libc::SYS_openat2, vec![])].into_iter().collect();
        let arch = std::env::consts::ARCH.try_into().expect("seccomp arch");
        let filter = seccompiler::SeccompFilter::new(
            rules,
            seccompiler::SeccompAction::Allow,
            seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .expect("filter");
        let program: seccompiler::BpfProgram = filter.try_into().expect("program");
        seccompiler::apply_filter(&program).expect("install the filter");
        f()
    })
    .join()
    .expect("the filtered thread")
}

#[test]
fn the_executable_opens_by_path_with_and_without_openat2() {
    let exe = own_executable();
    let pid = std::process::id();
    let opened = open_mapped(pid, &exe).expect("open the executable");
    assert_eq!(opened.via, OpenedVia::Path);
    assert_eq!(opened.file.metadata().unwrap().ino(), exe.inode);
    assert!(opened.size > 0);
    let exe_again = exe.clone();
    let fallback = without_openat2(move || open_mapped(pid, &exe_again).map(|o| o.via));
    assert_eq!(fallback.expect("open by walking the path"), OpenedVia::Path);
}

#[test]
fn a_symlink_on_the_path_resolves_inside_the_root_or_is_refused() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("files-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("real")).unwrap();
    let real = dir.join("real/module.so");
    std::fs::write(&real, b"\x7fELF").unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
    let through_link = dir.join("link/module.so");
    let file = named(through_link.to_str().unwrap(), &real);
    let pid = std::process::id();

    // openat2 resolves the symlink inside this process's root (its own): the same file.
    let opened = open_mapped(pid, &file).expect("resolved inside the root");
    assert_eq!(opened.via, OpenedVia::Path);

    // Without openat2, no symlink is followed; map_files has no such mapping.
    let refused = without_openat2(move || open_mapped(pid, &file).err());
    let e = refused.expect("refused without openat2");
    assert!(matches!(e.by_path, Refusal::Symlink), "{e:?}");
    assert!(e.to_string().contains("symlink"), "{e}");

    // A path that now names another file is refused by its identity.
    std::fs::remove_file(&real).unwrap();
    std::fs::write(&real, b"another file").unwrap();
    let file = named(through_link.to_str().unwrap(), &dir.join("link"));
    let e = open_mapped(pid, &file).expect_err("another file");
    assert!(
        matches!(e.by_path, Refusal::OtherFile | Refusal::NotRegular(_)),
        "{e:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_is_never_opened_for_reading() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("files-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("module.so");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let file = named(fifo.to_str().unwrap(), &fifo);
    // A plain open would block until a writer came; this returns at once.
    let e = open_mapped(std::process::id(), &file).expect_err("a FIFO");
    assert!(matches!(e.by_path, Refusal::NotRegular("a FIFO")), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_named_file_opens_in_either_root_and_a_fifo_never_does() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("files-open-in-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let map = dir.join("perf-1.map");
    std::fs::write(&map, b"1000 10 f\n").unwrap();
    let path = map.to_str().unwrap();
    for root in [Root::Target(std::process::id()), Root::Host] {
        let opened = open_in(root, path).unwrap_or_else(|e| panic!("{root}: {e}"));
        assert_eq!(opened.size, 10);
    }
    // An absolute symlink resolves inside the root it is opened in.
    let link = dir.join("link.map");
    std::os::unix::fs::symlink(&map, &link).unwrap();
    assert!(open_in(Root::Target(std::process::id()), link.to_str().unwrap()).is_ok());
    assert!(matches!(
        open_in(Root::Host, dir.join("none.map").to_str().unwrap()),
        Err(Refusal::Missing)
    ));
    assert!(matches!(
        open_in(Root::Host, dir.to_str().unwrap()),
        Err(Refusal::NotRegular("a directory"))
    ));
    // A FIFO: refused from its O_PATH descriptor, where a plain open would block.
    let fifo = dir.join("perf-2.map");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert!(matches!(
        open_in(Root::Target(std::process::id()), fifo.to_str().unwrap()),
        Err(Refusal::NotRegular("a FIFO"))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_budgeted_reader_stops_at_the_budget() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("files-reader-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    std::fs::write(&path, vec![7u8; 10_000]).unwrap();
    let read = |offset: u64, max: u64| {
        let file = std::fs::File::open(&path).unwrap();
        let mut reader =
            BudgetedReader::new(file, offset, FileBudget::default().with_max_bytes(max));
        let mut out = Vec::new();
        let result = reader.read_to_end(&mut out);
        (result.map(|_| out.len()), reader.exceeded())
    };
    // A file that fits, to the byte; one read from an offset.
    assert_eq!(read(0, 10_000).0.unwrap(), 10_000);
    assert_eq!(read(9_000, 1_000).0.unwrap(), 1_000);
    // One that does not: an error, and the bound said.
    let (result, exceeded) = read(0, 4_096);
    assert!(result.is_err());
    assert_eq!(exceeded, Some(Exceeded::Bytes(4_096)));
    let _ = std::fs::remove_dir_all(&dir);
}
