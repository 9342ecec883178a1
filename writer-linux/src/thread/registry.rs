//! The process's attribute keys (feature `std`): `threadlocal.attribute_key_map`.
//!
//! The registry hands out the keys; the process context publishes their names. Each
//! registration of new names passes the whole key map to
//! [`process::set_thread_reference_data`], which keeps it as process-wide state and puts it
//! in whichever context the process publishes: a standalone `process::Publisher` or
//! `process::global`, updated at once if one is published, or at its first publish
//! otherwise (the process context is a singleton, so there is only one to update).

use std::borrow::ToOwned;
use std::fmt;
use std::string::String;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use otel_ctx_codec::threadlocal::{MAX_KEY_MAP_LEN, SCHEMA_TLSDESC_V1_DEV};

use super::{Key, KeyMap};
use crate::process;

/// The key names, in key-index order, in the fixed-capacity [`KeyMap`] that a program
/// without a heap uses too. Append-only: a name never moves or goes away, so each name is
/// copied once into memory kept for the life of the process (at most 256 names).
static KEY_MAP: Mutex<KeyMap<'static>> = Mutex::new(KeyMap::new());

fn key_map() -> MutexGuard<'static, KeyMap<'static>> {
    // The map is only appended to after the fallible work, so a panic while the lock was
    // held cannot leave it torn: the poison is ignored.
    KEY_MAP
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a key could not be registered. Nothing was registered or published.
#[derive(Debug)]
pub enum RegistryError {
    /// The key map already has 256 names, the most a `u8` key index can reach.
    TooManyKeys {
        /// The name that was refused.
        name: String,
    },
    /// Updating the process context with the new key map failed.
    Publish(process::Error),
}

impl RegistryError {
    /// A snake_case name of the error kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TooManyKeys { .. } => "too_many_keys",
            Self::Publish(_) => "publish",
        }
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyKeys { name } => write!(
                f,
                "cannot register attribute key {name:?}: the key map already holds \
                 {MAX_KEY_MAP_LEN} names, the most a u8 key index can reach; reuse an \
                 existing key"
            ),
            Self::Publish(e) => write!(
                f,
                "the new attribute key map could not be published in the process context, \
                 so no key was registered: {e}"
            ),
        }
    }
}

impl std::error::Error for RegistryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::TooManyKeys { .. } => None,
            Self::Publish(e) => Some(e),
        }
    }
}

/// The key of attribute `name`, registering it if it is new.
///
/// A new name is appended to the key map, which is then published as
/// `threadlocal.attribute_key_map` (with `threadlocal.schema_version =
/// "tlsdesc_v1_dev"`) through [`process::set_thread_reference_data`], whichever publisher
/// the process uses (a standalone `process::Publisher` or `process::global`): the context
/// published now is updated at once, and a context published later includes the key map.
/// Registering the same name again returns the same key. At most 256 names.
///
/// Call it when an attribute name is first seen and keep the [`Key`]: it takes a lock and
/// may update the process context, so it does not belong on a hot path.
pub fn register(name: &str) -> Result<Key, RegistryError> {
    let [key] = register_all([name])?;
    Ok(key)
}

/// Registers several names at once (one process-context update for all the new ones) and
/// returns their keys in the same order. On error none of them is registered.
pub fn register_all<const N: usize>(names: [&str; N]) -> Result<[Key; N], RegistryError> {
    let mut key_map = key_map();
    let mut new_names: Vec<&str> = Vec::new();
    let mut keys = [Key::from_index(0); N];
    for (key, name) in keys.iter_mut().zip(names) {
        let index = match key_map.key(name) {
            Some(key) => usize::from(key.index()),
            None => match new_names.iter().position(|new| *new == name) {
                Some(position) => key_map.len() + position,
                None => {
                    new_names.push(name);
                    key_map.len() + new_names.len() - 1
                }
            },
        };
        let Ok(index) = u8::try_from(index) else {
            return Err(RegistryError::TooManyKeys {
                name: name.to_owned(),
            });
        };
        *key = Key::from_index(index);
    }
    if !new_names.is_empty() {
        let published: Vec<&str> = key_map
            .names()
            .iter()
            .copied()
            .chain(new_names.iter().copied())
            .collect();
        process::set_thread_reference_data(SCHEMA_TLSDESC_V1_DEV, &published)
            .map_err(RegistryError::Publish)?;
        for name in new_names {
            // Kept for the life of the process: a registered name is never removed. The
            // indexes were checked above, so the map has room.
            let name: &'static str = String::leak(name.to_owned());
            if key_map.register(name).is_err() {
                unreachable!("the key indexes of the new names were checked above");
            }
        }
    }
    Ok(keys)
}

/// The registered names, in key-index order.
pub fn registered_keys() -> Vec<String> {
    key_map()
        .names()
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}
