//! A GCRA waiter's schedule: the core's [`Gcra`], one integer of state.
//!
//! Permits go at the rate `N/P` with bursts of up to `burst` (default `N`),
//! with exactly the decisions of `tollgate-core`'s `gcra` algorithm (and so of
//! its `token_bucket` with the same rate and burst): this module holds a
//! [`Gcra`] and its state and asks them, rather than doing the arithmetic
//! again.

use tollgate_core::algorithm::{Gcra, GcraState};
use tollgate_core::{Algorithm, Rate};

use super::error::WaiterError;
use super::schedule::Schedule;

/// The generic cell rate algorithm: `N` per `P`, evenly, with bursts of up
/// to `burst` permits.
#[derive(Debug, Clone)]
pub struct GcraSchedule {
    gcra: Gcra,
    state: GcraState,
}

impl GcraSchedule {
    /// `rate`, with bursts of up to `rate.limit()` permits.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        Self::with_burst(rate, rate.limit())
    }

    /// `rate`, with bursts of up to `burst` permits (at least 1).
    pub fn with_burst(rate: Rate, burst: u64) -> Result<Self, WaiterError> {
        let gcra = Gcra::new(rate, burst).map_err(WaiterError::Limit)?;
        Ok(GcraSchedule {
            state: gcra.new_state(),
            gcra,
        })
    }
}

impl Schedule for GcraSchedule {
    #[inline]
    fn capacity(&self) -> u64 {
        self.gcra.capacity()
    }

    #[inline]
    fn earliest(&self, now: u64, n: u64) -> u64 {
        self.gcra.next_available(&self.state, now, n)
    }

    #[inline]
    fn record(&mut self, at: u64, n: u64) {
        // The theoretical arrival time only moves forward, so an instant
        // earlier than one already recorded counts as that one.
        self.gcra.commit(&mut self.state, at, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn bursts_then_paces_at_the_emission_interval() {
        let mut g = GcraSchedule::with_burst(Rate::per_second(4).unwrap(), 2).unwrap();
        assert!(g.try_record(0, 1));
        assert!(g.try_record(0, 1));
        assert!(!g.try_record(0, 1));
        assert_eq!(g.earliest(0, 1), 250 * MS);
        assert_eq!(g.earliest(0, 2), 500 * MS);
        g.record(250 * MS, 1);
        assert_eq!(g.earliest(260 * MS, 1), 500 * MS);
    }

    #[test]
    fn bad_bursts_are_an_error() {
        let rate = Rate::per_second(4).unwrap();
        assert!(matches!(
            GcraSchedule::with_burst(rate, 0),
            Err(WaiterError::Limit(_))
        ));
        assert_eq!(GcraSchedule::new(rate).unwrap().capacity(), 4);
    }
}
