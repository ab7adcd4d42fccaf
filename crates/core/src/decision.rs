//! The answer every algorithm gives: [`Decision`], and [`Reservation`] for
//! booked slots.

use std::time::Duration;

/// The outcome of one request against one limit (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    /// The request, with its cost, was admitted and has been counted.
    pub allowed: bool,
    /// The configured maximum: requests per window, or bucket capacity.
    pub limit: u64,
    /// Unit-cost requests that would still be admitted right now, after this
    /// decision.
    pub remaining: u64,
    /// Zero when allowed; otherwise the shortest wait after which the same
    /// request would be admitted if nothing else happened.
    pub retry_after: Duration,
    /// Time until the limiter is back to its untouched state.
    pub reset_after: Duration,
    /// Shaping only (`leaky_bucket`): how long to hold the admitted request
    /// before letting it through.
    pub delay: Duration,
    /// `concurrency` only: the lease an admitted request must release.
    pub lease: Option<u64>,
    /// The store could not be asked and the decision comes from the
    /// configured failure policy (admitted without counting, or counted in
    /// this instance's memory only). Algorithms never set it.
    pub degraded: bool,
    /// Decided from a local copy of the shared store's state (the async
    /// sync mode, SPEC §8): the other instances' latest usage may not be
    /// in it yet. Algorithms never set it.
    pub asynchronous: bool,
    /// Whether a [`Ban`](crate::ban::Ban) refused the request: the one its
    /// refusal started, or one in force (for a peek: one in force).
    pub ban: Option<BanRefusal>,
}

/// A ban's part in a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BanRefusal {
    /// The limit refused the request, and this strike started a ban.
    Started,
    /// A ban in force refused the request.
    InForce,
}

impl Decision {
    /// Of two decisions, the one that constrains the caller more: a rejection
    /// over an admission, then the longer `retry_after`, then the fewer
    /// `remaining`. Used to report one summary for several limits.
    pub fn most_constrained(self, other: Decision) -> Decision {
        let key = |d: &Decision| (!d.allowed, d.retry_after, std::cmp::Reverse(d.remaining));
        if key(&other) > key(&self) {
            other
        } else {
            self
        }
    }
}

/// The outcome of [`reserve`](crate::Limiter::reserve): a booked slot, or why
/// none was booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// How long the caller must wait before making the call (including any
    /// shaping delay). When the slot was not booked, the wait it would have
    /// needed.
    pub wait: Duration,
    /// `allowed` says whether the slot was booked. When it was not (the wait
    /// exceeded `max_wait`), `retry_after` is how much later a reservation
    /// would fit within `max_wait`.
    pub decision: Decision,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_constrained_prefers_rejection_then_longest_wait_then_least_remaining() {
        let ok = |remaining| Decision {
            allowed: true,
            remaining,
            ..Decision::default()
        };
        let no = |secs| Decision {
            retry_after: Duration::from_secs(secs),
            ..Decision::default()
        };
        assert_eq!(ok(5).most_constrained(ok(2)), ok(2));
        assert_eq!(ok(2).most_constrained(ok(5)), ok(2));
        assert_eq!(ok(0).most_constrained(no(1)), no(1));
        assert_eq!(no(3).most_constrained(no(1)), no(3));
        assert_eq!(no(1).most_constrained(no(3)), no(3));
    }
}
