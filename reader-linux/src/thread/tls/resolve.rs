//! From modules to an address: where `otel_thread_ctx_v1` lives for a given thread.
//!
//! Resolution runs once per process (and again when modules change): it picks the
//! module and relocation to use and reads the GOT entries the dynamic linker filled,
//! without relying on ld.so internals beyond the documented TLS ABI. The result is either
//! a fixed offset from the thread pointer (local exec, initial exec, TLSDESC with the
//! static resolver), the same for every thread, or a `{module_id, offset}` pair looked up
//! in each thread's DTV (general dynamic, TLSDESC with the dynamic resolver).

use std::fmt;
use std::io;
use std::sync::Arc;

use super::elf::{ElfTls, Machine, Relocated, SymbolTable};

/// Reads the target's memory.
pub trait TargetMemory {
    /// Fills `buf` from address `addr`, or fails (unmapped memory, process gone).
    fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Reads a native-endian `u64`.
    fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact_at(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
}

/// The C library, whose DTV layout differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libc {
    /// GNU libc: DTV entries of 16 bytes, capacity at `dtv[-1]`.
    Glibc,
    /// musl: DTV entries of 8 bytes, count at `dtv[0]`.
    Musl,
    /// No C library: a static executable that brings its own start code (and so has
    /// no DTV).
    None,
}

/// Where a C library keeps a thread's dynamic thread vector (DTV) and how it is laid
/// out: the one description the resolver walks and the eBPF sampler's program is
/// configured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtvLayout {
    /// The DTV pointer is the word at the thread pointer plus this.
    pub pointer_at: i64,
    /// log2 of the size of one entry: `dtv[module_id]` is at `dtv + (module_id << shift)`.
    pub entry_shift: u32,
    /// The bound (glibc's capacity, musl's module count) is the word at `dtv` plus
    /// this; a module id above it has no entry yet.
    pub bound_at: i64,
}

impl Libc {
    /// Guesses the C library from the paths of the loaded modules (glibc unless a musl
    /// loader or libc is mapped). Static executables map neither: see
    /// [`of_modules`](Self::of_modules).
    pub fn detect<'a>(paths: impl IntoIterator<Item = &'a str>) -> Self {
        let musl = paths.into_iter().any(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            // Alpine maps `ld-musl-<arch>.so.1`; Debian's musl-tools resolve that
            // symlink to `.../<triple>-musl/libc.so`.
            name.starts_with("ld-musl-")
                || name.starts_with("libc.musl-")
                || (name == "libc.so" && p.contains("musl"))
        });
        if musl {
            Self::Musl
        } else {
            Self::Glibc
        }
    }

    /// The C library of a process from its modules: by the paths mapped
    /// ([`detect`](Self::detect)), and for a static executable (no `PT_INTERP`) by what
    /// its file says: glibc's start files leave a `NT_GNU_ABI_TAG` note, musl's do not,
    /// and a program with neither note nor `__libc_start_main` has no C library.
    pub fn of_modules(modules: &[LoadedModule]) -> Self {
        if let Some(main) = modules.iter().find(|m| m.is_main) {
            if !main.elf.has_interpreter && modules.len() == 1 {
                return if main.elf.gnu_abi_tag {
                    Self::Glibc
                } else if main.elf.libc_start {
                    Self::Musl
                } else {
                    Self::None
                };
            }
        }
        Self::detect(modules.iter().map(|m| m.path.as_str()))
    }

    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Glibc => "glibc",
            Self::Musl => "musl",
            Self::None => "none",
        }
    }

    /// The DTV layout of this C library on `machine`; `None` without a C library.
    pub const fn dtv_layout(self, machine: Machine) -> Option<DtvLayout> {
        let pointer_at = match (self, machine) {
            // tcbhead_t { void *tcb; dtv_t *dtv; ... } at the thread pointer; musl's
            // struct pthread has its dtv pointer in the same place.
            (Self::Glibc | Self::Musl, Machine::X86_64) => 8,
            // tcbhead_t { dtv_t *dtv; void *private; } at the thread pointer.
            (Self::Glibc, Machine::Aarch64) => 0,
            // struct pthread ends with `uintptr_t *dtv` just below the thread pointer.
            (Self::Musl, Machine::Aarch64) => -8,
            (Self::None, _) => return None,
        };
        let (entry_shift, bound_at) = match self {
            // 16-byte entries; dtv[-1] holds the number of entries, dtv[0] the generation.
            Self::Glibc => (4, -16),
            // 8-byte entries; dtv[0] holds the number of modules.
            _ => (3, 0),
        };
        Some(DtvLayout {
            pointer_at,
            entry_shift,
            bound_at,
        })
    }
}

/// A module mapped in the target.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    /// Path as shown in `/proc/<pid>/maps`.
    pub path: String,
    /// Load bias: runtime address minus link-time address.
    pub bias: u64,
    /// Whether this is the main executable (module id 1, local exec possible).
    pub is_main: bool,
    /// What its ELF file says.
    pub elf: Arc<ElfTls>,
}

/// The access model the reader used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessModel {
    /// The executable defines the variable and its code was relaxed to local exec.
    LocalExec,
    /// A `TPOFF64` GOT entry.
    InitialExec,
    /// TLSDESC, resolved by the static resolver (variable in static TLS).
    TlsDescStatic,
    /// TLSDESC, resolved by the dynamic resolver (variable reached through the DTV).
    TlsDescDynamic,
    /// Legacy general dynamic (`DTPMOD64` + `DTPOFF64`), through the DTV.
    GeneralDynamic,
}

impl AccessModel {
    /// The name used in reports and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Self::LocalExec => "local-exec",
            Self::InitialExec => "initial-exec",
            Self::TlsDescStatic => "tlsdesc-static",
            Self::TlsDescDynamic => "tlsdesc-dynamic",
            Self::GeneralDynamic => "general-dynamic",
        }
    }
}

/// Where the slot is, relative to something every thread has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotLocation {
    /// `slot = thread pointer + offset`, for every thread.
    TpOffset(i64),
    /// `slot = dtv[module_id] + offset`, in each thread's DTV.
    Dtv {
        /// TLS module id (1 is the executable).
        module_id: u64,
        /// Offset of the variable inside the module's TLS block.
        offset: u64,
    },
}

/// The outcome of resolution for one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The module whose code (and relocation) was used.
    pub module: String,
    /// The module defining the variable.
    pub defining_module: String,
    /// Where the symbol was found in the defining module.
    pub symbol_table: SymbolTable,
    /// The access model.
    pub model: AccessModel,
    /// How to find a thread's slot.
    pub location: SlotLocation,
    /// The C library assumed for DTV lookups.
    pub libc: Libc,
    /// The architecture.
    pub machine: Machine,
}

/// Why the slot cannot be found.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// No module has `otel_thread_ctx_v1` in `.dynsym` or `.symtab`.
    SymbolNotFound,
    /// The symbol exists but is not `STT_TLS`.
    NotTls {
        /// Module.
        module: String,
        /// Its `st_info` type.
        kind: u8,
    },
    /// The defining module has no `PT_TLS` segment.
    NoTlsSegment {
        /// Module.
        module: String,
    },
    /// Only the local-dynamic model reaches the variable, which the spec excludes.
    LocalDynamicUnsupported {
        /// Module.
        module: String,
    },
    /// The variable is defined in a shared library, but no relocation reaches it.
    NoAccess {
        /// Module.
        module: String,
    },
    /// A TLSDESC or DTV entry holds values no C library produces.
    Inconsistent {
        /// What was wrong.
        what: String,
    },
    /// Reading the target's memory failed.
    Memory {
        /// What was being read.
        what: &'static str,
        /// Address.
        addr: u64,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SymbolNotFound => write!(
                f,
                "no loaded module exports otel_thread_ctx_v1: the process publishes no thread context"
            ),
            Self::NotTls { module, kind } => write!(
                f,
                "otel_thread_ctx_v1 in {module} is symbol type {kind}, not STT_TLS (6)"
            ),
            Self::NoTlsSegment { module } => {
                write!(f, "{module} defines otel_thread_ctx_v1 but has no PT_TLS segment")
            }
            Self::LocalDynamicUnsupported { module } => write!(
                f,
                "{module} reaches otel_thread_ctx_v1 only through the local-dynamic TLS model, \
                 which the thread-context spec does not support; build it with \
                 -mtls-dialect=gnu2 (TLSDESC) or general dynamic"
            ),
            Self::NoAccess { module } => write!(
                f,
                "{module} defines otel_thread_ctx_v1 but no TLSDESC, general-dynamic or \
                 initial-exec relocation reaches it"
            ),
            Self::Inconsistent { what } => write!(f, "inconsistent TLS data: {what}"),
            Self::Memory { what, addr, source } => {
                write!(f, "cannot read {what} at {addr:#x} in the target: {source}")
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Memory { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn read_u64(mem: &dyn TargetMemory, what: &'static str, addr: u64) -> Result<u64, TlsError> {
    mem.read_u64(addr)
        .map_err(|source| TlsError::Memory { what, addr, source })
}

const fn round_up(value: u64, align: u64) -> u64 {
    let align = if align == 0 { 1 } else { align };
    value.div_ceil(align).saturating_mul(align)
}

/// Code of the static TLSDESC resolvers (glibc `_dl_tlsdesc_return`, musl
/// `__tlsdesc_static`): return the argument word. Both libcs emit the same body; a
/// landing pad may come first (`endbr64`; on aarch64 `bti c`, or the `nop` glibc puts in
/// its place when built without branch protection).
fn is_static_resolver(machine: Machine, mem: &dyn TargetMemory, entry: u64) -> bool {
    let (pads, body): (&[[u8; 4]], &[u8]) = match machine {
        // mov 0x8(%rax),%rax ; ret
        Machine::X86_64 => (&[[0xf3, 0x0f, 0x1e, 0xfa]], &[0x48, 0x8b, 0x40, 0x08, 0xc3]),
        // ldr x0, [x0, #8] ; ret
        Machine::Aarch64 => (
            &[[0x5f, 0x24, 0x03, 0xd5], [0x1f, 0x20, 0x03, 0xd5]],
            &[0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6],
        ),
    };
    let mut code = [0u8; 12];
    let code = &mut code[..4 + body.len()];
    if mem.read_exact_at(entry, &mut code[..body.len()]).is_ok() && &code[..body.len()] == body {
        return true;
    }
    mem.read_exact_at(entry, code).is_ok()
        && pads.iter().any(|pad| code[..4] == pad[..])
        && &code[4..] == body
}

/// Module ids are small indexes; anything larger is not a module id.
const MAX_MODULE_ID: u64 = 1 << 20;

fn dtv_pair(
    mem: &dyn TargetMemory,
    what: &'static str,
    addr: u64,
) -> Result<SlotLocation, TlsError> {
    let module_id = read_u64(mem, what, addr)?;
    let offset = read_u64(mem, what, addr.wrapping_add(8))?;
    if module_id == 0 || module_id > MAX_MODULE_ID {
        return Err(TlsError::Inconsistent {
            what: format!("{what} at {addr:#x} holds module id {module_id}"),
        });
    }
    Ok(SlotLocation::Dtv { module_id, offset })
}

/// Chooses the module and relocation, and reads what the dynamic linker filled in, for
/// the [`defining_module`].
pub fn resolve(
    modules: &[LoadedModule],
    libc: Libc,
    mem: &dyn TargetMemory,
) -> Result<Resolution, TlsError> {
    let defining = defining_module(modules).ok_or(TlsError::SymbolNotFound)?;
    resolve_for(defining, modules, libc, mem)
}

/// The module whose definition of the variable readers use: one whose `.dynsym` defines
/// it (the executable first), falling back to a `.symtab` definition.
pub fn defining_module(modules: &[LoadedModule]) -> Option<&LoadedModule> {
    modules
        .iter()
        .filter(|m| m.elf.defines_symbol())
        .min_by_key(|m| {
            let table = m.elf.symbol.map(|s| s.table);
            (table != Some(SymbolTable::Dynsym), !m.is_main)
        })
}

/// Like [`resolve`], for the variable defined by `defining` (one of `modules`), when a
/// process has several definitions.
pub fn resolve_for(
    defining: &LoadedModule,
    modules: &[LoadedModule],
    libc: Libc,
    mem: &dyn TargetMemory,
) -> Result<Resolution, TlsError> {
    let symbol = defining.elf.symbol.ok_or(TlsError::SymbolNotFound)?;
    if !symbol.is_tls() {
        return Err(TlsError::NotTls {
            module: defining.path.clone(),
            kind: symbol.kind,
        });
    }
    let segment = defining
        .elf
        .tls_segment
        .ok_or_else(|| TlsError::NoTlsSegment {
            module: defining.path.clone(),
        })?;
    let machine = defining.elf.machine;
    let done = |user: &LoadedModule, model, location| Resolution {
        module: user.path.clone(),
        defining_module: defining.path.clone(),
        symbol_table: symbol.table,
        model,
        location,
        libc,
        machine,
    };

    // The executable's own accesses are relaxed to local exec by the linker: its block
    // sits at a fixed distance from the thread pointer.
    if defining.is_main && defining.elf.relocs.is_empty() {
        // Values come from the file and may be anything: the arithmetic wraps, as the
        // CPU's does, and a nonsensical address fails later as unreadable memory.
        let offset = match machine {
            // Variant II: the block ends at the thread pointer.
            Machine::X86_64 => {
                (symbol.value as i64).wrapping_sub(round_up(segment.memsz, segment.align) as i64)
            }
            // Variant I: a 16-byte TCB, then the block, aligned.
            Machine::Aarch64 => {
                (round_up(16, segment.align) as i64).wrapping_add(symbol.value as i64)
            }
        };
        return Ok(done(
            defining,
            AccessModel::LocalExec,
            SlotLocation::TpOffset(offset),
        ));
    }

    // Otherwise a relocation: the defining module's own first, then any module that
    // references the variable. TLSDESC is preferred, as the spec prefers it.
    let users = std::iter::once(defining).chain(modules.iter().filter(|m| {
        !std::ptr::eq(*m, defining) && m.elf.symbol.is_some() && !m.elf.defines_symbol()
    }));
    let mut best = None;
    for user in users {
        for reloc in &user.elf.relocs {
            let rank = match reloc.kind {
                Relocated::TlsDesc => 0,
                Relocated::GeneralDynamic => 1,
                Relocated::InitialExec => 2,
            };
            if best.is_none_or(|(r, _, _)| rank < r) {
                best = Some((rank, user, *reloc));
            }
        }
        if best.is_some() {
            break;
        }
    }
    let Some((_, user, reloc)) = best else {
        return Err(if defining.elf.local_dynamic {
            TlsError::LocalDynamicUnsupported {
                module: defining.path.clone(),
            }
        } else {
            TlsError::NoAccess {
                module: defining.path.clone(),
            }
        });
    };
    let got = user.bias.wrapping_add(reloc.got_vaddr);
    match reloc.kind {
        Relocated::InitialExec => {
            let offset = read_u64(mem, "the initial-exec GOT entry", got)? as i64;
            Ok(done(
                user,
                AccessModel::InitialExec,
                SlotLocation::TpOffset(offset),
            ))
        }
        Relocated::GeneralDynamic => {
            let location = dtv_pair(mem, "the general-dynamic GOT pair", got)?;
            Ok(done(user, AccessModel::GeneralDynamic, location))
        }
        Relocated::TlsDesc => {
            let entry = read_u64(mem, "the TLSDESC resolver entry", got)?;
            let arg = read_u64(mem, "the TLSDESC argument", got.wrapping_add(8))?;
            if is_static_resolver(machine, mem, entry) {
                Ok(done(
                    user,
                    AccessModel::TlsDescStatic,
                    SlotLocation::TpOffset(arg as i64),
                ))
            } else {
                // glibc's argument is `{ {module, offset}, generation }`, musl's
                // `{module, offset}`: the first two words agree.
                let location = dtv_pair(mem, "the TLSDESC dynamic argument", arg)?;
                Ok(done(user, AccessModel::TlsDescDynamic, location))
            }
        }
    }
}

impl Resolution {
    /// The address of the slot for the thread whose thread pointer is `tp`, or `None`
    /// when that thread has no TLS block for the module yet (no context).
    pub fn slot_address(&self, tp: u64, mem: &dyn TargetMemory) -> Result<Option<u64>, TlsError> {
        match self.location {
            SlotLocation::TpOffset(offset) => Ok(Some(tp.wrapping_add(offset as u64))),
            SlotLocation::Dtv { module_id, offset } => {
                let Some(block) = dtv_block(self.libc, self.machine, tp, module_id, mem)? else {
                    return Ok(None);
                };
                Ok(Some(block.wrapping_add(offset)))
            }
        }
    }
}

/// `dtv[module_id]` of the thread at `tp`, bounds-checked; `None` when not allocated.
fn dtv_block(
    libc: Libc,
    machine: Machine,
    tp: u64,
    module_id: u64,
    mem: &dyn TargetMemory,
) -> Result<Option<u64>, TlsError> {
    let Some(layout) = libc.dtv_layout(machine) else {
        // No C library, no DTV: the module has no dynamic TLS block.
        return Ok(None);
    };
    let dtv_at = tp.wrapping_add(layout.pointer_at as u64);
    let dtv = read_u64(mem, "the thread's DTV pointer", dtv_at)?;
    if dtv == 0 {
        return Ok(None);
    }
    let bound = read_u64(
        mem,
        "the DTV bound",
        dtv.wrapping_add(layout.bound_at as u64),
    )?;
    if module_id > bound {
        return Ok(None);
    }
    let Some(entry_at) = module_id
        .checked_shl(layout.entry_shift)
        .map(|at| dtv.wrapping_add(at))
    else {
        return Ok(None);
    };
    let block = read_u64(mem, "a DTV entry", entry_at)?;
    // glibc marks an entry not yet allocated with -1; 0 means never set.
    Ok((block != 0 && block != u64::MAX).then_some(block))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::elf::{SymbolInfo, TlsReloc, TlsSegment};
    use super::*;

    /// Sparse fake target memory: 8-byte words and code bytes at chosen addresses.
    #[derive(Default)]
    struct Fake(BTreeMap<u64, u8>);

    impl Fake {
        fn word(mut self, addr: u64, value: u64) -> Self {
            self = self.bytes(addr, &value.to_ne_bytes());
            self
        }
        fn bytes(mut self, addr: u64, bytes: &[u8]) -> Self {
            for (i, b) in bytes.iter().enumerate() {
                self.0.insert(addr + i as u64, *b);
            }
            self
        }
    }

    impl TargetMemory for Fake {
        fn read_exact_at(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *self
                    .0
                    .get(&(addr + i as u64))
                    .ok_or_else(|| io::Error::from_raw_os_error(14))?;
            }
            Ok(())
        }
    }

    fn module(machine: Machine, is_main: bool, relocs: Vec<TlsReloc>, value: u64) -> LoadedModule {
        LoadedModule {
            path: if is_main { "/bin/app" } else { "/lib/libw.so" }.into(),
            bias: 0x10_0000,
            is_main,
            elf: Arc::new(ElfTls {
                machine,
                is_fixed_address: false,
                first_load: (0, 0),
                tls_segment: Some(TlsSegment {
                    vaddr: 0x3000,
                    memsz: 65,
                    align: 64,
                }),
                symbol: Some(SymbolInfo {
                    table: SymbolTable::Dynsym,
                    defined: true,
                    value,
                    size: 8,
                    kind: object::elf::STT_TLS,
                    binding: object::elf::STB_GLOBAL,
                }),
                relocs,
                local_dynamic: false,
                has_interpreter: true,
                gnu_abi_tag: true,
                libc_start: false,
            }),
        }
    }

    #[test]
    fn local_exec_rounds_up_to_alignment() {
        let fake = Fake::default();
        let m = [module(Machine::X86_64, true, vec![], 8)];
        let r = resolve(&m, Libc::Glibc, &fake).unwrap();
        // memsz 65 rounded up to 128: slot = tp - 128 + 8.
        assert_eq!(r.location, SlotLocation::TpOffset(8 - 128));
        let m = [module(Machine::Aarch64, true, vec![], 8)];
        let r = resolve(&m, Libc::Glibc, &fake).unwrap();
        // TCB of 16 rounded up to the 64 alignment: slot = tp + 64 + 8.
        assert_eq!(r.location, SlotLocation::TpOffset(64 + 8));
        assert_eq!(r.slot_address(0x1000, &fake).unwrap(), Some(0x1000 + 72));
    }

    fn desc(machine: Machine, entry_code: &[u8], pad: &[u8]) -> (Resolution, Fake) {
        let got = 0x2000;
        let fake = Fake::default()
            .word(0x10_0000 + got, 0x7000)
            .word(0x10_0000 + got + 8, 0x9000)
            .bytes(0x7000, pad)
            .bytes(0x7000 + pad.len() as u64, entry_code)
            // A dynamic argument: {module 3, offset 16}.
            .word(0x9000, 3)
            .word(0x9008, 16);
        let m = [module(
            machine,
            false,
            vec![TlsReloc {
                kind: Relocated::TlsDesc,
                got_vaddr: got,
            }],
            0,
        )];
        (resolve(&m, Libc::Glibc, &fake).unwrap(), fake)
    }

    #[test]
    fn tlsdesc_static_resolver_is_recognised_by_code() {
        let x86 = [0x48, 0x8b, 0x40, 0x08, 0xc3];
        let arm = [0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6];
        for (machine, code, pad) in [
            (Machine::X86_64, &x86[..], &[][..]),
            (Machine::X86_64, &x86[..], &[0xf3, 0x0f, 0x1e, 0xfa][..]),
            (Machine::Aarch64, &arm[..], &[][..]),
            (Machine::Aarch64, &arm[..], &[0x5f, 0x24, 0x03, 0xd5][..]),
            (Machine::Aarch64, &arm[..], &[0x1f, 0x20, 0x03, 0xd5][..]),
        ] {
            let (r, _) = desc(machine, code, pad);
            assert_eq!(r.model, AccessModel::TlsDescStatic, "{machine:?} {pad:x?}");
            assert_eq!(r.location, SlotLocation::TpOffset(0x9000));
        }
        // Any other resolver is the dynamic one: its argument points at {module, offset}.
        let (r, _) = desc(Machine::X86_64, &[0x48, 0x8b, 0x40, 0x08, 0x52], &[]);
        assert_eq!(r.model, AccessModel::TlsDescDynamic);
        assert_eq!(
            r.location,
            SlotLocation::Dtv {
                module_id: 3,
                offset: 16
            }
        );
    }

    fn dtv_resolution(libc: Libc, machine: Machine) -> Resolution {
        Resolution {
            module: "/lib/libw.so".into(),
            defining_module: "/lib/libw.so".into(),
            symbol_table: SymbolTable::Dynsym,
            model: AccessModel::GeneralDynamic,
            location: SlotLocation::Dtv {
                module_id: 2,
                offset: 16,
            },
            libc,
            machine,
        }
    }

    #[test]
    fn glibc_dtv_lookup_with_bounds() {
        let tp = 0x5000;
        let dtv = 0x8010;
        for (machine, dtv_at) in [(Machine::X86_64, tp + 8), (Machine::Aarch64, tp)] {
            let r = dtv_resolution(Libc::Glibc, machine);
            let base = Fake::default().word(dtv_at, dtv).word(dtv - 16, 4);
            let fake = base.word(dtv + 32, 0xa000);
            assert_eq!(r.slot_address(tp, &fake).unwrap(), Some(0xa010));
            // Not yet allocated for this thread.
            let fake = Fake::default()
                .word(dtv_at, dtv)
                .word(dtv - 16, 4)
                .word(dtv + 32, u64::MAX);
            assert_eq!(r.slot_address(tp, &fake).unwrap(), None);
            // The DTV is too short to hold module 2.
            let fake = Fake::default().word(dtv_at, dtv).word(dtv - 16, 1);
            assert_eq!(r.slot_address(tp, &fake).unwrap(), None);
        }
    }

    #[test]
    fn musl_dtv_lookup_with_bounds() {
        let tp = 0x5000;
        let dtv = 0x8000;
        for (machine, dtv_at) in [(Machine::X86_64, tp + 8), (Machine::Aarch64, tp - 8)] {
            let r = dtv_resolution(Libc::Musl, machine);
            let fake = Fake::default()
                .word(dtv_at, dtv)
                .word(dtv, 2)
                .word(dtv + 16, 0xa000);
            assert_eq!(r.slot_address(tp, &fake).unwrap(), Some(0xa010));
            let fake = Fake::default().word(dtv_at, dtv).word(dtv, 1);
            assert_eq!(r.slot_address(tp, &fake).unwrap(), None);
        }
    }

    #[test]
    fn a_module_that_only_references_the_variable() {
        let definer = module(Machine::X86_64, false, vec![], 0);
        let mut user = module(
            Machine::X86_64,
            false,
            vec![TlsReloc {
                kind: Relocated::InitialExec,
                got_vaddr: 0x100,
            }],
            0,
        );
        user.path = "/lib/libuser.so".into();
        let elf = Arc::make_mut(&mut user.elf);
        if let Some(symbol) = elf.symbol.as_mut() {
            symbol.defined = false;
        }
        let fake = Fake::default().word(0x10_0100, (-48i64) as u64);
        let r = resolve(&[definer, user], Libc::Glibc, &fake).unwrap();
        assert_eq!(r.model, AccessModel::InitialExec);
        assert_eq!(r.module, "/lib/libuser.so");
        assert_eq!(r.defining_module, "/lib/libw.so");
        assert_eq!(r.location, SlotLocation::TpOffset(-48));
    }

    #[test]
    fn errors_name_the_problem() {
        let fake = Fake::default();
        assert!(matches!(
            resolve(&[], Libc::Glibc, &fake),
            Err(TlsError::SymbolNotFound)
        ));
        let lib = module(Machine::X86_64, false, vec![], 0);
        assert!(matches!(
            resolve(std::slice::from_ref(&lib), Libc::Glibc, &fake),
            Err(TlsError::NoAccess { .. })
        ));
        // A GOT entry in unmapped memory.
        let lib = module(
            Machine::X86_64,
            false,
            vec![TlsReloc {
                kind: Relocated::InitialExec,
                got_vaddr: 0x40,
            }],
            0,
        );
        let err = resolve(&[lib], Libc::Glibc, &fake).unwrap_err();
        assert!(err.to_string().contains("initial-exec GOT entry"), "{err}");
        assert_eq!(
            Libc::detect(["/usr/lib/x86_64-linux-musl/libc.so"]),
            Libc::Musl
        );
        assert_eq!(Libc::detect(["/lib/ld-musl-aarch64.so.1"]), Libc::Musl);
        assert_eq!(
            Libc::detect(["/lib/x86_64-linux-gnu/libc.so.6"]),
            Libc::Glibc
        );
    }
}
