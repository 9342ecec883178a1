//! The runner of the `spec-vectors/` files: the envelope every vector shares and the
//! loader here, and one module per file ([`header`], [`payload`], [`record`]) with its
//! `expected` shape and the function that runs one vector through the codec.
//!
//! A vector file is a JSON array of objects with `name`, `description`, `spec`, `hex`, the
//! inputs its kind allows, and exactly one of `expected` or `error` (see
//! `spec-vectors/README.md`). The loader refuses anything else, so a typo in a file is a
//! clear error rather than a silently ignored field.

pub mod header;
pub mod payload;
pub mod record;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The `spec-vectors/` folder: the repository's, or the copy a packaged crate carries.
pub fn spec_vectors_dir() -> PathBuf {
    // A symlink to the repository's `spec-vectors/` in a checkout; the files themselves
    // in a packaged crate (cargo follows the link when it packages).
    Path::new(env!("CARGO_MANIFEST_DIR")).join("spec-vectors")
}

/// Inputs a vector may give besides its bytes; each kind allows some of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Header and payload: the reader's payload size limit (default 65536).
    pub max_payload_size: Option<u64>,
    /// Payload: the deepest `AnyValue` nesting (default 16).
    pub max_depth: Option<usize>,
    /// Payload: the most key-value pairs and array elements (default 2048).
    pub max_attributes: Option<usize>,
    /// Record: the number of names in the process's key map (required).
    pub key_map_len: Option<usize>,
    /// Record: the reader's bound on a whole record (required).
    pub max_record_size: Option<usize>,
}

impl Inputs {
    fn present(&self) -> impl Iterator<Item = &'static str> {
        [
            ("max_payload_size", self.max_payload_size.is_some()),
            ("max_depth", self.max_depth.is_some()),
            ("max_attributes", self.max_attributes.is_some()),
            ("key_map_len", self.key_map_len.is_some()),
            ("max_record_size", self.max_record_size.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
    }
}

/// What decoding a vector's bytes must give.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<E> {
    /// The decoded value.
    Expected(E),
    /// The error kind, the snake_case name of the codec's `.kind()`.
    Error(String),
}

/// One vector, checked and with its hex decoded.
#[derive(Clone, Debug)]
pub struct Vector<E> {
    /// Unique snake_case name.
    pub name: String,
    /// One sentence.
    pub description: String,
    /// The rule exercised, such as `OTEP 4947 record: last occurrence wins`.
    pub spec: String,
    /// The input bytes.
    pub bytes: Vec<u8>,
    /// The inputs besides the bytes.
    pub inputs: Inputs,
    /// The value or error decoding must give.
    pub outcome: Outcome<E>,
}

/// The fields of a vector as written in JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVector<E> {
    name: String,
    description: String,
    spec: String,
    hex: String,
    #[serde(default)]
    max_payload_size: Option<u64>,
    #[serde(default)]
    max_depth: Option<usize>,
    #[serde(default)]
    max_attributes: Option<usize>,
    #[serde(default)]
    key_map_len: Option<usize>,
    #[serde(default)]
    max_record_size: Option<usize>,
    // A missing Option field reads as None; `default` here would ask E for Default.
    expected: Option<E>,
    #[serde(default)]
    error: Option<String>,
}

/// Why a vector file cannot be used.
#[derive(Debug)]
pub enum LoadError {
    /// The file cannot be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a JSON array of vectors of its kind.
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error, with line and column.
        source: serde_json::Error,
    },
    /// A vector breaks a rule of the format.
    Vector {
        /// The file.
        path: PathBuf,
        /// The vector's name (or its position when the name is the problem).
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Self::Json { path, source } => {
                write!(f, "{} is not a valid vector file: {source}", path.display())
            }
            Self::Vector {
                path,
                name,
                message,
            } => write!(f, "{}: vector `{name}`: {message}", path.display()),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Json { source, .. } => Some(source),
            Self::Vector { .. } => None,
        }
    }
}

fn is_snake_case(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.ends_with('_')
        && !name.contains("__")
}

/// Loads `spec-vectors/<file>`, checking every vector against the format: unique
/// snake_case names, a description and a spec, valid hex, exactly one of `expected` and
/// `error`, only the `allowed` inputs and all of the `required` ones.
pub fn load<E: DeserializeOwned>(
    file: &str,
    allowed: &[&str],
    required: &[&str],
) -> Result<Vec<Vector<E>>, LoadError> {
    let path = spec_vectors_dir().join(file);
    let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
        path: path.clone(),
        source,
    })?;
    let raw: Vec<RawVector<E>> = serde_json::from_str(&text).map_err(|source| LoadError::Json {
        path: path.clone(),
        source,
    })?;
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (position, v) in raw.into_iter().enumerate() {
        let fail = |name: &str, message: String| LoadError::Vector {
            path: path.clone(),
            name: name.to_owned(),
            message,
        };
        if !is_snake_case(&v.name) {
            return Err(fail(
                &format!("#{position}"),
                format!("name {:?} is not snake_case", v.name),
            ));
        }
        if !names.insert(v.name.clone()) {
            return Err(fail(&v.name, "the name is used twice".into()));
        }
        if v.description.trim().is_empty() || v.spec.trim().is_empty() {
            return Err(fail(
                &v.name,
                "description and spec must not be empty".into(),
            ));
        }
        let bytes = crate::hex::decode(&v.hex).map_err(|e| fail(&v.name, e))?;
        let inputs = Inputs {
            max_payload_size: v.max_payload_size,
            max_depth: v.max_depth,
            max_attributes: v.max_attributes,
            key_map_len: v.key_map_len,
            max_record_size: v.max_record_size,
        };
        if let Some(extra) = inputs.present().find(|i| !allowed.contains(i)) {
            return Err(fail(
                &v.name,
                format!("input `{extra}` is not used by {file}"),
            ));
        }
        if let Some(missing) = required
            .iter()
            .find(|r| !inputs.present().any(|i| i == **r))
        {
            return Err(fail(
                &v.name,
                format!("input `{missing}` is required in {file}"),
            ));
        }
        let outcome = match (v.expected, v.error) {
            (Some(e), None) => Outcome::Expected(e),
            (None, Some(kind)) if is_snake_case(&kind) => Outcome::Error(kind),
            (None, Some(kind)) => {
                return Err(fail(
                    &v.name,
                    format!("error kind {kind:?} is not snake_case"),
                ))
            }
            _ => {
                return Err(fail(
                    &v.name,
                    "exactly one of `expected` and `error` must be given".into(),
                ))
            }
        };
        out.push(Vector {
            name: v.name,
            description: v.description,
            spec: v.spec,
            bytes,
            inputs,
            outcome,
        });
    }
    Ok(out)
}

fn show<E: Serialize>(value: &E) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("<cannot show: {e}>"))
}

/// Compares what the codec gave for `vector` (a value, or an error kind) with its
/// outcome; the message of a mismatch names the vector and shows both sides as JSON.
pub fn check<E: PartialEq + Serialize>(
    vector: &Vector<E>,
    actual: Result<E, &str>,
) -> Result<(), String> {
    let problem = match (&vector.outcome, &actual) {
        (Outcome::Expected(want), Ok(got)) if want == got => return Ok(()),
        (Outcome::Error(want), Err(got)) if want == got => return Ok(()),
        (Outcome::Expected(want), Ok(got)) => {
            format!("expected {}\n  got      {}", show(want), show(got))
        }
        (Outcome::Expected(want), Err(got)) => {
            format!("expected {}\n  got error `{got}`", show(want))
        }
        (Outcome::Error(want), Ok(got)) => {
            format!("expected error `{want}`\n  got      {}", show(got))
        }
        (Outcome::Error(want), Err(got)) => {
            format!("expected error `{want}`\n  got error `{got}`")
        }
    };
    Err(format!(
        "vector `{}` ({}; {}):\n  {problem}",
        vector.name, vector.spec, vector.description
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case() {
        assert!(is_snake_case("truncated_31_bytes"));
        assert!(is_snake_case("a"));
        assert!(!is_snake_case("31_bytes"));
        assert!(!is_snake_case("Bad"));
        assert!(!is_snake_case("a__b"));
        assert!(!is_snake_case("a_"));
        assert!(!is_snake_case(""));
    }

    #[test]
    fn check_names_the_vector() {
        let v = Vector {
            name: "some_vector".into(),
            description: "d.".into(),
            spec: "OTEP 4719 header: layout".into(),
            bytes: vec![],
            inputs: Inputs::default(),
            outcome: Outcome::Expected(1u32),
        };
        assert_eq!(check(&v, Ok(1)), Ok(()));
        let err = check(&v, Err("truncated")).unwrap_err();
        assert!(
            err.contains("some_vector") && err.contains("truncated"),
            "{err}"
        );
        let err = check(&v, Ok(2)).unwrap_err();
        assert!(
            err.contains("expected 1") && err.contains("got      2"),
            "{err}"
        );
    }
}
