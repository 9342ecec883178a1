//! The models an encoder reads: the borrowed one ([`ProcessContext`], [`KeyValue`],
//! [`AnyValue`]) and, through the same two traits, the owned one (`owned`).

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

/// One `AnyValue` as the encoder sees it, whichever model holds it.
///
/// The borrowed model ([`AnyValue`]) and the owned one (`owned::OwnedValue`) each describe
/// their values through this, so the single encoder (`encode.rs`) writes both and their
/// bytes cannot drift apart; neither is first rebuilt as the other.
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
