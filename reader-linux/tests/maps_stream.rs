//! A 2,000,000-line maps file costs one pass and no allocation that grows with it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use otel_ctx_reader::maps::MappingKind;
use otel_ctx_reader::maps::{MapsScanner, SCAN_BUFFER_SIZE};

/// Records the largest single allocation of the process.
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; the bookkeeping is one atomic.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    bytes: u64,
    calls: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        self.calls += 1;
        Ok(n)
    }
}

const LINES: u64 = 2_000_000;

#[test]
fn two_million_lines_one_pass_no_large_allocation() {
    let path = std::env::temp_dir().join(format!("otel-ctx-maps-{}.txt", std::process::id()));
    let started = Instant::now();
    {
        let mut out = BufWriter::new(File::create(&path).unwrap());
        for i in 0..LINES - 1 {
            let start = 0x7f00_0000_0000 + i * 0x1000;
            // The kinds of lines a large process has: anonymous memory, files, and names
            // that look like ours but are not.
            let name = match i % 5 {
                0 => "",
                1 => "/usr/lib/x86_64-linux-gnu/libc.so.6",
                2 => "[anon:OTEL_CTX2]",
                3 => "/memfd:backup-OTEL_CTX (deleted)",
                _ => "[heap]",
            };
            writeln!(
                out,
                "{start:x}-{:x} rw-p 00000000 00:00 0                          {name}",
                start + 0x1000
            )
            .unwrap();
        }
        // The context mapping is the very last line, without a final newline.
        write!(
            out,
            "7fff00000000-7fff00001000 rw-p 00000000 00:01 1026                       [anon_shmem:OTEL_CTX]"
        )
        .unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "wrote {LINES} lines, {size} bytes, in {:?}",
        started.elapsed()
    );

    let mut scanner = MapsScanner::new();
    let mut input = Counting {
        inner: File::open(&path).unwrap(),
        bytes: 0,
        calls: 0,
    };
    LARGEST.store(0, Ordering::Relaxed);
    let started = Instant::now();
    let found = scanner.find_context_mappings(&mut input).unwrap();
    let elapsed = started.elapsed();
    let largest = LARGEST.load(Ordering::Relaxed);
    std::fs::remove_file(&path).unwrap();
    println!(
        "scanned in {elapsed:?}: {} read calls, largest allocation {largest} bytes",
        input.calls
    );

    assert_eq!(found.len(), 1);
    assert_eq!(found[0].start, 0x7fff_0000_0000);
    assert_eq!(found[0].name.kind, MappingKind::AnonShmem);
    // One pass: every byte read exactly once, in buffer-sized reads.
    assert_eq!(input.bytes, size);
    assert!(
        input.calls <= size / (SCAN_BUFFER_SIZE as u64 / 2) + 2,
        "{} calls",
        input.calls
    );
    // Nothing that grows with the file: the result vector only.
    assert!(largest <= 4096, "largest allocation {largest} bytes");
}
