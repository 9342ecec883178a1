//! The instruction sets a profile unwinds.

/// The instruction set a profile unwinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86_64: `rip`, `rsp`, `rbp`.
    X86_64,
    /// aarch64: `pc`, `sp`, `x29`, and `x30` (the link register).
    Aarch64,
}

impl Arch {
    /// The architecture this crate was built for, which is the one the reader samples.
    #[cfg(not(target_arch = "aarch64"))]
    pub const NATIVE: Self = Self::X86_64;
    /// The architecture this crate was built for, which is the one the reader samples.
    #[cfg(target_arch = "aarch64")]
    pub const NATIVE: Self = Self::Aarch64;

    /// Its name, as `uname -m` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }
}

impl Default for Arch {
    fn default() -> Self {
        Self::NATIVE
    }
}
