//! The protobuf wire format as the payload uses it: wire types, the schema's field
//! numbers, and the fields of one message read off the wire.

use micropb::{PbDecoder, Tag};

use super::{DecodeError, Message};

pub(super) const WIRE_VARINT: u8 = 0;
pub(super) const WIRE_I64: u8 = 1;
pub(super) const WIRE_LEN: u8 = 2;
pub(super) const WIRE_I32: u8 = 5;

// Field numbers, from the schema in the module documentation of `proto`.
pub(super) const PC_RESOURCE: u32 = 1;
pub(super) const PC_ATTRIBUTES: u32 = 2;
pub(super) const RESOURCE_ATTRIBUTES: u32 = 1;
pub(super) const KV_KEY: u32 = 1;
pub(super) const KV_VALUE: u32 = 2;
pub(super) const AV_STRING: u32 = 1;
pub(super) const AV_BOOL: u32 = 2;
pub(super) const AV_INT: u32 = 3;
pub(super) const AV_DOUBLE: u32 = 4;
pub(super) const AV_ARRAY: u32 = 5;
pub(super) const AV_KVLIST: u32 = 6;
pub(super) const AV_BYTES: u32 = 7;
pub(super) const LIST_VALUES: u32 = 1;

/// One field read off the wire.
#[derive(Clone, Copy, Debug)]
pub(super) enum Wire<'a> {
    Varint(u64),
    I64(u64),
    I32,
    Len(&'a [u8]),
}

impl Wire<'_> {
    pub(super) const fn wire_type(&self) -> u8 {
        match self {
            Self::Varint(_) => WIRE_VARINT,
            Self::I64(_) => WIRE_I64,
            Self::I32 => WIRE_I32,
            Self::Len(_) => WIRE_LEN,
        }
    }
}

/// The fields of one message, in wire order.
#[derive(Clone, Debug)]
pub(super) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(super) const fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(super) fn next_field(&mut self) -> Result<Option<(u32, Wire<'a>)>, DecodeError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let mut dec = PbDecoder::new(self.rest);
        let tag = dec.decode_varint64()?;
        let tag = u32::try_from(tag).map_err(|_| DecodeError::InvalidFieldNumber)?;
        let tag = Tag::from_parts(tag >> 3, (tag & 7) as u8);
        if tag.field_num() == 0 {
            return Err(DecodeError::InvalidFieldNumber);
        }
        let wire = match tag.wire_type() {
            WIRE_VARINT => Wire::Varint(dec.decode_varint64()?),
            WIRE_I64 => Wire::I64(dec.decode_fixed64()?),
            WIRE_I32 => {
                dec.skip_bytes(4)?;
                Wire::I32
            }
            WIRE_LEN => {
                let len = dec.decode_varint64()?;
                let rest: &'a [u8] = dec.as_reader();
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= rest.len())
                    .ok_or(DecodeError::Truncated)?;
                dec.skip_bytes(len)?;
                Wire::Len(&rest[..len])
            }
            wire_type => return Err(DecodeError::InvalidWireType { wire_type }),
        };
        self.rest = dec.into_reader();
        Ok(Some((tag.field_num(), wire)))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Wire<'a>);

    /// Iteration over already-validated bytes: an error cannot occur there, and ends the
    /// iteration if it ever did.
    fn next(&mut self) -> Option<Self::Item> {
        self.next_field().ok().flatten()
    }
}

pub(super) fn expect_len(
    message: Message,
    field: u32,
    wire: Wire<'_>,
) -> Result<&[u8], DecodeError> {
    match wire {
        Wire::Len(b) => Ok(b),
        other => Err(DecodeError::WrongWireType {
            message,
            field,
            wire_type: other.wire_type(),
        }),
    }
}

pub(super) fn expect_wire(
    message: Message,
    field: u32,
    wire: Wire<'_>,
    want: u8,
) -> Result<(), DecodeError> {
    if wire.wire_type() == want {
        Ok(())
    } else {
        Err(DecodeError::WrongWireType {
            message,
            field,
            wire_type: wire.wire_type(),
        })
    }
}

pub(super) fn expect_str(
    message: Message,
    field: u32,
    wire: Wire<'_>,
) -> Result<&str, DecodeError> {
    core::str::from_utf8(expect_len(message, field, wire)?)
        .map_err(|_| DecodeError::InvalidUtf8 { message, field })
}
