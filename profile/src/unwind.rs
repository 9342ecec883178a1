//! Unwinding: a sample's registers and stack copy to return addresses, with framehop
//! (DWARF CFI from `.eh_frame`, indexed by `.eh_frame_hdr`, or `.debug_frame`; frame
//! pointers where no CFI covers an address), on x86_64 and aarch64.
//!
//! The stack memory is the sample's copy and nothing else: a read outside it fails and
//! ends the walk. So does a frame that moves the stack pointer down, or leaves it where
//! it was (after the first frame, which on aarch64 may return through `lr` without a
//! stack frame), and the walk stops at a fixed depth: garbage registers or a stack that
//! loops cost at most that many steps.

use std::fmt;
use std::ops::Range;

use framehop::aarch64::{CacheAarch64, PtrAuthMask, UnwindRegsAarch64, UnwinderAarch64};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use otel_ctx_reader::UserRegisters;

use crate::arch::Arch;
use crate::bytes::Bytes;
use crate::elf::UnwindSections;

/// One frame of an unwound stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The instruction pointer (the first frame) or a return address.
    pub address: u64,
    /// Whether `address` is a return address: the call it returns from is the
    /// instruction before it.
    pub return_address: bool,
}

impl Frame {
    /// The address to look symbols up at: a return address moved back into the call.
    pub const fn lookup_address(self) -> u64 {
        if self.return_address {
            self.address.saturating_sub(1)
        } else {
            self.address
        }
    }
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum UnwindEnd {
    /// At the outermost frame (its CFI says so, or the frame pointer is 0): the whole
    /// stack.
    Root,
    /// The sample has no stack copy: only the instruction pointer is known.
    NoStack,
    /// The walk needed stack memory past the end of the copy (the copy is too short
    /// for this stack).
    StackEnd,
    /// The walk needed memory that is not stack: below the stack pointer, or far from
    /// it (garbage registers or a frame pointer that is not one).
    OutsideStack,
    /// A frame moved the stack pointer down.
    MovedBackwards,
    /// A frame left the stack pointer and the address where they were.
    DidNotAdvance,
    /// A return address of 0.
    NullReturnAddress,
    /// The stack is deeper than the profile's `max_depth`.
    DepthLimit,
    /// An address computation overflowed.
    Overflow,
}

impl UnwindEnd {
    /// Every reason, in order.
    pub const ALL: [Self; 9] = [
        Self::Root,
        Self::NoStack,
        Self::StackEnd,
        Self::OutsideStack,
        Self::MovedBackwards,
        Self::DidNotAdvance,
        Self::NullReturnAddress,
        Self::DepthLimit,
        Self::Overflow,
    ];

    /// Whether the walk stopped short of the outermost frame.
    pub const fn is_failure(self) -> bool {
        !matches!(self, Self::Root)
    }

    /// A short name (`"stack-end"`), for counters.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::NoStack => "no-stack",
            Self::StackEnd => "stack-end",
            Self::OutsideStack => "outside-stack",
            Self::MovedBackwards => "moved-backwards",
            Self::DidNotAdvance => "did-not-advance",
            Self::NullReturnAddress => "null-return-address",
            Self::DepthLimit => "depth-limit",
            Self::Overflow => "overflow",
        }
    }
}

impl fmt::Display for UnwindEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Root => "reached the outermost frame",
            Self::NoStack => "no stack was copied",
            Self::StackEnd => "the stack copy ended before the stack did",
            Self::OutsideStack => "needed memory outside the stack copy",
            Self::MovedBackwards => "a frame moved the stack pointer down",
            Self::DidNotAdvance => "a frame did not move the stack pointer",
            Self::NullReturnAddress => "a return address was 0",
            Self::DepthLimit => "the stack is deeper than the depth limit",
            Self::Overflow => "an address overflowed",
        })
    }
}

/// How far past the end of the copy a read may be and still count as the copy being
/// short ([`UnwindEnd::StackEnd`]) rather than a wild address.
const STACK_END_SLACK: u64 = 1 << 20;

enum Inner {
    X86_64 {
        unwinder: UnwinderX86_64<Bytes>,
        cache: Box<CacheX86_64>,
    },
    Aarch64 {
        unwinder: UnwinderAarch64<Bytes>,
        cache: Box<CacheAarch64>,
    },
}

/// One process's unwinder: its modules' unwind sections and framehop's rule cache.
pub(crate) struct Walker {
    inner: Inner,
    /// The stack pointer of each frame of the last walk: frame `n`'s function has its
    /// stack frame from `sps[n]` up to `sps[n + 1]`.
    sps: Vec<u64>,
}

impl fmt::Debug for Walker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arch = match self.inner {
            Inner::X86_64 { .. } => Arch::X86_64,
            Inner::Aarch64 { .. } => Arch::Aarch64,
        };
        f.debug_struct("Walker").field("arch", &arch).finish()
    }
}

impl Walker {
    pub fn new(arch: Arch) -> Self {
        let inner = match arch {
            Arch::X86_64 => Inner::X86_64 {
                unwinder: UnwinderX86_64::new(),
                cache: Box::new(CacheX86_64::new()),
            },
            Arch::Aarch64 => Inner::Aarch64 {
                unwinder: UnwinderAarch64::new(),
                cache: Box::new(CacheAarch64::new()),
            },
        };
        Self {
            inner,
            sps: Vec::new(),
        }
    }

    /// The stack pointer of each frame of the last walk, innermost first.
    pub fn stack_pointers(&self) -> &[u64] {
        &self.sps
    }

    /// Forgets every module (the rule cache forgets their rules by itself).
    pub fn clear(&mut self) {
        match &mut self.inner {
            Inner::X86_64 { unwinder, .. } => *unwinder = UnwinderX86_64::new(),
            Inner::Aarch64 { unwinder, .. } => *unwinder = UnwinderAarch64::new(),
        }
    }

    /// Adds a module mapped at `avma` with load bias `bias`, unwound with its CFI
    /// (`sections`), or with frame pointers alone when `sections` is `None`.
    pub fn add_module(
        &mut self,
        name: &str,
        avma: Range<u64>,
        bias: u64,
        sections: Option<&UnwindSections>,
    ) {
        let mut info = ExplicitModuleSectionInfo::<Bytes> {
            base_svma: 0,
            ..ExplicitModuleSectionInfo::default()
        };
        if let Some(s) = sections {
            info.text_svma = s.text_svma.clone();
            info.got_svma = s.got_svma.clone();
            // framehop reads .debug_frame only without .eh_frame. Code built without
            // unwind tables has its CFI in .debug_frame, and the .eh_frame beside it is
            // the start files' few entries: the larger of the two covers the module.
            let debug_frame_covers = match (&s.eh_frame, &s.debug_frame) {
                (Some((_, eh)), Some(debug)) => debug.len() > eh.len(),
                _ => false,
            };
            if debug_frame_covers || s.eh_frame.is_none() {
                info.debug_frame = s.debug_frame.clone();
            } else {
                if let Some((range, bytes)) = &s.eh_frame {
                    info.eh_frame_svma = Some(range.clone());
                    info.eh_frame = Some(bytes.clone());
                }
                if let Some((range, bytes)) = &s.eh_frame_hdr {
                    info.eh_frame_hdr_svma = Some(range.clone());
                    info.eh_frame_hdr = Some(bytes.clone());
                }
            }
        }
        let module: Module<Bytes> = Module::new(name.to_owned(), avma, bias, info);
        match &mut self.inner {
            Inner::X86_64 { unwinder, .. } => unwinder.add_module(module),
            Inner::Aarch64 { unwinder, .. } => unwinder.add_module(module),
        }
    }

    /// Unwinds from `registers` over `stack` (the copy from `registers.sp` up) into
    /// `out`, at most `max_depth` frames.
    pub fn walk(
        &mut self,
        registers: &UserRegisters,
        stack: &[u8],
        max_depth: usize,
        out: &mut Vec<Frame>,
    ) -> UnwindEnd {
        out.clear();
        self.sps.clear();
        let sps = &mut self.sps;
        let base = registers.sp;
        let len = stack.len() as u64;
        let mut read = |address: u64| -> Result<u64, ()> {
            let offset = address.checked_sub(base).ok_or(())?;
            let end = offset.checked_add(8).ok_or(())?;
            if end > len {
                return Err(());
            }
            let word = stack
                .get(offset as usize..end as usize)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .ok_or(())?;
            Ok(u64::from_le_bytes(word))
        };
        let result = match &mut self.inner {
            Inner::X86_64 { unwinder, cache } => {
                let regs = UnwindRegsX86_64::new(registers.ip, registers.sp, registers.fp);
                walk_with(
                    unwinder,
                    cache,
                    regs,
                    registers.ip,
                    UnwindRegsX86_64::sp,
                    &mut read,
                    max_depth,
                    out,
                    sps,
                )
            }
            Inner::Aarch64 { unwinder, cache } => {
                // Return addresses carry pointer-authentication bits above the highest
                // code address. framehop's mask of "no module" (0) is a shift by 64
                // (a panic): with no module there is nothing to strip them for.
                let mask = match unwinder.max_known_code_address() {
                    0 => PtrAuthMask::new_no_strip(),
                    max => PtrAuthMask::from_max_known_address(max),
                };
                let regs = UnwindRegsAarch64::new_with_ptr_auth_mask(
                    mask,
                    registers.lr,
                    registers.sp,
                    registers.fp,
                );
                walk_with(
                    unwinder,
                    cache,
                    regs,
                    registers.ip,
                    UnwindRegsAarch64::sp,
                    &mut read,
                    max_depth,
                    out,
                    sps,
                )
            }
        };
        match result {
            Ok(end) => end,
            Err(framehop::Error::CouldNotReadStack(address)) => {
                if stack.is_empty() {
                    UnwindEnd::NoStack
                } else if address >= base.saturating_add(len)
                    && address - base.saturating_add(len) < STACK_END_SLACK
                {
                    UnwindEnd::StackEnd
                } else {
                    UnwindEnd::OutsideStack
                }
            }
            Err(framehop::Error::FramepointerUnwindingMovedBackwards) => UnwindEnd::MovedBackwards,
            Err(framehop::Error::DidNotAdvance) => UnwindEnd::DidNotAdvance,
            Err(framehop::Error::ReturnAddressIsNull) => UnwindEnd::NullReturnAddress,
            Err(framehop::Error::IntegerOverflow) => UnwindEnd::Overflow,
        }
    }
}

/// The walk itself, for either architecture's unwinder.
#[allow(clippy::too_many_arguments)]
fn walk_with<U, F>(
    unwinder: &U,
    cache: &mut U::Cache,
    mut regs: U::UnwindRegs,
    ip: u64,
    sp_of: fn(&U::UnwindRegs) -> u64,
    read: &mut F,
    max_depth: usize,
    out: &mut Vec<Frame>,
    sps: &mut Vec<u64>,
) -> Result<UnwindEnd, framehop::Error>
where
    U: Unwinder,
    F: FnMut(u64) -> Result<u64, ()>,
{
    out.push(Frame {
        address: ip,
        return_address: false,
    });
    let mut address = FrameAddress::InstructionPointer(ip);
    let mut sp = sp_of(&regs);
    sps.push(sp);
    loop {
        if out.len() >= max_depth {
            return Ok(UnwindEnd::DepthLimit);
        }
        let Some(return_address) = unwinder.unwind_frame(address, &mut regs, cache, read)? else {
            return Ok(UnwindEnd::Root);
        };
        let new_sp = sp_of(&regs);
        if new_sp < sp {
            return Ok(UnwindEnd::MovedBackwards);
        }
        if new_sp == sp && out.len() > 1 {
            return Ok(UnwindEnd::DidNotAdvance);
        }
        let Some(next) = FrameAddress::from_return_address(return_address) else {
            return Ok(UnwindEnd::NullReturnAddress);
        };
        out.push(Frame {
            address: return_address,
            return_address: true,
        });
        sps.push(new_sp);
        address = next;
        sp = new_sp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SP: u64 = 0x7ffd_1000_0000;

    /// A stack of `words` from `SP` up.
    fn stack(words: &[(u64, u64)], len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        for &(address, value) in words {
            let at = (address - SP) as usize;
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    fn walk(arch: Arch, registers: UserRegisters, stack: &[u8]) -> (Vec<u64>, UnwindEnd) {
        let mut frames = Vec::new();
        let end = Walker::new(arch).walk(&registers, stack, 256, &mut frames);
        (frames.iter().map(|f| f.address).collect(), end)
    }

    #[test]
    fn frame_pointer_chain_x86_64() {
        // fp -> [next fp, return address]; the outermost frame pointer is 0.
        let bytes = stack(
            &[
                (SP + 0x10, SP + 0x30),
                (SP + 0x18, 0x40_1011),
                (SP + 0x30, 0),
                (SP + 0x38, 0x40_2022),
            ],
            0x100,
        );
        let registers = UserRegisters {
            ip: 0x40_0000,
            sp: SP,
            fp: SP + 0x10,
            lr: 0,
        };
        let (frames, end) = walk(Arch::X86_64, registers, &bytes);
        assert_eq!(frames, [0x40_0000, 0x40_1011, 0x40_2022]);
        assert_eq!(end, UnwindEnd::Root);
        // The same chain cut short by the copy.
        let (frames, end) = walk(Arch::X86_64, registers, &bytes[..0x20]);
        assert_eq!(frames, [0x40_0000, 0x40_1011]);
        assert_eq!(end, UnwindEnd::StackEnd);
        // No copy at all.
        let (frames, end) = walk(Arch::X86_64, registers, &[]);
        assert_eq!((frames.len(), end), (1, UnwindEnd::NoStack));
    }

    #[test]
    fn frame_pointer_chain_aarch64() {
        // Frame records are [x29, x30] pairs; the outermost record is [0, 0]. Without
        // CFI, framehop takes the leaf to have a record too (lr is not used).
        let bytes = stack(
            &[
                (SP + 0x10, SP + 0x30),
                (SP + 0x18, 0x40_2022),
                (SP + 0x30, SP + 0x50),
                (SP + 0x38, 0x40_3033),
            ],
            0x100,
        );
        let registers = UserRegisters {
            ip: 0x40_0000,
            sp: SP,
            fp: SP + 0x10,
            lr: 0x40_1011,
        };
        let (frames, end) = walk(Arch::Aarch64, registers, &bytes);
        assert_eq!(frames, [0x40_0000, 0x40_2022, 0x40_3033]);
        assert_eq!(end, UnwindEnd::Root);
    }

    #[test]
    fn chains_that_go_nowhere_end() {
        // A frame pointer below the stack pointer, and one pointing at itself.
        for fp in [SP - 0x100, SP] {
            let bytes = stack(&[(SP, SP), (SP + 8, 0x40_1011)], 0x40);
            let registers = UserRegisters {
                ip: 0x40_0000,
                sp: SP,
                fp,
                lr: 0,
            };
            let (frames, end) = walk(Arch::X86_64, registers, &bytes);
            assert!(end.is_failure(), "{fp:#x}: {end:?}");
            assert!(frames.len() <= 2, "{fp:#x}: {frames:x?}");
        }
    }

    #[test]
    fn every_end_has_a_name_and_a_message() {
        for end in UnwindEnd::ALL {
            assert!(!end.name().is_empty() && !end.to_string().is_empty());
            assert_eq!(end.is_failure(), end != UnwindEnd::Root);
        }
    }
}
