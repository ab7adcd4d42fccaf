//! Costs known from the response: a request checked with its route's
//! estimate (`cost: {estimate}`) is settled with its actual cost once the
//! upstream has answered — read from a response header when the head
//! arrives, or from a trailer when the body ends — and refunded when
//! `count_if` says its answer does not count.
//!
//! This module owns when a request is settled and what its actual cost is:
//!
//! - an answer whose status `count_if` does not take is settled with cost 0
//!   (a refund), when its head arrives, whatever it says about its cost;
//! - `from_response_header`: settled when the head arrives, before the
//!   head goes on, so the client's next request sees the charge;
//! - `from_response_trailer`: settled when the body ends, before the end
//!   goes on; without the trailer, the header's value (when
//!   `from_response_header` is also given), else the estimate stands;
//! - a body that fails or is dropped before its end (the upstream broke
//!   off, the client went away) is settled with the header's value when
//!   there is one; otherwise the estimate stands ([`CostOutcome::Aborted`]):
//!   an answer cut short never told its cost, and the estimate is what the
//!   request was admitted with;
//! - an absent value, or one that is not a whole number, leaves the
//!   estimate standing;
//! - a store that does not settle ([`StoreError::Unsupported`]) leaves the
//!   estimate standing; it is asked once, and later requests do not ask it
//!   again (nor read its clock for the admission's instant);
//! - settles go to every limit that counted the request
//!   ([`Outcome::counted`](tollgate_rules::check::Outcome::counted)),
//!   `concurrency` leases aside, with the store's reading of the time
//!   taken just before the check as the admission's instant (at or before
//!   the real one, so a refund never lands in a window the request was not
//!   counted in).
//!
//! Every settle's outcome goes to the [`Observer`](crate::Observer).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{HeaderMap, HeaderName};
use tollgate_core::Limit;
use tollgate_rules::{ResponseCost, StatusFilter};

/// How settling a request's actual cost went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CostOutcome {
    /// The actual cost was read and settled: charged, refunded, or equal
    /// to the estimate.
    Settled,
    /// `count_if` does not take the answer's status: refunded.
    Uncounted,
    /// The header or trailer was absent: the estimate stands.
    Missing,
    /// The value was not a whole number: the estimate stands.
    Invalid,
    /// The body failed or was dropped before the trailer came: the
    /// estimate stands.
    Aborted,
    /// The store does not settle: the estimate stands.
    Unsupported,
    /// The store failed: the estimate stands.
    Failed,
}

impl CostOutcome {
    /// The outcome's name, for metric labels: `settled`, `uncounted`,
    /// `missing`, `invalid`, `aborted`, `unsupported`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            CostOutcome::Settled => "settled",
            CostOutcome::Uncounted => "uncounted",
            CostOutcome::Missing => "missing",
            CostOutcome::Invalid => "invalid",
            CostOutcome::Aborted => "aborted",
            CostOutcome::Unsupported => "unsupported",
            CostOutcome::Failed => "failed",
        }
    }
}

/// A request extension the middleware adds when it reads a trailer of the
/// response: a proxy forwarding the request should ask its upstream for
/// trailers (`TE: trailers` on HTTP/1.1), which an HTTP/1.1 server sends
/// only when asked. The gateway does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailersWanted;

/// A boxed future that settles.
pub(crate) type Settling = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Something that can settle through its store and report how it went.
pub(crate) trait Settler: Send + Sync + 'static {
    /// Settles `counted` (admitted at `admitted_at` with `estimate`) with
    /// `actual`; `outcome` is reported when the store took it.
    fn settle(self: Arc<Self>, counted: Counted, actual: u64, outcome: CostOutcome) -> Settling;

    /// Reports an outcome that needed no store.
    fn report(&self, outcome: CostOutcome);
}

/// What a request's cost was counted in: the limits and keys, the
/// admission's instant (`None` when it could not be read: nothing is
/// settled) and the estimate.
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    pub(crate) limits: Vec<(Limit, Vec<u8>)>,
    pub(crate) admitted_at: Option<u64>,
    pub(crate) estimate: u64,
}

/// A decided request's cost rules, borrowed from its route (or inline
/// policy), and what it was counted in.
#[derive(Debug)]
pub(crate) struct ChargePlan<'r> {
    pub(crate) cost: &'r ResponseCost,
    pub(crate) count_if: Option<&'r StatusFilter>,
    pub(crate) counted: Counted,
}

/// What to do once the answer's head is known.
pub(crate) enum AtHead {
    /// Nothing more: the estimate stands, or the settle is done.
    Done,
    /// Settle with this cost now, reporting this outcome.
    Settle(Counted, u64, CostOutcome),
    /// Wait for the body's end (a trailer is read).
    AtEnd(BodyCharge),
}

impl ChargePlan<'_> {
    /// What the answer's `status` and `headers` mean for the cost.
    pub(crate) fn at_head(
        self,
        status: u16,
        headers: &HeaderMap,
        settler: Arc<dyn Settler>,
    ) -> AtHead {
        if self.count_if.is_some_and(|f| !f.matches(status)) {
            return AtHead::Settle(self.counted, 0, CostOutcome::Uncounted);
        }
        let from_header = self
            .cost
            .header
            .as_deref()
            .map(|name| read_cost(headers.get(name)));
        match &self.cost.trailer {
            Some(trailer) => match HeaderName::from_bytes(trailer.as_bytes()) {
                Ok(trailer) => AtHead::AtEnd(BodyCharge {
                    pending: Some((self.counted, settler)),
                    trailer,
                    from_header,
                    from_trailer: None,
                }),
                // Names are HTTP tokens, checked at load.
                Err(_) => AtHead::Done,
            },
            None => match from_header {
                Some(Ok(actual)) => AtHead::Settle(self.counted, actual, CostOutcome::Settled),
                Some(Err(outcome)) => {
                    settler.report(outcome);
                    AtHead::Done
                }
                None => AtHead::Done,
            },
        }
    }
}

/// A cost settled when the body ends; settled from `Drop` (with what is
/// known) when it never does.
pub(crate) struct BodyCharge {
    pending: Option<(Counted, Arc<dyn Settler>)>,
    trailer: HeaderName,
    /// The header's reading, when `from_response_header` is given too.
    from_header: Option<Result<u64, CostOutcome>>,
    from_trailer: Option<Result<u64, CostOutcome>>,
}

impl BodyCharge {
    /// Reads the trailer from a trailers frame.
    pub(crate) fn trailers(&mut self, trailers: &HeaderMap) {
        if let Some(value) = trailers.get(&self.trailer) {
            self.from_trailer = Some(read_cost(Some(value)));
        }
    }

    /// The body ended: the settle to wait for, if any.
    pub(crate) fn end(mut self) -> Option<Settling> {
        let (counted, settler) = self.pending.take()?;
        let reading = match (self.from_trailer.take(), self.from_header.take()) {
            (Some(Ok(actual)), _) | (None, Some(Ok(actual))) => Ok(actual),
            (Some(Err(outcome)), _) => Err(outcome),
            (None, Some(Err(_)) | None) => Err(CostOutcome::Missing),
        };
        match reading {
            Ok(actual) => Some(settler.settle(counted, actual, CostOutcome::Settled)),
            Err(outcome) => {
                settler.report(outcome);
                None
            }
        }
    }
}

impl Drop for BodyCharge {
    fn drop(&mut self) {
        let Some((counted, settler)) = self.pending.take() else {
            return;
        };
        match self.from_header {
            Some(Ok(actual)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(settler.settle(counted, actual, CostOutcome::Settled));
                }
            }
            _ => settler.report(CostOutcome::Aborted),
        }
    }
}

impl std::fmt::Debug for BodyCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyCharge")
            .field("trailer", &self.trailer)
            .field("from_header", &self.from_header)
            .field("from_trailer", &self.from_trailer)
            .finish_non_exhaustive()
    }
}

/// A cost from a header or trailer value: a whole number (surrounding
/// blanks allowed).
fn read_cost(value: Option<&http::HeaderValue>) -> Result<u64, CostOutcome> {
    let value = value.ok_or(CostOutcome::Missing)?;
    value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse().ok())
        .ok_or(CostOutcome::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_whole_numbers() {
        let v = |s: &'static str| http::HeaderValue::from_static(s);
        assert_eq!(read_cost(Some(&v("42"))), Ok(42));
        assert_eq!(read_cost(Some(&v(" 7 "))), Ok(7));
        assert_eq!(read_cost(Some(&v("0"))), Ok(0));
        assert_eq!(read_cost(None), Err(CostOutcome::Missing));
        for bad in ["", "-1", "1.5", "12abc", "+3", "99999999999999999999999"] {
            assert_eq!(read_cost(Some(&v(bad))), Err(CostOutcome::Invalid), "{bad}");
        }
    }
}
