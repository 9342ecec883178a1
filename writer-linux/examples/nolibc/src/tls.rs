//! The initial stack (argv, auxv), the executable's `PT_TLS` image, and thread blocks laid
//! out as the ABI says, so that the linker's local-exec offsets (and a reader computing
//! them) find each thread's `otel_thread_ctx_v1`.
//!
//! - x86_64 (TLS variant II): the TLS block ends at the thread pointer, which points at
//!   the thread control block; its first word is its own address (`%fs:0`).
//! - aarch64 (TLS variant I): the thread pointer points at a 16-byte control block, and
//!   the TLS block follows, aligned to the segment's alignment.

use core::ptr;

/// `PT_PHDR`, `PT_TLS`.
const PT_PHDR: u32 = 6;
const PT_TLS: u32 = 7;
/// `AT_PHDR`, `AT_PHNUM`.
const AT_PHDR: usize = 3;
const AT_PHNUM: usize = 5;

/// What the kernel put on the initial stack that this program uses.
pub struct Start {
    pub argv: &'static [*const u8],
    pub phdr: usize,
    pub phnum: usize,
}

/// Reads argc, argv and the auxiliary vector from the initial stack at `sp`.
///
/// # Safety
/// `sp` must be the stack pointer the kernel gave `_start`.
pub unsafe fn read_start(sp: *const usize) -> Start {
    // SAFETY: the kernel's layout: argc, argv[argc], NULL, envp..., NULL, auxv pairs up to
    // AT_NULL; all of it stays for the life of the process.
    unsafe {
        let argc = *sp;
        let argv = core::slice::from_raw_parts(sp.add(1).cast::<*const u8>(), argc);
        let mut p = sp.add(1 + argc + 1);
        while *p != 0 {
            p = p.add(1);
        }
        p = p.add(1);
        let (mut phdr, mut phnum) = (0, 0);
        while *p != 0 {
            match *p {
                AT_PHDR => phdr = *p.add(1),
                AT_PHNUM => phnum = *p.add(1),
                _ => {}
            }
            p = p.add(2);
        }
        Start { argv, phdr, phnum }
    }
}

/// An `Elf64_Phdr`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Phdr {
    p_type: u32,
    p_flags: u32,
    p_offset: u64,
    p_vaddr: u64,
    p_paddr: u64,
    p_filesz: u64,
    p_memsz: u64,
    p_align: u64,
}

/// The executable's TLS image, as loaded.
#[derive(Clone, Copy)]
pub struct TlsImage {
    /// The initialised part (`.tdata`), `filesz` bytes.
    image: *const u8,
    filesz: usize,
    memsz: usize,
    pub align: usize,
}

// SAFETY: the image is read-only memory of the executable, mapped for the process's life.
unsafe impl Sync for TlsImage {}

/// The `PT_TLS` segment of the loaded executable, from its program headers.
///
/// # Safety
/// `start` must come from [`read_start`].
pub unsafe fn tls_image(start: &Start) -> Option<TlsImage> {
    // SAFETY: AT_PHDR and AT_PHNUM describe the executable's program headers, mapped.
    let phdrs = unsafe { core::slice::from_raw_parts(start.phdr as *const Phdr, start.phnum) };
    // The load bias: where the headers are, minus where they were linked (0 for this
    // non-PIE executable).
    let bias = phdrs
        .iter()
        .find(|p| p.p_type == PT_PHDR)
        .map_or(0, |p| start.phdr.wrapping_sub(p.p_vaddr as usize));
    let tls = phdrs.iter().find(|p| p.p_type == PT_TLS)?;
    Some(TlsImage {
        image: bias.wrapping_add(tls.p_vaddr as usize) as *const u8,
        filesz: tls.p_filesz as usize,
        memsz: tls.p_memsz as usize,
        align: (tls.p_align as usize).max(1),
    })
}

/// `value` rounded up to a multiple of `align` (a power of two).
pub const fn round_up(value: usize, align: usize) -> usize {
    (value + align - 1) & !(align - 1)
}

/// Memory for one thread's TLS block and control block.
#[repr(C, align(64))]
pub struct ThreadArea([u8; AREA_SIZE]);

const AREA_SIZE: usize = 4096;
/// Bytes kept for the control block.
const TCB_SIZE: usize = 64;

impl ThreadArea {
    pub const fn new() -> Self {
        Self([0; AREA_SIZE])
    }
}

/// Lays out a thread's TLS in `area` (a copy of the image, the rest zero, the control
/// block) and returns its thread pointer. `None` when the image does not fit.
pub fn set_up(image: &TlsImage, area: &'static mut ThreadArea) -> Option<usize> {
    if image.align > 64 || !image.align.is_power_of_two() {
        return None;
    }
    let base = area.0.as_mut_ptr();
    let block_size = round_up(image.memsz, image.align);
    #[cfg(target_arch = "x86_64")]
    let (block_offset, tp_offset) = {
        // Variant II: the block ends at the thread pointer, which is aligned.
        let tp = round_up(block_size, image.align);
        (tp - block_size, tp)
    };
    #[cfg(target_arch = "aarch64")]
    let (block_offset, tp_offset) = {
        // Variant I: the thread pointer, 16 bytes of control block, then the block at the
        // next multiple of its alignment.
        (round_up(16, image.align), 0)
    };
    if block_offset + block_size + TCB_SIZE > AREA_SIZE || tp_offset + TCB_SIZE > AREA_SIZE {
        return None;
    }
    // SAFETY: `area` is this thread's alone (`&'static mut`), 64-aligned, and the ranges
    // below were checked to be inside it; the image is `filesz` readable bytes.
    unsafe {
        let block = base.add(block_offset);
        ptr::write_bytes(base, 0, AREA_SIZE);
        ptr::copy_nonoverlapping(image.image, block, image.filesz);
        let tp = base.add(tp_offset);
        #[cfg(target_arch = "x86_64")]
        tp.cast::<usize>().write(tp as usize);
        Some(tp as usize)
    }
}
