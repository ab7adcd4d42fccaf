//! What a pacer books against, in the service's JSON shape.

use serde::Serialize;

/// The limit a slot is booked under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Quota {
    /// A key and its limit, given by the caller.
    Inline {
        /// The key, e.g. the provider and the token: `"github:token-7"`.
        key: String,
        /// The limit.
        limit: InlineLimit,
    },
    /// Descriptors matched against the service's rules (Envoy style).
    Rules {
        /// The rules domain.
        domain: String,
        /// The descriptors; every enforced limit they match is booked.
        descriptors: Vec<Descriptor>,
    },
}

impl Quota {
    /// An inline key with an algorithm and a rate, e.g.
    /// `Quota::inline("api", "sliding_window_log", "100/10s")`.
    pub fn inline(key: impl Into<String>, algorithm: &str, rate: &str) -> Quota {
        Quota::Inline {
            key: key.into(),
            limit: InlineLimit {
                algorithm: algorithm.to_owned(),
                rate: rate.to_owned(),
                burst: None,
            },
        }
    }
}

/// An inline limit, as `POST /v1/reserve` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InlineLimit {
    /// An algorithm that can book ahead: `sliding_window_log`, `gcra`,
    /// `token_bucket`, `leaky_bucket`, `fixed_window`, ….
    pub algorithm: String,
    /// The rate in tollgate's notation (`100/10s`, `5000/hour`).
    pub rate: String,
    /// The burst, for the algorithms that have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
}

/// One descriptor: `(key, value)` entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Descriptor {
    /// The entries, in order.
    pub entries: Vec<Entry>,
}

impl Descriptor {
    /// A descriptor from `(key, value)` pairs.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Descriptor {
        Descriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| Entry {
                    key: key.into(),
                    value: value.into(),
                })
                .collect(),
        }
    }
}

/// One descriptor entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The entry's key.
    pub key: String,
    /// The entry's value.
    pub value: String,
}
