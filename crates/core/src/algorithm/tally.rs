//! The decision shape shared by the algorithms that count requests (the
//! windows and `concurrency`): admitted while `count + cost ≤ limit`.

use super::until;
use crate::decision::Decision;

/// What a counting limit holds right now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) limit: u64,
    pub(crate) count: u64,
}

/// The instants a counting decision may report; each is computed only when
/// the decision needs it.
pub(crate) struct Instants<C, R, T> {
    /// When the state would be untouched again if this request were counted.
    pub(crate) reset_if_counted: C,
    /// When the state is untouched again as it stands.
    pub(crate) reset: R,
    /// When the same request would be admitted (it is rejected now).
    pub(crate) retry: T,
}

impl Tally {
    /// The decision for `cost` at `now`.
    #[inline(always)]
    pub(crate) fn decide<C, R, T>(self, now: u64, cost: u64, at: Instants<C, R, T>) -> Decision
    where
        C: FnOnce() -> u64,
        R: FnOnce() -> u64,
        T: FnOnce() -> u64,
    {
        let Tally { limit, count } = self;
        if count + cost <= limit {
            let reset = if cost > 0 {
                (at.reset_if_counted)()
            } else {
                (at.reset)()
            };
            Decision {
                allowed: true,
                limit,
                remaining: limit - count - cost,
                reset_after: until(now, reset),
                ..Decision::default()
            }
        } else {
            Decision {
                allowed: false,
                limit,
                remaining: limit.saturating_sub(count),
                retry_after: until(now, (at.retry)()),
                reset_after: until(now, (at.reset)()),
                ..Decision::default()
            }
        }
    }
}

/// The decision while requests booked ahead are still queued: rejected, to
/// come back when a new reservation would get its slot.
pub(crate) fn queued(limit: u64, now: u64, next_at: u64, reset_at: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        retry_after: until(now, next_at),
        reset_after: until(now, reset_at),
        ..Decision::default()
    }
}
