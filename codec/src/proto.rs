//! The payload: protobuf `opentelemetry.proto.processcontext.v1development.ProcessContext`.
//!
//! ```text
//! message ProcessContext { Resource resource = 1; repeated KeyValue attributes = 2; }
//! message Resource       { repeated KeyValue attributes = 1; ... }
//! message KeyValue       { string key = 1; AnyValue value = 2; }
//! message AnyValue       { oneof value { string string_value = 1; bool bool_value = 2;
//!                          int64 int_value = 3; double double_value = 4;
//!                          ArrayValue array_value = 5; KeyValueList kvlist_value = 6;
//!                          bytes bytes_value = 7; } }
//! message ArrayValue     { repeated AnyValue values = 1; }
//! message KeyValueList   { repeated KeyValue values = 1; }
//! ```
//!
//! Encoding writes from borrowed input ([`ProcessContext`]) into a caller's buffer, and,
//! with the `alloc` feature, from the owned model (`owned::OwnedProcessContext`): one
//! encoder serves both, so the same context gives the same bytes from either.
//! Decoding ([`ProcessContextView::decode`]) first walks the whole payload once, checking
//! every wire type, length, UTF-8 string, the nesting depth and the number of
//! attributes against [`Limits`]; the view then hands out iterators that borrow the
//! payload. Unknown fields are skipped. Groups (wire types 3 and 4, deprecated and never
//! part of this schema) are refused. Fields that occur more than once follow protobuf's
//! merge rules: the last scalar wins, and occurrences of a message field merge (so
//! `Resource` attributes and the elements of a repeated `array_value` concatenate).

use core::fmt;

use micropb::size::{sizeof_len_record, sizeof_varint32, sizeof_varint64};
use micropb::{PbDecoder, PbEncoder, Tag};

use crate::header::MAX_PAYLOAD_SIZE;

const WIRE_VARINT: u8 = 0;
const WIRE_I64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_I32: u8 = 5;

// Field numbers, from the schema above.
const PC_RESOURCE: u32 = 1;
const PC_ATTRIBUTES: u32 = 2;
const RESOURCE_ATTRIBUTES: u32 = 1;
const KV_KEY: u32 = 1;
const KV_VALUE: u32 = 2;
const AV_STRING: u32 = 1;
const AV_BOOL: u32 = 2;
const AV_INT: u32 = 3;
const AV_DOUBLE: u32 = 4;
const AV_ARRAY: u32 = 5;
const AV_KVLIST: u32 = 6;
const AV_BYTES: u32 = 7;
const LIST_VALUES: u32 = 1;

/// Bounds a decoder enforces on untrusted payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload accepted, in bytes.
    pub max_payload_size: usize,
    /// Deepest `AnyValue` nesting: a top-level attribute's value is at depth 1, an
    /// element of an array or kvlist inside it at depth 2, and so on.
    pub max_depth: usize,
    /// Most key-value pairs and array elements in the whole payload, at any depth.
    pub max_attributes: usize,
}

/// [`Limits::max_depth`] by default.
pub const DEFAULT_MAX_DEPTH: usize = 16;
/// [`Limits::max_attributes`] by default.
pub const DEFAULT_MAX_ATTRIBUTES: usize = 2048;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload_size: MAX_PAYLOAD_SIZE as usize,
            max_depth: DEFAULT_MAX_DEPTH,
            max_attributes: DEFAULT_MAX_ATTRIBUTES,
        }
    }
}

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
    /// The payload is larger than [`Limits::max_payload_size`].
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
    /// `AnyValue`s nest deeper than [`Limits::max_depth`].
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// More key-value pairs and array elements than [`Limits::max_attributes`].
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

/// One field read off the wire.
#[derive(Clone, Copy, Debug)]
enum Wire<'a> {
    Varint(u64),
    I64(u64),
    I32,
    Len(&'a [u8]),
}

impl Wire<'_> {
    const fn wire_type(&self) -> u8 {
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
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    const fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn next_field(&mut self) -> Result<Option<(u32, Wire<'a>)>, DecodeError> {
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

fn expect_len(message: Message, field: u32, wire: Wire<'_>) -> Result<&[u8], DecodeError> {
    match wire {
        Wire::Len(b) => Ok(b),
        other => Err(DecodeError::WrongWireType {
            message,
            field,
            wire_type: other.wire_type(),
        }),
    }
}

fn expect_wire(message: Message, field: u32, wire: Wire<'_>, want: u8) -> Result<(), DecodeError> {
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

fn expect_str(message: Message, field: u32, wire: Wire<'_>) -> Result<&str, DecodeError> {
    core::str::from_utf8(expect_len(message, field, wire)?)
        .map_err(|_| DecodeError::InvalidUtf8 { message, field })
}

/// The single validation walk; counts attributes and tracks depth.
struct Validator {
    limits: Limits,
    attributes: usize,
}

impl Validator {
    fn count(&mut self) -> Result<(), DecodeError> {
        self.attributes += 1;
        if self.attributes > self.limits.max_attributes {
            return Err(DecodeError::TooManyAttributes {
                limit: self.limits.max_attributes,
            });
        }
        Ok(())
    }

    fn process_context(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                PC_RESOURCE => self.resource(expect_len(Message::ProcessContext, field, wire)?)?,
                PC_ATTRIBUTES => {
                    self.count()?;
                    self.key_value(expect_len(Message::ProcessContext, field, wire)?, 1)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn resource(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            if field == RESOURCE_ATTRIBUTES {
                self.count()?;
                self.key_value(expect_len(Message::Resource, field, wire)?, 1)?;
            }
        }
        Ok(())
    }

    fn key_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), DecodeError> {
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                KV_KEY => {
                    expect_str(Message::KeyValue, field, wire)?;
                }
                KV_VALUE => self.any_value(expect_len(Message::KeyValue, field, wire)?, depth)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn any_value(&mut self, bytes: &[u8], depth: usize) -> Result<(), DecodeError> {
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        let m = Message::AnyValue;
        let mut fields = Fields::new(bytes);
        while let Some((field, wire)) = fields.next_field()? {
            match field {
                AV_STRING => {
                    expect_str(m, field, wire)?;
                }
                AV_BOOL | AV_INT => expect_wire(m, field, wire, WIRE_VARINT)?,
                AV_DOUBLE => expect_wire(m, field, wire, WIRE_I64)?,
                AV_BYTES => {
                    expect_len(m, field, wire)?;
                }
                AV_ARRAY => {
                    let mut inner = Fields::new(expect_len(m, field, wire)?);
                    while let Some((f, w)) = inner.next_field()? {
                        if f == LIST_VALUES {
                            self.count()?;
                            self.any_value(expect_len(Message::ArrayValue, f, w)?, depth + 1)?;
                        }
                    }
                }
                AV_KVLIST => {
                    let mut inner = Fields::new(expect_len(m, field, wire)?);
                    while let Some((f, w)) = inner.next_field()? {
                        if f == LIST_VALUES {
                            self.count()?;
                            self.key_value(expect_len(Message::KeyValueList, f, w)?, depth + 1)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A decoded `ProcessContext` that borrows the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessContextView<'a> {
    bytes: &'a [u8],
}

impl<'a> ProcessContextView<'a> {
    /// Validates `payload` completely against `limits`; the view cannot fail afterwards.
    pub fn decode(payload: &'a [u8], limits: &Limits) -> Result<Self, DecodeError> {
        if payload.len() > limits.max_payload_size {
            return Err(DecodeError::PayloadTooLarge {
                size: payload.len(),
                limit: limits.max_payload_size,
            });
        }
        Validator {
            limits: *limits,
            attributes: 0,
        }
        .process_context(payload)?;
        Ok(Self { bytes: payload })
    }

    /// The encoded payload.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `resource.attributes`, in wire order.
    pub fn resource(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        Fields::new(self.bytes)
            .filter_map(|(f, w)| match (f, w) {
                (PC_RESOURCE, Wire::Len(b)) => Some(b),
                _ => None,
            })
            .flat_map(|res| Fields::new(res).filter_map(key_value_field(RESOURCE_ATTRIBUTES)))
    }

    /// `attributes` (the extra attributes, field 2), in wire order.
    pub fn attributes(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        Fields::new(self.bytes).filter_map(key_value_field(PC_ATTRIBUTES))
    }

    /// The value of the last resource attribute named `key`.
    pub fn resource_value(&self, key: &str) -> Option<AnyValueView<'a>> {
        self.resource()
            .filter(|kv| kv.key == key)
            .last()
            .map(|kv| kv.value)
    }

    /// The value of the last extra attribute named `key`.
    pub fn attribute_value(&self, key: &str) -> Option<AnyValueView<'a>> {
        self.attributes()
            .filter(|kv| kv.key == key)
            .last()
            .map(|kv| kv.value)
    }
}

fn key_value_field<'a>(
    number: u32,
) -> impl Fn((u32, Wire<'a>)) -> Option<KeyValueView<'a>> + Clone {
    move |(f, w)| match (f, w) {
        (n, Wire::Len(b)) if n == number => Some(KeyValueView::from_validated(b)),
        _ => None,
    }
}

/// A decoded `KeyValue`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyValueView<'a> {
    /// The key.
    pub key: &'a str,
    /// The value.
    pub value: AnyValueView<'a>,
}

impl<'a> KeyValueView<'a> {
    fn from_validated(bytes: &'a [u8]) -> Self {
        // The last occurrence of `key` wins, as for any scalar field.
        let key = Fields::new(bytes)
            .filter_map(|(f, w)| match (f, w) {
                (KV_KEY, Wire::Len(b)) => Some(core::str::from_utf8(b).unwrap_or_default()),
                _ => None,
            })
            .last()
            .unwrap_or_default();
        // Every occurrence of `value` merges into one AnyValue.
        let value = AnyValueView::from_source(AnySource {
            outer: bytes,
            field: KV_VALUE,
        });
        Self { key, value }
    }
}

/// A decoded `AnyValue`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyValueView<'a> {
    /// No field of the oneof was set.
    Empty,
    /// `string_value`.
    String(&'a str),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(&'a [u8]),
    /// `array_value`.
    Array(ArrayView<'a>),
    /// `kvlist_value`.
    KvList(KvListView<'a>),
}

/// Where an `AnyValue`'s fields are: one message, or every occurrence of field `field`
/// of an outer message, which protobuf merges into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AnySource<'a> {
    outer: &'a [u8],
    /// 0 when `outer` is the AnyValue itself.
    field: u32,
}

impl<'a> AnySource<'a> {
    const fn single(bytes: &'a [u8]) -> Self {
        Self {
            outer: bytes,
            field: 0,
        }
    }

    /// The AnyValue's fields, across all its occurrences, in wire order.
    fn fields(self) -> impl Iterator<Item = (u32, Wire<'a>)> + Clone + 'a {
        let field = self.field;
        let (single, merged) = if field == 0 {
            (Some(self.outer), None)
        } else {
            (None, Some(self.outer))
        };
        let occurrences = merged.into_iter().flat_map(move |outer| {
            Fields::new(outer).filter_map(move |(f, w)| match w {
                Wire::Len(b) if f == field => Some(b),
                _ => None,
            })
        });
        single.into_iter().chain(occurrences).flat_map(Fields::new)
    }
}

impl<'a> AnyValueView<'a> {
    /// Applies protobuf's merge rules: the last member of the oneof wins; occurrences of
    /// the same message member in a row (`array_value`, `kvlist_value`) merge, so their
    /// elements concatenate.
    fn from_source(source: AnySource<'a>) -> Self {
        let mut value = Self::Empty;
        let mut member = 0;
        let mut run_start = 0;
        for (index, (f, w)) in source.fields().enumerate() {
            if !(AV_STRING..=AV_BYTES).contains(&f) {
                continue;
            }
            if f != member {
                member = f;
                run_start = index;
            }
            value = match (f, w) {
                (AV_STRING, Wire::Len(b)) => {
                    Self::String(core::str::from_utf8(b).unwrap_or_default())
                }
                (AV_BOOL, Wire::Varint(v)) => Self::Bool(v != 0),
                (AV_INT, Wire::Varint(v)) => Self::Int(v as i64),
                (AV_DOUBLE, Wire::I64(v)) => Self::Double(f64::from_bits(v)),
                (AV_ARRAY, Wire::Len(_)) => Self::Array(ArrayView {
                    source,
                    from: run_start,
                }),
                (AV_KVLIST, Wire::Len(_)) => Self::KvList(KvListView {
                    source,
                    from: run_start,
                }),
                (AV_BYTES, Wire::Len(b)) => Self::Bytes(b),
                _ => continue,
            };
        }
        value
    }

    /// The protobuf name of the value's type (`string`, `bool`, `int`, `double`,
    /// `bytes`, `array`, `kvlist`, or `empty`).
    pub const fn type_name(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::String(_) => "string",
            Self::Bool(_) => "bool",
            Self::Int(_) => "int",
            Self::Double(_) => "double",
            Self::Bytes(_) => "bytes",
            Self::Array(_) => "array",
            Self::KvList(_) => "kvlist",
        }
    }

    /// The string, if this is a `string_value`.
    pub const fn as_str(&self) -> Option<&'a str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// A decoded `ArrayValue` (all merged occurrences).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayView<'a> {
    source: AnySource<'a>,
    /// Index, among the AnyValue's fields, of the first `array_value` of the last run.
    from: usize,
}

/// The bodies of field `member` in the last run of that oneof member.
fn member_bodies<'a>(
    source: AnySource<'a>,
    from: usize,
    member: u32,
) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
    source
        .fields()
        .skip(from)
        .filter_map(move |(f, w)| match w {
            Wire::Len(b) if f == member => Some(b),
            _ => None,
        })
}

impl<'a> ArrayView<'a> {
    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = AnyValueView<'a>> + Clone + 'a {
        member_bodies(self.source, self.from, AV_ARRAY).flat_map(|body| {
            Fields::new(body).filter_map(|(f, w)| match (f, w) {
                (LIST_VALUES, Wire::Len(b)) => {
                    Some(AnyValueView::from_source(AnySource::single(b)))
                }
                _ => None,
            })
        })
    }
}

/// A decoded `KeyValueList` (all merged occurrences).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvListView<'a> {
    source: AnySource<'a>,
    from: usize,
}

impl<'a> KvListView<'a> {
    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = KeyValueView<'a>> + Clone + 'a {
        member_bodies(self.source, self.from, AV_KVLIST)
            .flat_map(|body| Fields::new(body).filter_map(key_value_field(LIST_VALUES)))
    }
}

/// A `ProcessContext` to encode, borrowing its contents.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessContext<'a> {
    /// `resource.attributes`: keys must be unique.
    pub resource: &'a [KeyValue<'a>],
    /// `attributes`: extra attributes, such as the `threadlocal.*` reference data.
    pub attributes: &'a [KeyValue<'a>],
}

/// A `KeyValue` to encode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyValue<'a> {
    /// The key.
    pub key: &'a str,
    /// The value.
    pub value: AnyValue<'a>,
}

/// An `AnyValue` to encode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyValue<'a> {
    /// `string_value`.
    String(&'a str),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(&'a [u8]),
    /// `array_value`.
    Array(&'a [AnyValue<'a>]),
    /// `kvlist_value`.
    KvList(&'a [KeyValue<'a>]),
    /// `array_value` whose elements are all `string_value`s (such as the attribute key
    /// map), without building an `AnyValue` per element.
    StringArray(&'a [&'a str]),
}

/// Why a payload could not be encoded. The buffer may have been written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The buffer is smaller than the encoded payload.
    BufferTooSmall {
        /// Bytes the payload needs ([`ProcessContext::encoded_len`]).
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

/// One `AnyValue` as the encoder sees it, whichever model holds it.
///
/// The borrowed model ([`AnyValue`]) and the owned one (`owned::OwnedValue`) each describe
/// their values through this, so a single encoder below writes both and their bytes cannot
/// drift apart; neither is first rebuilt as the other.
pub(crate) enum ValueRef<'v, V, K> {
    /// No member of the oneof: an `AnyValue` with no field, a zero-length message. Only
    /// the owned model can say this; the borrowed one has no empty value.
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    Empty,
    String(&'v str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'v [u8]),
    Array(&'v [V]),
    KvList(&'v [K]),
    /// An `array_value` of `string_value`s, without an `AnyValue` per element.
    StringArray(&'v [&'v str]),
}

/// Something that encodes as an `AnyValue`.
pub(crate) trait EncodeValue: Sized {
    /// What the value's `kvlist_value` entries are.
    type KeyValue: EncodeKeyValue<Value = Self>;

    /// The value, one level deep.
    fn value_ref(&self) -> ValueRef<'_, Self, Self::KeyValue>;
}

/// Something that encodes as a `KeyValue`.
pub(crate) trait EncodeKeyValue {
    /// What the value is.
    type Value: EncodeValue;

    /// The key.
    fn key(&self) -> &str;

    /// The value.
    fn value(&self) -> &Self::Value;
}

impl<'a> EncodeValue for AnyValue<'a> {
    type KeyValue = KeyValue<'a>;

    fn value_ref(&self) -> ValueRef<'_, Self, KeyValue<'a>> {
        match *self {
            Self::String(s) => ValueRef::String(s),
            Self::Bool(b) => ValueRef::Bool(b),
            Self::Int(i) => ValueRef::Int(i),
            Self::Double(d) => ValueRef::Double(d),
            Self::Bytes(b) => ValueRef::Bytes(b),
            Self::Array(values) => ValueRef::Array(values),
            Self::KvList(kvs) => ValueRef::KvList(kvs),
            Self::StringArray(strings) => ValueRef::StringArray(strings),
        }
    }
}

impl<'a> EncodeKeyValue for KeyValue<'a> {
    type Value = AnyValue<'a>;

    fn key(&self) -> &str {
        self.key
    }

    fn value(&self) -> &AnyValue<'a> {
        &self.value
    }
}

const fn tag_len(field: u32) -> usize {
    sizeof_varint32(field << 3)
}

const fn len_field(field: u32, len: usize) -> usize {
    tag_len(field) + sizeof_len_record(len)
}

/// Size of a `KeyValue`'s body.
fn key_value_len<K: EncodeKeyValue>(kv: &K) -> usize {
    let key = if kv.key().is_empty() {
        0
    } else {
        len_field(KV_KEY, kv.key().len())
    };
    key + len_field(KV_VALUE, value_len(kv.value()))
}

/// Size of an `AnyValue`'s body.
fn value_len<V: EncodeValue>(v: &V) -> usize {
    match v.value_ref() {
        ValueRef::Empty => 0,
        ValueRef::String(s) => len_field(AV_STRING, s.len()),
        ValueRef::Bool(_) => tag_len(AV_BOOL) + 1,
        ValueRef::Int(i) => tag_len(AV_INT) + sizeof_varint64(i as u64),
        ValueRef::Double(_) => tag_len(AV_DOUBLE) + 8,
        ValueRef::Bytes(b) => len_field(AV_BYTES, b.len()),
        ValueRef::Array(values) => len_field(AV_ARRAY, array_len(values)),
        ValueRef::KvList(kvs) => len_field(AV_KVLIST, list_len(LIST_VALUES, kvs)),
        ValueRef::StringArray(strings) => len_field(AV_ARRAY, string_array_len(strings)),
    }
}

/// Size of an `ArrayValue`'s body.
fn array_len<V: EncodeValue>(values: &[V]) -> usize {
    values
        .iter()
        .map(|v| len_field(LIST_VALUES, value_len(v)))
        .sum()
}

/// Size of the body of an `ArrayValue` of `string_value`s.
fn string_array_len(strings: &[&str]) -> usize {
    strings
        .iter()
        .map(|s| len_field(LIST_VALUES, len_field(AV_STRING, s.len())))
        .sum()
}

/// Size of `kvs` as repeated field `field`.
fn list_len<K: EncodeKeyValue>(field: u32, kvs: &[K]) -> usize {
    kvs.iter()
        .map(|kv| len_field(field, key_value_len(kv)))
        .sum()
}

/// Exact size of a `ProcessContext` payload.
pub(crate) fn context_len<K: EncodeKeyValue>(resource: &[K], attributes: &[K]) -> usize {
    len_field(PC_RESOURCE, list_len(RESOURCE_ATTRIBUTES, resource))
        + list_len(PC_ATTRIBUTES, attributes)
}

/// Encodes a `ProcessContext` payload into the start of `buf` and returns its size. The
/// resource is always written, even when empty; an empty key is omitted, as proto3 does.
pub(crate) fn encode_context<K: EncodeKeyValue>(
    resource: &[K],
    attributes: &[K],
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let needed = context_len(resource, attributes);
    let available = buf.len();
    let Some(buf) = buf.get_mut(..needed) else {
        return Err(EncodeError::BufferTooSmall { needed, available });
    };
    let mut out = Out {
        enc: PbEncoder::new(buf),
    };
    let written = (|| {
        out.len_header(PC_RESOURCE, list_len(RESOURCE_ATTRIBUTES, resource))?;
        for kv in resource {
            out.key_value(RESOURCE_ATTRIBUTES, kv)?;
        }
        for kv in attributes {
            out.key_value(PC_ATTRIBUTES, kv)?;
        }
        Ok::<(), ()>(())
    })();
    // The sizes computed above are exact, so the encoder neither runs out of room
    // nor leaves bytes unwritten; say so loudly in tests if that ever changes.
    debug_assert!(written.is_ok() && out.enc.as_writer().is_empty());
    written.map_err(|()| EncodeError::BufferTooSmall { needed, available })?;
    Ok(needed)
}

struct Out<'b> {
    enc: PbEncoder<&'b mut [u8]>,
}

impl Out<'_> {
    fn len_header(&mut self, field: u32, len: usize) -> Result<(), ()> {
        self.enc.encode_tag(Tag::from_parts(field, WIRE_LEN))?;
        self.enc.encode_varint64(len as u64)
    }

    fn key_value<K: EncodeKeyValue>(&mut self, field: u32, kv: &K) -> Result<(), ()> {
        self.len_header(field, key_value_len(kv))?;
        if !kv.key().is_empty() {
            self.enc.encode_tag(Tag::from_parts(KV_KEY, WIRE_LEN))?;
            self.enc.encode_string(kv.key())?;
        }
        self.len_header(KV_VALUE, value_len(kv.value()))?;
        self.any_value(kv.value())
    }

    fn any_value<V: EncodeValue>(&mut self, v: &V) -> Result<(), ()> {
        match v.value_ref() {
            ValueRef::Empty => Ok(()),
            ValueRef::String(s) => self.string(s),
            ValueRef::Bool(b) => {
                self.enc.encode_tag(Tag::from_parts(AV_BOOL, WIRE_VARINT))?;
                self.enc.encode_bool(b)
            }
            ValueRef::Int(i) => {
                self.enc.encode_tag(Tag::from_parts(AV_INT, WIRE_VARINT))?;
                self.enc.encode_int64(i)
            }
            ValueRef::Double(d) => {
                self.enc.encode_tag(Tag::from_parts(AV_DOUBLE, WIRE_I64))?;
                self.enc.encode_double(d)
            }
            ValueRef::Bytes(b) => {
                self.enc.encode_tag(Tag::from_parts(AV_BYTES, WIRE_LEN))?;
                self.enc.encode_bytes(b)
            }
            ValueRef::Array(values) => {
                self.len_header(AV_ARRAY, array_len(values))?;
                for v in values {
                    self.len_header(LIST_VALUES, value_len(v))?;
                    self.any_value(v)?;
                }
                Ok(())
            }
            ValueRef::KvList(kvs) => {
                self.len_header(AV_KVLIST, list_len(LIST_VALUES, kvs))?;
                for kv in kvs {
                    self.key_value(LIST_VALUES, kv)?;
                }
                Ok(())
            }
            ValueRef::StringArray(strings) => {
                self.len_header(AV_ARRAY, string_array_len(strings))?;
                for s in strings {
                    self.len_header(LIST_VALUES, len_field(AV_STRING, s.len()))?;
                    self.string(s)?;
                }
                Ok(())
            }
        }
    }

    fn string(&mut self, s: &str) -> Result<(), ()> {
        self.enc.encode_tag(Tag::from_parts(AV_STRING, WIRE_LEN))?;
        self.enc.encode_string(s)
    }
}

impl ProcessContext<'_> {
    /// Exact size of the encoded payload.
    pub fn encoded_len(&self) -> usize {
        context_len(self.resource, self.attributes)
    }

    /// Encodes into the start of `buf` and returns the payload size. The resource is
    /// always written, even when empty; an empty key is omitted, as proto3 does.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        encode_context(self.resource, self.attributes, buf)
    }
}

impl PartialEq<AnyValue<'_>> for AnyValueView<'_> {
    fn eq(&self, other: &AnyValue<'_>) -> bool {
        match (self, other) {
            (Self::String(a), AnyValue::String(b)) => a == b,
            (Self::Bool(a), AnyValue::Bool(b)) => a == b,
            (Self::Int(a), AnyValue::Int(b)) => a == b,
            (Self::Double(a), AnyValue::Double(b)) => a.to_bits() == b.to_bits(),
            (Self::Bytes(a), AnyValue::Bytes(b)) => a == b,
            (Self::Array(a), AnyValue::Array(b)) => a.iter().eq(b.iter().copied()),
            (Self::Array(a), AnyValue::StringArray(b)) => {
                a.iter().eq(b.iter().map(|s| AnyValue::String(s)))
            }
            (Self::KvList(a), AnyValue::KvList(b)) => a.iter().eq(b.iter().copied()),
            _ => false,
        }
    }
}

impl PartialEq<KeyValue<'_>> for KeyValueView<'_> {
    fn eq(&self, other: &KeyValue<'_>) -> bool {
        self.key == other.key && self.value == other.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let inner = [AnyValue::Int(-1), AnyValue::String("x")];
        let kvs = [KeyValue {
            key: "k",
            value: AnyValue::Bool(true),
        }];
        let resource = [
            KeyValue {
                key: "service.name",
                value: AnyValue::String("svc"),
            },
            KeyValue {
                key: "d",
                value: AnyValue::Double(1.5),
            },
            KeyValue {
                key: "b",
                value: AnyValue::Bytes(&[0, 255]),
            },
            KeyValue {
                key: "a",
                value: AnyValue::Array(&inner),
            },
            KeyValue {
                key: "m",
                value: AnyValue::KvList(&kvs),
            },
        ];
        let extra = [KeyValue {
            key: "s",
            value: AnyValue::StringArray(&["p", "q"]),
        }];
        let ctx = ProcessContext {
            resource: &resource,
            attributes: &extra,
        };
        let mut buf = [0u8; 256];
        let n = ctx.encode(&mut buf).unwrap();
        let view = ProcessContextView::decode(&buf[..n], &Limits::default()).unwrap();
        assert!(view.resource().eq(resource.iter().copied()));
        assert!(view.attributes().eq(extra.iter().copied()));
        assert_eq!(
            view.resource_value("service.name"),
            Some(AnyValueView::String("svc"))
        );
        assert_eq!(
            ctx.encode(&mut buf[..n - 1]),
            Err(EncodeError::BufferTooSmall {
                needed: n,
                available: n - 1
            })
        );
    }

    #[test]
    fn errors() {
        let d = |b: &[u8]| {
            ProcessContextView::decode(b, &Limits::default())
                .map(|_| ())
                .map_err(|e| e.kind())
        };
        assert_eq!(d(&[]), Ok(()));
        assert_eq!(d(&[0x12, 0x05, 0x0a]), Err("truncated"));
        assert_eq!(d(&[0x10, 0x01]), Err("wrong_wire_type"));
        assert_eq!(d(&[0x12, 0x03, 0x0a, 0x01, 0xff]), Err("invalid_utf8"));
        assert_eq!(
            d(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err("overlong_varint")
        );
        assert_eq!(d(&[0x1b]), Err("invalid_wire_type"));
        assert_eq!(d(&[0x07]), Err("invalid_field_number"));
        // Unknown field 3 of each wire type is skipped.
        assert_eq!(
            d(&[0x18, 0x01, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0x1a, 0x00, 0x1d, 0, 0, 0, 0]),
            Ok(())
        );
    }

    /// `ProcessContext { attributes: [KeyValue { key: "k", value: <depth nested arrays> }] }`.
    fn nested(depth: usize, out: &mut [u8; 256]) -> usize {
        let mut cur = [0u8; 256];
        let mut tmp = [0u8; 256];
        // Innermost AnyValue: an empty array.
        cur[..2].copy_from_slice(&[0x2a, 0x00]);
        let mut len = 2;
        for _ in 1..depth {
            // AnyValue { array_value: ArrayValue { values: [cur] } }
            tmp[..4].copy_from_slice(&[0x2a, (len + 2) as u8, 0x0a, len as u8]);
            tmp[4..4 + len].copy_from_slice(&cur[..len]);
            len += 4;
            cur[..len].copy_from_slice(&tmp[..len]);
        }
        out[..7].copy_from_slice(&[0x12, (len + 5) as u8, 0x0a, 0x01, b'k', 0x12, len as u8]);
        out[7..7 + len].copy_from_slice(&cur[..len]);
        7 + len
    }

    #[test]
    fn depth_limit() {
        let limits = Limits::default();
        let mut buf = [0u8; 256];
        let n = nested(limits.max_depth, &mut buf);
        assert!(ProcessContextView::decode(&buf[..n], &limits).is_ok());
        let n = nested(limits.max_depth + 1, &mut buf);
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &limits),
            Err(DecodeError::TooDeep {
                limit: limits.max_depth
            })
        );
    }

    #[test]
    fn attribute_limit() {
        let kv = KeyValue {
            key: "k",
            value: AnyValue::Int(1),
        };
        let many = [kv; 9];
        let ctx = ProcessContext {
            resource: &many,
            attributes: &[],
        };
        let mut buf = [0u8; 128];
        let n = ctx.encode(&mut buf).unwrap();
        let limits = Limits {
            max_attributes: 8,
            ..Limits::default()
        };
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &limits).map_err(|e| e.kind()),
            Err("too_many_attributes")
        );
        let small = Limits {
            max_payload_size: n - 1,
            ..Limits::default()
        };
        assert_eq!(
            ProcessContextView::decode(&buf[..n], &small).map_err(|e| e.kind()),
            Err("payload_too_large")
        );
    }
}
