//! Enough of protobuf text format to read what `protoc --decode` prints, and to turn a
//! decoded `ProcessContext` into the codec's [`OwnedProcessContext`], to compare with a
//! vector's `expected` value.
//!
//! protoc prints one field per line: `name: scalar` or `name { ... }`. Strings and bytes
//! are double-quoted with C escapes (bytes outside printable ASCII as three octal
//! digits); doubles as the shortest text that reads back exactly, or `inf`, `-inf`,
//! `nan`. Fields the schema does not know are printed under their number (`100: 150`,
//! `102: "..."`, `102 { ... }` when the bytes happen to parse as a message).

use otel_ctx_codec::owned::{OwnedKeyValue, OwnedProcessContext, OwnedValue};

/// A value in text format.
#[derive(Clone, Debug, PartialEq)]
pub enum TextValue {
    /// A bare token: a number, `true`, `inf`...
    Scalar(String),
    /// A quoted string, unescaped into its bytes.
    Bytes(Vec<u8>),
    /// A nested message.
    Message(Message),
}

/// A message: its fields in printed order.
pub type Message = Vec<(String, TextValue)>;

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Str(Vec<u8>),
    Colon,
    Open,
    Close,
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b':' => {
                out.push(Token::Colon);
                i += 1;
            }
            b'{' => {
                out.push(Token::Open);
                i += 1;
            }
            b'}' => {
                out.push(Token::Close);
                i += 1;
            }
            b'"' | b'\'' => {
                let (s, next) = unquote(bytes, i)?;
                out.push(Token::Str(s));
                i = next;
            }
            c if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.' | b'_') => {
                let start = i;
                while bytes.get(i).is_some_and(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.' | b'_')
                }) {
                    i += 1;
                }
                out.push(Token::Word(text[start..i].to_owned()));
            }
            other => {
                return Err(format!(
                    "unexpected character {:?} at byte {i}",
                    char::from(other)
                ))
            }
        }
    }
    Ok(out)
}

/// Unescapes the string literal starting at `bytes[start]` (a quote); returns its bytes and
/// the position after the closing quote.
fn unquote(bytes: &[u8], start: usize) -> Result<(Vec<u8>, usize), String> {
    let quote = bytes[start];
    let mut out = Vec::new();
    let mut i = start + 1;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(format!("string starting at byte {start} is not closed"));
        };
        i += 1;
        if c == quote {
            return Ok((out, i));
        }
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = bytes.get(i) else {
            return Err("string ends in a backslash".into());
        };
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'v' => out.push(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => out.push(e),
            b'0'..=b'7' => {
                let mut n = u32::from(e - b'0');
                for _ in 0..2 {
                    match bytes.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            n = n * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(u8::try_from(n).map_err(|_| format!("octal escape {n:o} over 255"))?);
            }
            b'x' => {
                let mut n = 0u32;
                let mut digits = 0;
                while let Some(d) = bytes.get(i).and_then(|&d| char::from(d).to_digit(16)) {
                    if digits == 2 {
                        break;
                    }
                    n = n * 16 + d;
                    digits += 1;
                    i += 1;
                }
                if digits == 0 {
                    return Err("\\x without hex digits".into());
                }
                out.push(n as u8);
            }
            other => return Err(format!("unknown escape \\{}", char::from(other))),
        }
    }
}

fn parse_message(tokens: &[Token], pos: &mut usize, nested: bool) -> Result<Message, String> {
    let mut fields = Vec::new();
    loop {
        match tokens.get(*pos) {
            None if nested => return Err("a message is not closed".into()),
            None => return Ok(fields),
            Some(Token::Close) if nested => {
                *pos += 1;
                return Ok(fields);
            }
            Some(Token::Word(name)) => {
                *pos += 1;
                let value = match tokens.get(*pos) {
                    Some(Token::Colon) => {
                        *pos += 1;
                        match tokens.get(*pos) {
                            Some(Token::Word(w)) => TextValue::Scalar(w.clone()),
                            Some(Token::Str(s)) => TextValue::Bytes(s.clone()),
                            Some(Token::Open) => {
                                *pos += 1;
                                TextValue::Message(parse_message(tokens, pos, true)?)
                            }
                            other => return Err(format!("`{name}:` followed by {other:?}")),
                        }
                    }
                    Some(Token::Open) => TextValue::Message({
                        *pos += 1;
                        parse_message(tokens, pos, true)?
                    }),
                    other => return Err(format!("field `{name}` followed by {other:?}")),
                };
                if !matches!(value, TextValue::Message(_)) {
                    *pos += 1;
                }
                fields.push((name.clone(), value));
            }
            Some(other) => return Err(format!("expected a field name, found {other:?}")),
        }
    }
}

/// Parses a whole text-format message.
pub fn parse(text: &str) -> Result<Message, String> {
    let tokens = tokenize(text)?;
    parse_message(&tokens, &mut 0, false)
}

/// Whether a field name is a number: a field the schema does not know.
pub fn is_unknown(name: &str) -> bool {
    name.bytes().all(|b| b.is_ascii_digit())
}

/// Whether the message or any message inside it has a field the schema does not know.
pub fn has_unknown_fields(message: &Message) -> bool {
    message.iter().any(|(name, value)| {
        is_unknown(name) || matches!(value, TextValue::Message(m) if has_unknown_fields(m))
    })
}

fn message<'m>(name: &str, value: &'m TextValue) -> Result<&'m Message, String> {
    match value {
        TextValue::Message(m) => Ok(m),
        other => Err(format!("`{name}` should be a message, found {other:?}")),
    }
}

fn scalar<'m>(name: &str, value: &'m TextValue) -> Result<&'m str, String> {
    match value {
        TextValue::Scalar(s) => Ok(s),
        other => Err(format!("`{name}` should be a scalar, found {other:?}")),
    }
}

fn string(name: &str, value: &TextValue) -> Result<String, String> {
    match value {
        TextValue::Bytes(b) => {
            String::from_utf8(b.clone()).map_err(|_| format!("`{name}` is not UTF-8"))
        }
        other => Err(format!("`{name}` should be a string, found {other:?}")),
    }
}

fn kv(m: &Message) -> Result<OwnedKeyValue, String> {
    let mut out = OwnedKeyValue::new(String::new(), OwnedValue::Empty);
    for (name, v) in m {
        match name.as_str() {
            "key" => out.key = string(name, v)?,
            "value" => out.value = any_value(message(name, v)?)?,
            n if is_unknown(n) => {}
            other => return Err(format!("unexpected KeyValue field `{other}`")),
        }
    }
    Ok(out)
}

fn list<T>(m: &Message, each: impl Fn(&Message) -> Result<T, String>) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for (name, v) in m {
        match name.as_str() {
            "values" => out.push(each(message(name, v)?)?),
            n if is_unknown(n) => {}
            other => return Err(format!("unexpected list field `{other}`")),
        }
    }
    Ok(out)
}

fn any_value(m: &Message) -> Result<OwnedValue, String> {
    let mut out = OwnedValue::Empty;
    for (name, v) in m {
        out = match name.as_str() {
            "string_value" => OwnedValue::String(string(name, v)?),
            "bool_value" => OwnedValue::Bool(match scalar(name, v)? {
                "true" => true,
                "false" => false,
                other => return Err(format!("bool_value {other}")),
            }),
            "int_value" => OwnedValue::Int(
                scalar(name, v)?
                    .parse()
                    .map_err(|e| format!("int_value: {e}"))?,
            ),
            "double_value" => OwnedValue::Double(
                scalar(name, v)?
                    .parse()
                    .map_err(|e| format!("double_value: {e}"))?,
            ),
            "bytes_value" => match v {
                TextValue::Bytes(b) => OwnedValue::Bytes(b.clone()),
                other => return Err(format!("bytes_value should be quoted, found {other:?}")),
            },
            "array_value" => OwnedValue::Array(list(message(name, v)?, any_value)?),
            "kvlist_value" => OwnedValue::KvList(list(message(name, v)?, kv)?),
            n if is_unknown(n) => continue,
            other => return Err(format!("unexpected AnyValue field `{other}`")),
        };
    }
    Ok(out)
}

/// The resource attributes and extra attributes of a `ProcessContext` printed by protoc,
/// ignoring unknown fields and `Resource.dropped_attributes_count`.
pub fn process_context(m: &Message) -> Result<OwnedProcessContext, String> {
    let mut context = OwnedProcessContext::default();
    for (name, v) in m {
        match name.as_str() {
            "resource" => {
                for (rname, rv) in message(name, v)? {
                    match rname.as_str() {
                        "attributes" => context.resource.push(kv(message(rname, rv)?)?),
                        "dropped_attributes_count" => {}
                        n if is_unknown(n) => {}
                        other => return Err(format!("unexpected Resource field `{other}`")),
                    }
                }
            }
            "attributes" => context.attributes.push(kv(message(name, v)?)?),
            n if is_unknown(n) => {}
            other => return Err(format!("unexpected ProcessContext field `{other}`")),
        }
    }
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::payload::same_values;

    const PRINTED: &str = r#"resource {
  attributes {
    key: "h\303\251\"\\\t"
    value {
      double_value: -0
    }
  }
  102: "\000skip\377"
}
attributes {
  key: "k"
  value {
    array_value {
      values {
        int_value: -9223372036854775808
      }
      values {
        double_value: inf
      }
      100: 150
    }
  }
}
attributes {
  key: "e"
}
"#;

    #[test]
    fn reads_protoc_output() {
        let m = parse(PRINTED).unwrap();
        assert!(has_unknown_fields(&m));
        let got = process_context(&m).unwrap();
        // same_values, not ==: the printed -0 must read back as -0.0, not 0.0.
        assert!(
            same_values(&got.resource, &[OwnedKeyValue::new("hé\"\\\t", -0.0)]),
            "{:?}",
            got.resource
        );
        assert!(
            same_values(
                &got.attributes,
                &[
                    OwnedKeyValue::new(
                        "k",
                        vec![OwnedValue::Int(i64::MIN), OwnedValue::Double(f64::INFINITY)]
                    ),
                    OwnedKeyValue::new("e", OwnedValue::Empty),
                ]
            ),
            "{:?}",
            got.attributes
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse("a {").is_err());
        assert!(parse("a: \"open").is_err());
        assert!(parse("}").is_err());
        assert!(parse("a: \"\\400\"").is_err());
        assert!(process_context(&parse("mystery: 1").unwrap()).is_err());
    }
}
