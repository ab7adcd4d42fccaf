//! Inline limits, for apps without a rules file: one [`Limit`] and a
//! [`KeyExtractor`] that says whose counter a request counts in.
//!
//! Keys are the decision service's inline keys (`i` then the key), so an
//! inline limit in the middleware and `POST /v1/check` with the same limit
//! and key share one counter on a shared store.

use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use tollgate_core::Limit;
use tollgate_rules::{Action, ResponseCost, StatusFilter};

use crate::descriptors::{write_key, IpText, RequestView, DEFAULT_MAX_VALUE_BYTES};
use crate::shaping::Shaping;

/// Store keys of inline limits start with this byte, as the decision
/// service's do.
pub const INLINE_KEY_PREFIX: u8 = b'i';

/// Says which counter a request counts in.
///
/// Implemented by [`ClientIp`], by a list of route [`Action`]s (the same
/// extraction rules files use: `vec![Action::RemoteAddress, Action::Method]`),
/// and by closures `Fn(&Parts, Option<IpAddr>) -> Option<String>` (the
/// request's head and its client IP, grouped by
/// [`Settings::address_grouping`](crate::Settings::address_grouping); a key
/// longer than 1,024 bytes is cut).
pub trait KeyExtractor: Send + Sync + 'static {
    /// Appends the request's key to `key`; `false` when the request has
    /// none, and then it goes on unchecked.
    fn extract(&self, request: &Parts, client_ip: Option<IpAddr>, key: &mut Vec<u8>) -> bool;
}

/// The client IP (see [`TrustedProxies`](crate::TrustedProxies)).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientIp;

impl KeyExtractor for ClientIp {
    fn extract(&self, _: &Parts, client_ip: Option<IpAddr>, key: &mut Vec<u8>) -> bool {
        let Some(ip) = client_ip else {
            return false;
        };
        key.extend_from_slice(IpText::new(ip).as_str().as_bytes());
        true
    }
}

impl KeyExtractor for Vec<Action> {
    fn extract(&self, request: &Parts, client_ip: Option<IpAddr>, key: &mut Vec<u8>) -> bool {
        let view = RequestView {
            parts: request,
            client_ip,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
        };
        match view.descriptor(self) {
            Ok(Some(entries)) => {
                write_key(&entries, key);
                true
            }
            Ok(None) | Err(_) => false,
        }
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts, Option<IpAddr>) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, request: &Parts, client_ip: Option<IpAddr>, key: &mut Vec<u8>) -> bool {
        let Some(found) = self(request, client_ip) else {
            return false;
        };
        let bytes = found.as_bytes();
        key.extend_from_slice(&bytes[..bytes.len().min(DEFAULT_MAX_VALUE_BYTES)]);
        true
    }
}

/// An inline limit: the limit, its name in headers, the key, shaping.
#[derive(Clone)]
pub(crate) struct InlinePolicy {
    pub(crate) limit: Limit,
    pub(crate) name: String,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) shaping: Shaping,
    pub(crate) cost: ResponseCost,
    pub(crate) count_if: Option<StatusFilter>,
}

impl InlinePolicy {
    pub(crate) fn new(limit: Limit, key: Arc<dyn KeyExtractor>) -> InlinePolicy {
        InlinePolicy {
            limit,
            // The limit's notation names it in headers, as in the decision
            // service.
            name: limit.to_string(),
            key,
            shaping: Shaping::default(),
            cost: ResponseCost::default(),
            count_if: None,
        }
    }
}

impl std::fmt::Debug for InlinePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlinePolicy")
            .field("limit", &self.limit)
            .field("shaping", &self.shaping)
            .field("cost", &self.cost)
            .field("count_if", &self.count_if)
            .finish_non_exhaustive()
    }
}
