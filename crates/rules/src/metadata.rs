//! [`MetadataValue`]: a descriptor's `metadata` mapping (any YAML mapping,
//! envoyproxy/ratelimit's descriptor `metadata`), kept as a tree of plain
//! values the servers turn into JSON or a `google.protobuf.Struct`.
//!
//! This module owns the conversion from the YAML tree: plain scalars that
//! spell null, a boolean or a number become those (YAML 1.2's core schema
//! spellings); every other scalar, quoted ones included, stays a string.

use std::collections::BTreeMap;

use crate::error::ErrorKind;
use crate::parse::{FileParser, Result};
use crate::yaml::{Node, Value};

/// A descriptor's metadata: names to values.
pub type Metadata = BTreeMap<String, MetadataValue>;

/// One value of a descriptor's `metadata`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number (protobuf's `Struct` holds every number as a double).
    Number(f64),
    /// Any other scalar.
    String(String),
    /// A sequence.
    List(Vec<MetadataValue>),
    /// A mapping.
    Map(Metadata),
}

impl FileParser<'_> {
    /// The `metadata` mapping of a descriptor.
    pub(crate) fn metadata(&self, node: &Node) -> Result<Metadata> {
        match self.metadata_value(node)? {
            MetadataValue::Map(map) => Ok(map),
            _ => Err(self.wrong_type("metadata", "a mapping", node)),
        }
    }

    fn metadata_value(&self, node: &Node) -> Result<MetadataValue> {
        Ok(match &node.value {
            _ if node.is_null() => MetadataValue::Null,
            Value::Scalar { text, plain: true } => plain_scalar(text),
            Value::Scalar { text, .. } => MetadataValue::String(text.clone()),
            Value::Sequence(items) => MetadataValue::List(
                items
                    .iter()
                    .map(|item| self.metadata_value(item))
                    .collect::<Result<_>>()?,
            ),
            Value::Mapping(pairs) => {
                let mut map = Metadata::new();
                for (key, value) in pairs {
                    let Value::Scalar { text, .. } = &key.value else {
                        return Err(self.err(key.at, ErrorKind::NonStringKey));
                    };
                    if map.contains_key(text) {
                        return Err(self.err(
                            key.at,
                            ErrorKind::DuplicateField {
                                field: text.clone(),
                                first_line: pairs
                                    .iter()
                                    .find(|(k, _)| matches!(&k.value, Value::Scalar { text: t, .. } if t == text))
                                    .map_or(key.at.line, |(k, _)| k.at.line),
                            },
                        ));
                    }
                    map.insert(text.clone(), self.metadata_value(value)?);
                }
                MetadataValue::Map(map)
            }
        })
    }
}

/// A plain scalar: a boolean or a number when it spells one.
fn plain_scalar(text: &str) -> MetadataValue {
    match text {
        "true" | "True" | "TRUE" => return MetadataValue::Bool(true),
        "false" | "False" | "FALSE" => return MetadataValue::Bool(false),
        _ => {}
    }
    let numeric = text
        .strip_prefix(['+', '-'])
        .unwrap_or(text)
        .starts_with(|c: char| c.is_ascii_digit() || c == '.');
    match text.parse::<f64>() {
        Ok(n) if numeric && n.is_finite() => MetadataValue::Number(n),
        _ => MetadataValue::String(text.to_owned()),
    }
}
