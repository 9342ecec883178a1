//! Why a payload does not decode, or does not encode.

use core::fmt;

/// The protobuf message a problem was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// `ProcessContext`.
    ProcessContext,
    /// `Resource`.
    Resource,
    /// `KeyValue`.
    KeyValue,
    /// `AnyValue`.
    AnyValue,
    /// `ArrayValue`.
    ArrayValue,
    /// `KeyValueList`.
    KeyValueList,
}

impl Message {
    /// The message's protobuf name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ProcessContext => "ProcessContext",
            Self::Resource => "Resource",
            Self::KeyValue => "KeyValue",
            Self::AnyValue => "AnyValue",
            Self::ArrayValue => "ArrayValue",
            Self::KeyValueList => "KeyValueList",
        }
    }
}

/// Why a payload does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The payload is larger than [`Limits::max_payload_size`](super::Limits::max_payload_size).
    PayloadTooLarge {
        /// Payload size.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The bytes end inside a tag, value or length-delimited field.
    Truncated,
    /// A varint runs past 10 bytes.
    OverlongVarint,
    /// Wire type 3, 4 (groups), 6 or 7.
    InvalidWireType {
        /// The wire type found.
        wire_type: u8,
    },
    /// Field number 0, or a tag too large for a field number.
    InvalidFieldNumber,
    /// A known field with a wire type its schema type does not allow.
    WrongWireType {
        /// Message holding the field.
        message: Message,
        /// Field number.
        field: u32,
        /// Wire type found.
        wire_type: u8,
    },
    /// A `string` field is not UTF-8.
    InvalidUtf8 {
        /// Message holding the field.
        message: Message,
        /// Field number.
        field: u32,
    },
    /// `AnyValue`s nest deeper than [`Limits::max_depth`](super::Limits::max_depth).
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// More key-value pairs and array elements than
    /// [`Limits::max_attributes`](super::Limits::max_attributes).
    TooManyAttributes {
        /// The limit in force.
        limit: usize,
    },
}

impl DecodeError {
    /// The language-neutral error kind used in `spec-vectors/`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::Truncated => "truncated",
            Self::OverlongVarint => "overlong_varint",
            Self::InvalidWireType { .. } => "invalid_wire_type",
            Self::InvalidFieldNumber => "invalid_field_number",
            Self::WrongWireType { .. } => "wrong_wire_type",
            Self::InvalidUtf8 { .. } => "invalid_utf8",
            Self::TooDeep { .. } => "too_deep",
            Self::TooManyAttributes { .. } => "too_many_attributes",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PayloadTooLarge { size, limit } => {
                write!(f, "payload of {size} bytes is over the {limit}-byte limit")
            }
            Self::Truncated => f.write_str("payload truncated: it ends inside a field"),
            Self::OverlongVarint => f.write_str("varint longer than 10 bytes"),
            Self::InvalidWireType { wire_type } => {
                write!(f, "invalid or unsupported protobuf wire type {wire_type}")
            }
            Self::InvalidFieldNumber => f.write_str("invalid protobuf field number"),
            Self::WrongWireType {
                message,
                field,
                wire_type,
            } => write!(
                f,
                "{}.{field} has wire type {wire_type}, which its type does not allow",
                message.name()
            ),
            Self::InvalidUtf8 { message, field } => {
                write!(f, "{}.{field} is a string but not UTF-8", message.name())
            }
            Self::TooDeep { limit } => write!(f, "values nest deeper than {limit} levels"),
            Self::TooManyAttributes { limit } => {
                write!(f, "more than {limit} attributes and array elements")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

impl From<micropb::DecodeError<core::convert::Infallible>> for DecodeError {
    fn from(e: micropb::DecodeError<core::convert::Infallible>) -> Self {
        match e {
            micropb::DecodeError::VarIntLimit => Self::OverlongVarint,
            micropb::DecodeError::Deprecation => Self::InvalidWireType { wire_type: 3 },
            micropb::DecodeError::UnknownWireType => Self::InvalidWireType { wire_type: 6 },
            micropb::DecodeError::ZeroField => Self::InvalidFieldNumber,
            _ => Self::Truncated,
        }
    }
}

/// Why a payload could not be encoded. The buffer may have been written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The buffer is smaller than the encoded payload.
    BufferTooSmall {
        /// Bytes the payload needs
        /// ([`ProcessContext::encoded_len`](super::ProcessContext::encoded_len)).
        needed: usize,
        /// Bytes in the buffer.
        available: usize,
    },
}

impl EncodeError {
    /// The language-neutral error kind.
    pub const fn kind(&self) -> &'static str {
        "buffer_too_small"
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::BufferTooSmall { needed, available } = self;
        write!(
            f,
            "payload needs {needed} bytes, the buffer has {available}"
        )
    }
}

impl core::error::Error for EncodeError {}
