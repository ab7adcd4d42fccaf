//! The tollgate rate-limiting core: every algorithm with exact semantics, as
//! pure functions of state, time and cost.
//!
//! This crate does no I/O and reads no clock on its own: callers pass `now`
//! (nanoseconds since the Unix epoch) into every operation. Stores
//! (`tollgate-memory`, `tollgate-redis`) keep the per-key state and call the
//! algorithms under their own locking.
//!
//! # Layout
//!
//! - [`rate`]: limit notation (`10/s`, `5/15min`, `N per P`) into [`Rate`].
//! - [`limit`]: a configured [`Limit`] (algorithm + rate + options), validated
//!   into an [`AnyAlgorithm`].
//! - [`algorithm`]: the [`Algorithm`] trait and the eight algorithms.
//! - [`calendar`]: calendar windows (a day, week, month or year in an IANA
//!   time zone, from an anchor) for the window algorithms.
//! - [`ban`]: the penalty box, a [`Ban`](ban::Ban) around any limit that
//!   refuses a key outright for a while after repeated refusals.
//! - [`decision`]: [`Decision`] and [`Reservation`], the answers.
//! - [`policy`]: the quota a limit announces (`RateLimit-Policy`), one a
//!   client can follow without being refused.
//! - [`time`]: the [`Clock`](time::Clock) trait, a system clock and a manual
//!   one for tests.
//! - [`store`]: the [`Store`] trait that servers decide through, and its
//!   value types.
//!
//! # Example
//!
//! ```
//! use tollgate_core::algorithm::{Algorithm, TokenBucket};
//! use tollgate_core::time::NANOS_PER_SEC;
//! use tollgate_core::Rate;
//!
//! // Capacity 4, refilled at 2 per minute.
//! let bucket = TokenBucket::new(Rate::per_minute(2).unwrap(), 4).unwrap();
//! let mut state = bucket.new_state();
//! for _ in 0..4 {
//!     assert!(bucket.check(&mut state, 0, 1).unwrap().allowed);
//! }
//! let fifth = bucket.check(&mut state, 0, 1).unwrap();
//! assert!(!fifth.allowed);
//! assert_eq!(fifth.retry_after.as_secs(), 30);
//! assert!(bucket.check(&mut state, 60 * NANOS_PER_SEC, 2).unwrap().allowed);
//! ```

pub mod algorithm;
pub mod ban;
pub mod calendar;
pub mod decision;
pub mod limit;
pub mod policy;
pub mod rate;
pub mod store;
pub mod time;

pub use algorithm::Algorithm;
pub use decision::{BanRefusal, Decision, Reservation};
pub use limit::{AlgorithmName, AnyAlgorithm, Limit, LimitError, SyncMode};
pub use rate::{Rate, RateError};
pub use store::{LimitKey, Moment, MultiReservation, Store, StoreError, StoreStatus};
