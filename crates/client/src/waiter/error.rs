//! What can go wrong building a waiter or asking it for permits.

use tollgate_core::LimitError;

/// A waiter could not be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaiterError {
    /// A ring holds one slot per permit of `N`, and `N` is too large for it.
    #[error("a ring waiter holds one slot per permit; {limit} is more than its {max} (use a GCRA waiter)")]
    RingTooLarge {
        /// The rate's `N`.
        limit: u64,
        /// The largest ring, [`MAX_RING`](super::MAX_RING).
        max: u64,
    },
    /// The GCRA settings are invalid (a burst of zero or too large).
    #[error(transparent)]
    Limit(LimitError),
}

/// A call asked for more permits at once than the waiter can ever grant
/// together: waiting would never end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "asked for {requested} permits at once, but this waiter grants at most {capacity} together"
)]
pub struct TooManyPermits {
    /// The permits asked for.
    pub requested: u64,
    /// The most the waiter grants at once (the ring's `N`, or the burst).
    pub capacity: u64,
}
