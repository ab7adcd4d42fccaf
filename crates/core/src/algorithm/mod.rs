//! The eight algorithms, each a pure function of (state, now, cost).
//!
//! Every algorithm implements [`Algorithm`]: a small set of required methods
//! (`evaluate` a request without changing anything, `commit` an admitted one,
//! find the `next_available` instant, `book` a reserved slot) from which the
//! trait derives the operations callers use: [`Algorithm::check`],
//! [`Algorithm::peek`] and [`Algorithm::reserve`]. Stores hold the state and
//! call these under their own locking; a multi-limit check evaluates every
//! limit first and commits only when all admit.
//!
//! This module owns the semantics of SPEC §2; it owns no storage, no clock and
//! no I/O.

mod bucket;
pub mod codec;
mod concurrency;
mod debt;
mod divisor;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod running_totals;
mod sliding_counter;
mod sliding_log;
mod small_deque;
mod stepped_window;
mod tally;
mod token_bucket;
mod windows;

use std::time::Duration;

pub use codec::StateCodec;
pub use concurrency::{Concurrency, ConcurrencyState};
pub use debt::Debt;
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_counter::{SlidingWindowCounter, SlidingWindowCounterState};
pub use sliding_log::{SlidingWindowLog, SlidingWindowLogState};
pub use stepped_window::{default_step, SteppedWindow, SteppedWindowState};
pub use token_bucket::{Narrow, TokenBucket, TokenBucketState, TokenStorage, Wide};

use crate::decision::{Decision, Reservation};
use crate::limit::LimitError;

/// Where a reservation lands: the instant it is recorded at, and how long the
/// caller waits before making the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The instant (ns since the epoch) the booked request is counted at.
    pub at: u64,
    /// How long the caller must wait, in nanoseconds.
    pub wait: u64,
}

/// What [`Algorithm::settle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The actual cost was the estimate: nothing changed.
    Exact,
    /// The difference was counted (possibly into debt).
    Charged,
    /// The difference was refunded, or `dropped` when what the request was
    /// counted in no longer counts (a window that has ended).
    Refunded {
        /// Whether the refund was dropped rather than given back.
        dropped: bool,
    },
}

/// One rate-limiting algorithm with its validated parameters.
///
/// Implementations are pure: they read `now` from their arguments and change
/// nothing but the state they are handed. A rejected request never changes
/// the limit's state; only a [`Ban`](crate::ban::Ban) around it counts the
/// rejection as a strike ([`strike`](Self::strike)).
pub trait Algorithm: Send + Sync + 'static {
    /// Per-key state.
    type State: Clone + std::fmt::Debug + Send + 'static;

    /// The configured maximum reported in every decision.
    fn limit(&self) -> u64;

    /// The largest cost that can ever be admitted; a larger cost is an error.
    fn capacity(&self) -> u64;

    /// The state of a key nothing has touched.
    fn new_state(&self) -> Self::State;

    /// The decision for `cost` at `now` as if it were committed, without
    /// changing anything. `cost` is at most [`capacity`](Self::capacity).
    fn evaluate(&self, state: &Self::State, now: u64, cost: u64) -> Decision;

    /// Records a request that [`evaluate`](Self::evaluate) admitted. Returns
    /// the lease id for `concurrency`, `None` otherwise.
    fn commit(&self, state: &mut Self::State, now: u64, cost: u64) -> Option<u64>;

    /// The earliest instant at or after `now` at which `cost` would be
    /// admitted if nothing else happened.
    fn next_available(&self, state: &Self::State, now: u64, cost: u64) -> u64;

    /// Where a reservation of `cost` made at `now` would land. `None` when the
    /// algorithm does not take reservations.
    fn slot(&self, state: &Self::State, now: u64, cost: u64) -> Option<Slot>;

    /// Books `cost` at `slot` (as returned by [`slot`](Self::slot) for the
    /// same state, time and cost).
    fn book(&self, state: &mut Self::State, now: u64, slot: Slot, cost: u64);

    /// The instant from which the state is equivalent to
    /// [`new_state`](Self::new_state) and can be forgotten.
    fn expires_at(&self, state: &Self::State) -> u64;

    /// What `state` holds against its key at `now`: how many unit-cost
    /// requests a fresh state would admit right now that this one would
    /// refuse (0 for a state that admits as much as a fresh one), and
    /// whether it is refusing a request of cost 1 right now. A bounded store
    /// forgets the least indebted states first and a refusing one last
    /// ([`Debt`]'s order): forgetting a state hands its key a fresh one.
    ///
    /// Read off the decision for cost 0 (its `remaining`) against
    /// [`limit`](Self::limit), what a fresh state has remaining; property
    /// tests hold every algorithm to both halves of the definition.
    #[inline]
    fn debt(&self, state: &Self::State, now: u64) -> Debt {
        Debt::from_remaining(self.limit(), self.evaluate(state, now, 0).remaining)
    }

    /// Records that this limit refused a request (of non-zero cost, in a
    /// check) at `now` with `decision`: a strike, for an algorithm with a
    /// [`Ban`](crate::ban::Ban) around it ([`Banned`](crate::ban::Banned)),
    /// which replaces the decision when the strike starts a ban. Returns
    /// whether the state changed; the algorithms themselves keep no
    /// strikes and change nothing.
    #[inline]
    fn strike(&self, _state: &mut Self::State, _now: u64, _decision: &mut Decision) -> bool {
        false
    }

    /// Counts `cost` at `at` whatever the limit says — a request already
    /// made, or usage merged from elsewhere — and returns the usage the
    /// state holds afterwards: for the windows, the count in the window
    /// ending at `at` (or at the state's newest instant, when that is
    /// later); for `token_bucket`, `gcra` and `leaky_bucket`, the units taken
    /// and not yet given back (`burst − remaining`, above `burst` while in
    /// debt). Usage at or above [`limit`](Self::limit) refuses every request
    /// of non-zero cost until enough of it has left. Cost 0 changes nothing
    /// and reports the usage; the cost is not bounded by the capacity
    /// (merged usage may exceed it) and counts saturate far beyond it.
    /// `None` for `concurrency`, whose leases cannot be merged.
    ///
    /// What a forced record does to each algorithm's state is documented
    /// in docs/semantics.md ("Recording usage").
    ///
    /// ```
    /// use tollgate_core::algorithm::{Algorithm, Gcra};
    /// use tollgate_core::time::NANOS_PER_SEC as S;
    /// use tollgate_core::Rate;
    ///
    /// // 1 a second, 2 at once.
    /// let gcra = Gcra::new(Rate::per_second(1).unwrap(), 2).unwrap();
    /// let mut state = gcra.new_state();
    /// assert_eq!(gcra.record(&mut state, 0, 5), Some(5));
    /// // Three units over the burst: refused until they are paid back.
    /// assert!(!gcra.check(&mut state, 3 * S, 1).unwrap().allowed);
    /// assert!(gcra.check(&mut state, 4 * S, 1).unwrap().allowed);
    /// ```
    fn record(&self, _state: &mut Self::State, _at: u64, _cost: u64) -> Option<u64> {
        None
    }

    /// Gives back `cost` of a request admitted at `admitted_at`, at `now`
    /// (the cheaper side of [`settle`](Self::settle)). Returns `Some(true)`
    /// when the cost went back into the state, `Some(false)` when the
    /// refund was dropped because what the request was counted in no
    /// longer counts (a window that has ended), and `None` when the
    /// algorithm takes no refunds (`concurrency`). A refund never leaves a
    /// state that admits more than one that never saw the request: at most
    /// a full bucket, never into a window that has ended.
    fn refund(
        &self,
        _state: &mut Self::State,
        _admitted_at: u64,
        _now: u64,
        _cost: u64,
    ) -> Option<bool> {
        None
    }

    /// Counts `cost` more for a request admitted at `admitted_at`, at
    /// `now`, whatever the limit says (the dearer side of
    /// [`settle`](Self::settle)): a forced [`record`](Self::record), so it
    /// may leave the key in debt. It lands where a request counted at
    /// `admitted_at` is counted when that still counts, so that a settled
    /// check decides as a check of the actual cost would have; the windows
    /// count it in the current window otherwise. `None` when the algorithm
    /// does not record (`concurrency`).
    fn charge(
        &self,
        state: &mut Self::State,
        admitted_at: u64,
        now: u64,
        cost: u64,
    ) -> Option<u64> {
        let _ = admitted_at;
        self.record(state, now, cost)
    }

    /// Settles a request admitted at `admitted_at` with cost `estimate`
    /// whose actual cost turned out to be `actual`: charges `actual −
    /// estimate` more ([`charge`](Self::charge), which may create a debt)
    /// or refunds `estimate − actual` ([`refund`](Self::refund)). `None`
    /// when the algorithm cannot settle (`concurrency`: release the lease
    /// instead). The rule per algorithm is in docs/semantics.md
    /// ("Settling a cost").
    ///
    /// ```
    /// use tollgate_core::algorithm::{Algorithm, FixedWindow, Settled};
    /// use tollgate_core::time::NANOS_PER_SEC as S;
    /// use tollgate_core::Rate;
    ///
    /// // 10 a minute; a request estimated at 8 used 3.
    /// let window = FixedWindow::new(Rate::per_minute(10).unwrap());
    /// let mut state = window.new_state();
    /// assert!(window.check(&mut state, S, 8).unwrap().allowed);
    /// assert!(!window.check(&mut state, 2 * S, 7).unwrap().allowed);
    /// let settled = window.settle(&mut state, S, 3 * S, 8, 3);
    /// assert_eq!(settled, Some(Settled::Refunded { dropped: false }));
    /// assert!(window.check(&mut state, 4 * S, 7).unwrap().allowed);
    /// ```
    fn settle(
        &self,
        state: &mut Self::State,
        admitted_at: u64,
        now: u64,
        estimate: u64,
        actual: u64,
    ) -> Option<Settled> {
        match actual.cmp(&estimate) {
            std::cmp::Ordering::Greater => self
                .charge(state, admitted_at, now, actual - estimate)
                .map(|_| Settled::Charged),
            std::cmp::Ordering::Less => self
                .refund(state, admitted_at, now, estimate - actual)
                .map(|applied| Settled::Refunded { dropped: !applied }),
            // Nothing to change (a record of cost 0 writes nothing), but
            // only where settling is possible at all.
            std::cmp::Ordering::Equal => self.record(state, now, 0).map(|_| Settled::Exact),
        }
    }

    /// Heap bytes the state owns beyond its own size.
    fn heap_bytes(&self, _state: &Self::State) -> usize {
        0
    }

    /// Ends a lease; `true` when it was held. Only `concurrency` has leases.
    fn release(&self, _state: &mut Self::State, _lease: u64) -> bool {
        false
    }

    /// [`evaluate`](Self::evaluate) then, when admitted,
    /// [`commit`](Self::commit), and when refused, [`strike`](Self::strike):
    /// the decision for `cost` (validated, not 0) at `now`, counted when
    /// admitted. A rejection changes nothing but a ban's strikes.
    ///
    /// Algorithms whose evaluation and commit look up the same things (the
    /// sliding log and the stepped window find the window's start in both)
    /// override it to do that once; the result is always exactly that of
    /// the two calls (a property test holds every algorithm to it).
    #[inline(always)]
    fn admit(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision {
        let mut decision = self.evaluate(state, now, cost);
        if decision.allowed {
            decision.lease = self.commit(state, now, cost);
        } else {
            self.strike(state, now, &mut decision);
        }
        decision
    }

    /// Checks `cost` at `now` and counts it when admitted.
    ///
    /// `cost` 0 is a peek: always allowed, nothing changes.
    #[inline]
    fn check(&self, state: &mut Self::State, now: u64, cost: u64) -> Result<Decision, LimitError> {
        if cost == 0 {
            return self.try_evaluate(state, now, cost);
        }
        self.validate_cost(cost)?;
        Ok(self.admit(state, now, cost))
    }

    /// [`evaluate`](Self::evaluate) with the cost validated and the peek
    /// rule applied: `cost` 0 is always allowed.
    #[inline]
    fn try_evaluate(
        &self,
        state: &Self::State,
        now: u64,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        self.validate_cost(cost)?;
        let mut decision = self.evaluate(state, now, cost);
        if cost == 0 {
            decision.allowed = true;
            decision.retry_after = Duration::ZERO;
            decision.delay = Duration::ZERO;
        }
        Ok(decision)
    }

    /// The current state, reported without counting anything.
    fn peek(&self, state: &Self::State, now: u64) -> Decision {
        let mut decision = self.evaluate(state, now, 0);
        decision.allowed = true;
        decision.retry_after = Duration::ZERO;
        decision.delay = Duration::ZERO;
        decision
    }

    /// An error when `cost` can never be admitted.
    #[inline]
    fn validate_cost(&self, cost: u64) -> Result<(), LimitError> {
        if cost > self.capacity() {
            return Err(LimitError::CostTooLarge {
                cost,
                capacity: self.capacity(),
            });
        }
        Ok(())
    }

    /// The earliest instant `cost` would be admitted, validated; `now` for
    /// cost 0, which is always admitted.
    fn earliest(&self, state: &Self::State, now: u64, cost: u64) -> Result<u64, LimitError> {
        self.validate_cost(cost)?;
        if cost == 0 {
            return Ok(now);
        }
        Ok(self.next_available(state, now, cost))
    }

    /// Books the earliest slot for `cost`, unless the caller would have to
    /// wait longer than `max_wait` (no bound when `None`), in which case
    /// nothing is booked. Cost 0 is a peek: no wait, nothing booked.
    fn reserve(
        &self,
        state: &mut Self::State,
        now: u64,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<Reservation, LimitError> {
        self.validate_cost(cost)?;
        let slot = self
            .slot(state, now, cost)
            .ok_or(LimitError::ReservationUnsupported)?;
        if cost == 0 {
            return Ok(Reservation {
                wait: Duration::ZERO,
                decision: self.peek(state, now),
            });
        }
        let max_wait = max_wait.map_or(u64::MAX, crate::time::duration_to_nanos);
        let wait = Duration::from_nanos(slot.wait);
        if slot.wait > max_wait {
            let mut decision = self.peek(state, now);
            decision.allowed = false;
            decision.retry_after = Duration::from_nanos(slot.wait - max_wait);
            return Ok(Reservation { wait, decision });
        }
        self.book(state, now, slot, cost);
        Ok(Reservation {
            wait,
            decision: self.peek(state, now),
        })
    }
}

/// Nanoseconds from `now` until `instant`, zero when it has passed.
pub(crate) fn until(now: u64, instant: u64) -> Duration {
    Duration::from_nanos(instant.saturating_sub(now))
}
