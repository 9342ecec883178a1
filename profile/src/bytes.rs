//! Section bytes a module owns and shares without copying (with the unwinder, with
//! gimli), and the DWARF types read over them.

use std::ops::Deref;
use std::sync::Arc;

/// The gimli reader of a module's DWARF: section bytes owned by the module.
pub(crate) type DwarfReader = gimli::EndianArcSlice<gimli::LittleEndian>;

/// Section bytes owned by a module and shared, without copying, with the unwinder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bytes(Arc<[u8]>);

impl Bytes {
    pub fn new(bytes: Arc<[u8]>) -> Self {
        Self(bytes)
    }

    pub fn into_arc(self) -> Arc<[u8]> {
        self.0
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}
