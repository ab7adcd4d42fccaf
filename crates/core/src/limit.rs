//! A limit as configured: which algorithm, at what rate, with which options;
//! validated once into an [`AnyAlgorithm`] that stores dispatch on.
//!
//! ```
//! use tollgate_core::{AlgorithmName, Limit, Rate};
//!
//! let limit = Limit::new(AlgorithmName::TokenBucket, "10/s".parse().unwrap()).with_burst(20);
//! let algorithm = limit.build().unwrap();
//! assert_eq!(algorithm.limit(), 20);
//! assert!(Limit::new(AlgorithmName::FixedWindow, Rate::per_second(5).unwrap())
//!     .with_burst(9)
//!     .build()
//!     .is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingWindowCounter, SlidingWindowLog,
    SteppedWindow, TokenBucket, Wide,
};
use crate::ban::Ban;
use crate::calendar::{Calendar, CalendarError};
use crate::rate::{Rate, RateError};

/// The lease time of a `concurrency` limit when none is configured.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// Everything that can be wrong with a limit or a request against it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The algorithm name is not one of the eight.
    #[error("unknown algorithm {name:?} (expected one of: {})", AlgorithmName::ALL_NAMES.join(", "))]
    UnknownAlgorithm {
        /// The rejected name.
        name: String,
    },
    /// The rate text or values are invalid.
    #[error(transparent)]
    Rate(#[from] RateError),
    /// `burst` is zero or too large.
    #[error("burst {burst} is out of range (1 to {})", crate::rate::MAX_LIMIT)]
    Burst {
        /// The rejected burst.
        burst: u64,
    },
    /// `step` is shorter than 1 ms or longer than the period.
    #[error("step {step:?} must be between 1ms and the limit's period")]
    Step {
        /// The rejected step.
        step: Duration,
    },
    /// A token bucket's capacity does not fit the chosen token storage (only
    /// when asking for [`Narrow`](crate::algorithm::Narrow) storage directly;
    /// [`Limit::build`] picks one that fits).
    #[error("burst {burst} at this rate needs a token bucket with wide storage")]
    Storage {
        /// The burst asked for.
        burst: u64,
    },
    /// `lease_ttl` is shorter than 1 ms.
    #[error("lease_ttl {lease_ttl:?} must be at least 1ms")]
    LeaseTtl {
        /// The rejected lease time.
        lease_ttl: Duration,
    },
    /// An option was given to an algorithm that has no use for it.
    #[error("option {option:?} does not apply to algorithm {algorithm}")]
    Option {
        /// The option's name.
        option: &'static str,
        /// The algorithm it was given to.
        algorithm: AlgorithmName,
    },
    /// The request's cost exceeds what the limit can ever admit.
    #[error("cost {cost} can never be admitted: the limit's capacity is {capacity}")]
    CostTooLarge {
        /// The request's cost.
        cost: u64,
        /// The limit's capacity.
        capacity: u64,
    },
    /// A ban's option is out of range.
    #[error("ban `{field}` must be {expected}")]
    Ban {
        /// The option: `after`, `within` or `for`.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A calendar window's unit, time zone or anchor is invalid.
    #[error(transparent)]
    Calendar(#[from] CalendarError),
    /// The store deciding the limit does not carry this option (yet).
    #[error("option {option:?} is not available on the {store} store")]
    NotOnStore {
        /// The option's name.
        option: &'static str,
        /// The store's kind.
        store: &'static str,
    },
    /// Reservations were asked of an algorithm that has no time slots.
    #[error("reservations are not available for concurrency limits")]
    ReservationUnsupported,
    /// `sync: async` on a limit whose usage cannot be merged across
    /// instances (a `concurrency` limit, or one with a ban).
    #[error("sync: async does not apply to {what} ({why}); leave sync out or set it to exact")]
    SyncAsync {
        /// What the limit is.
        what: &'static str,
        /// Why it must stay exact.
        why: &'static str,
    },
    /// A sync mode that is neither `exact` nor `async`.
    #[error("unknown sync mode {name:?} (expected exact or async)")]
    UnknownSyncMode {
        /// The rejected name.
        name: String,
    },
}

/// How a limit is shared between instances on a shared store (Redis): see
/// [`Limit::sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// `exact`: every decision in the shared store.
    Exact,
    /// `async`: decided from a local copy, usage shared in the background.
    Async,
}

impl SyncMode {
    /// The configuration name: `exact` or `async`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Exact => "exact",
            SyncMode::Async => "async",
        }
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SyncMode {
    type Err = LimitError;

    fn from_str(name: &str) -> Result<Self, LimitError> {
        match name {
            "exact" => Ok(SyncMode::Exact),
            "async" => Ok(SyncMode::Async),
            _ => Err(LimitError::UnknownSyncMode {
                name: name.to_string(),
            }),
        }
    }
}

/// The eight algorithms, by their configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlgorithmName {
    /// `token_bucket`
    TokenBucket,
    /// `gcra`
    Gcra,
    /// `leaky_bucket`
    LeakyBucket,
    /// `fixed_window`
    FixedWindow,
    /// `sliding_window_log`
    SlidingWindowLog,
    /// `sliding_window_counter`
    SlidingWindowCounter,
    /// `stepped_window`
    SteppedWindow,
    /// `concurrency`
    Concurrency,
}

impl AlgorithmName {
    /// Every algorithm, in SPEC order.
    pub const ALL: [AlgorithmName; 8] = [
        AlgorithmName::TokenBucket,
        AlgorithmName::Gcra,
        AlgorithmName::LeakyBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::SlidingWindowCounter,
        AlgorithmName::SteppedWindow,
        AlgorithmName::Concurrency,
    ];

    const ALL_NAMES: [&'static str; 8] = [
        "token_bucket",
        "gcra",
        "leaky_bucket",
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "stepped_window",
        "concurrency",
    ];

    /// The configuration name, e.g. `token_bucket`.
    pub fn as_str(self) -> &'static str {
        Self::ALL_NAMES[self as usize]
    }

    /// Whether `burst` applies (the bucket algorithms).
    pub fn has_burst(self) -> bool {
        matches!(
            self,
            AlgorithmName::TokenBucket | AlgorithmName::Gcra | AlgorithmName::LeakyBucket
        )
    }
}

impl fmt::Display for AlgorithmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlgorithmName {
    type Err = LimitError;

    fn from_str(name: &str) -> Result<Self, LimitError> {
        Self::ALL_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| LimitError::UnknownAlgorithm {
                name: name.to_string(),
            })
    }
}

/// A limit as configured, before validation.
///
/// For `concurrency` the rate's `N` is the number of requests in flight and
/// its period is ignored.
///
/// Limits compare and hash without their [`sync`](Limit::sync) mode: it
/// says how a shared store keeps the state, not what the state counts, so
/// a limit's state is the same whichever mode decides it (and the memory
/// store, which ignores the mode, keeps one table for both).
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// The algorithm.
    pub algorithm: AlgorithmName,
    /// `N` per `P`.
    pub rate: Rate,
    /// Bucket capacity (bucket algorithms only); defaults to `N`.
    pub burst: Option<u64>,
    /// Step size (`stepped_window` only); defaults to the Databox table.
    pub step: Option<Duration>,
    /// Lease lifetime (`concurrency` only); defaults to [`DEFAULT_LEASE_TTL`].
    pub lease_ttl: Option<Duration>,
    /// The penalty box around the limit (any algorithm): see [`Ban`].
    pub ban: Option<Ban>,
    /// Calendar windows instead of epoch-aligned periods (`fixed_window`
    /// and `sliding_window_counter` only): see [`Calendar`]. The rate's
    /// period is then nominal (named, not used by the windows).
    pub calendar: Option<Calendar>,
    /// How instances on a shared store share the limit, when the limit says
    /// (`sync: exact | async`); `None` follows the process's `--sync`. The
    /// memory store ignores it. `async` is refused on `concurrency` limits
    /// and limits with a ban, whose usage cannot be merged.
    pub sync: Option<SyncMode>,
}

/// The fields a [`Limit`] compares and hashes by: all but `sync`.
type Identity<'l> = (
    &'l AlgorithmName,
    &'l Rate,
    &'l Option<u64>,
    &'l Option<Duration>,
    &'l Option<Duration>,
    &'l Option<Ban>,
    &'l Option<Calendar>,
);

impl Limit {
    /// What `derive` would compare and hash, without `sync` (see the
    /// type's docs), in field order (so the hash is the one `derive`
    /// gives); listing the fields by name makes a new one a compile error
    /// here.
    fn identity(&self) -> Identity<'_> {
        let Limit {
            algorithm,
            rate,
            burst,
            step,
            lease_ttl,
            ban,
            calendar,
            sync: _,
        } = self;
        (algorithm, rate, burst, step, lease_ttl, ban, calendar)
    }
}

impl PartialEq for Limit {
    fn eq(&self, other: &Limit) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Limit {}

impl std::hash::Hash for Limit {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl Limit {
    /// `algorithm` at `rate` with default options.
    pub fn new(algorithm: AlgorithmName, rate: Rate) -> Limit {
        Limit {
            algorithm,
            rate,
            burst: None,
            step: None,
            lease_ttl: None,
            ban: None,
            calendar: None,
            sync: None,
        }
    }

    /// Sets how instances on a shared store share the limit.
    pub fn with_sync(mut self, sync: SyncMode) -> Limit {
        self.sync = Some(sync);
        self
    }

    /// Counts in the windows of `calendar` instead of epoch-aligned periods.
    pub fn with_calendar(mut self, calendar: Calendar) -> Limit {
        self.calendar = Some(calendar);
        self
    }

    /// Sets the bucket capacity.
    pub fn with_burst(mut self, burst: u64) -> Limit {
        self.burst = Some(burst);
        self
    }

    /// Sets the stepped window's step.
    pub fn with_step(mut self, step: Duration) -> Limit {
        self.step = Some(step);
        self
    }

    /// Sets the concurrency lease lifetime.
    pub fn with_lease_ttl(mut self, lease_ttl: Duration) -> Limit {
        self.lease_ttl = Some(lease_ttl);
        self
    }

    /// Puts a ban around the limit.
    pub fn with_ban(mut self, ban: Ban) -> Limit {
        self.ban = Some(ban);
        self
    }

    /// An error when the limit says `sync: async` but its usage cannot be
    /// merged across instances: a `concurrency` limit, or one with a ban.
    /// [`build`](Limit::build) checks it too; stores that keep built
    /// limits by limit (which compare without the mode) need it on its
    /// own.
    pub fn check_sync(&self) -> Result<(), LimitError> {
        if self.sync != Some(SyncMode::Async) {
            return Ok(());
        }
        if self.algorithm == AlgorithmName::Concurrency {
            return Err(LimitError::SyncAsync {
                what: "concurrency limits",
                why: "a lease is held in one place, never approximated",
            });
        }
        if self.ban.is_some() {
            return Err(LimitError::SyncAsync {
                what: "a limit with a ban",
                why: "its strikes count refusals, which instances cannot merge",
            });
        }
        Ok(())
    }

    /// Validates the options and builds the algorithm (without its ban,
    /// which stores put around it: see [`Banned`](crate::ban::Banned)).
    pub fn build(&self) -> Result<AnyAlgorithm, LimitError> {
        let name = self.algorithm;
        let reject = |option| LimitError::Option {
            option,
            algorithm: name,
        };
        if self.burst.is_some() && !name.has_burst() {
            return Err(reject("burst"));
        }
        if self.step.is_some() && name != AlgorithmName::SteppedWindow {
            return Err(reject("step"));
        }
        if self.lease_ttl.is_some() && name != AlgorithmName::Concurrency {
            return Err(reject("lease_ttl"));
        }
        if self.calendar.is_some()
            && !matches!(
                name,
                AlgorithmName::FixedWindow | AlgorithmName::SlidingWindowCounter
            )
        {
            return Err(reject("calendar window"));
        }
        self.check_sync()?;
        let burst = self.burst.unwrap_or(self.rate.limit());
        let rate = self.rate;
        Ok(match name {
            AlgorithmName::TokenBucket
                if TokenBucket::<crate::algorithm::Narrow>::fits(rate, burst) =>
            {
                AnyAlgorithm::TokenBucket(TokenBucket::new(rate, burst)?)
            }
            AlgorithmName::TokenBucket => {
                AnyAlgorithm::WideTokenBucket(TokenBucket::<Wide>::with_storage(rate, burst)?)
            }
            AlgorithmName::Gcra => AnyAlgorithm::Gcra(Gcra::new(rate, burst)?),
            AlgorithmName::LeakyBucket => AnyAlgorithm::LeakyBucket(LeakyBucket::new(rate, burst)?),
            AlgorithmName::FixedWindow => {
                AnyAlgorithm::FixedWindow(FixedWindow::with_calendar(rate, self.calendar))
            }
            AlgorithmName::SlidingWindowLog => {
                AnyAlgorithm::SlidingWindowLog(SlidingWindowLog::new(rate))
            }
            AlgorithmName::SlidingWindowCounter => AnyAlgorithm::SlidingWindowCounter(
                SlidingWindowCounter::with_calendar(rate, self.calendar),
            ),
            AlgorithmName::SteppedWindow => {
                AnyAlgorithm::SteppedWindow(SteppedWindow::new(rate, self.step)?)
            }
            AlgorithmName::Concurrency => AnyAlgorithm::Concurrency(Concurrency::new(
                rate.limit(),
                self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL),
            )?),
        })
    }
}

impl fmt::Display for Limit {
    /// A stable, human-readable name such as `token_bucket_10_per_1s_burst_20`,
    /// used where a limit has no configured name (e.g. the IETF headers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_", self.algorithm)?;
        match self.calendar {
            // `fixed_window_10000_per_calendar_month_Europe/London_15`
            Some(calendar) => write!(
                f,
                "{}_per_{}_{}_{}",
                self.rate.limit(),
                calendar.unit(),
                calendar.zone_name(),
                calendar.anchor()
            )?,
            None => self.rate.write_with(f, "_per_")?,
        }
        if let Some(burst) = self.burst {
            write!(f, "_burst_{burst}")?;
        }
        if let Some(step) = self.step {
            write!(f, "_step_{}ms", step.as_millis())?;
        }
        if let Some(ttl) = self.lease_ttl {
            write!(f, "_ttl_{}ms", ttl.as_millis())?;
        }
        if let Some(ban) = self.ban {
            write!(
                f,
                "_ban_{}_in_{}ms_for_{}ms",
                ban.after(),
                ban.within().as_millis(),
                ban.duration().as_millis()
            )?;
        }
        Ok(())
    }
}

/// A validated algorithm of any kind; stores match on it once to pick a
/// typed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyAlgorithm {
    /// See [`TokenBucket`]: its 64-bit token count, the usual case.
    TokenBucket(TokenBucket),
    /// See [`TokenBucket`]: a 128-bit token count, for capacities the
    /// 64-bit count cannot hold.
    WideTokenBucket(TokenBucket<Wide>),
    /// See [`Gcra`].
    Gcra(Gcra),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`SlidingWindowLog`].
    SlidingWindowLog(SlidingWindowLog),
    /// See [`SlidingWindowCounter`].
    SlidingWindowCounter(SlidingWindowCounter),
    /// See [`SteppedWindow`].
    SteppedWindow(SteppedWindow),
    /// See [`Concurrency`].
    Concurrency(Concurrency),
}

/// Runs `$body` with `$a` bound to the algorithm inside any variant.
macro_rules! each_algorithm {
    ($any:expr, $a:ident => $body:expr) => {
        match $any {
            AnyAlgorithm::TokenBucket($a) => $body,
            AnyAlgorithm::WideTokenBucket($a) => $body,
            AnyAlgorithm::Gcra($a) => $body,
            AnyAlgorithm::LeakyBucket($a) => $body,
            AnyAlgorithm::FixedWindow($a) => $body,
            AnyAlgorithm::SlidingWindowLog($a) => $body,
            AnyAlgorithm::SlidingWindowCounter($a) => $body,
            AnyAlgorithm::SteppedWindow($a) => $body,
            AnyAlgorithm::Concurrency($a) => $body,
        }
    };
}

impl AnyAlgorithm {
    /// The largest cost one request may ask for.
    pub fn capacity(&self) -> u64 {
        each_algorithm!(self, a => a.capacity())
    }

    /// An error when `cost` can never be admitted.
    pub fn validate_cost(&self, cost: u64) -> Result<(), LimitError> {
        each_algorithm!(self, a => a.validate_cost(cost))
    }

    /// Whether the algorithm books time slots ([`Algorithm::reserve`]);
    /// every algorithm but `concurrency` does.
    pub fn takes_reservations(&self) -> bool {
        each_algorithm!(self, a => a.slot(&a.new_state(), 0, 0).is_some())
    }

    /// The configured maximum.
    pub fn limit(&self) -> u64 {
        each_algorithm!(self, a => a.limit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in AlgorithmName::ALL {
            assert_eq!(name.as_str().parse::<AlgorithmName>(), Ok(name));
        }
        let err = "leaky".parse::<AlgorithmName>().unwrap_err().to_string();
        assert!(
            err.contains("\"leaky\"") && err.contains("token_bucket"),
            "{err}"
        );
    }

    #[test]
    fn options_are_checked_against_the_algorithm() {
        let rate = Rate::per_second(10).unwrap();
        let limit = |a| Limit::new(a, rate);
        assert!(limit(AlgorithmName::Gcra).with_burst(0).build().is_err());
        assert!(limit(AlgorithmName::SlidingWindowLog)
            .with_step(Duration::from_secs(1))
            .build()
            .is_err());
        assert!(limit(AlgorithmName::SteppedWindow)
            .with_step(Duration::from_secs(2))
            .build()
            .is_err());
        assert!(limit(AlgorithmName::SteppedWindow)
            .with_step(Duration::from_micros(10))
            .build()
            .is_err());
        assert!(limit(AlgorithmName::Concurrency)
            .with_lease_ttl(Duration::ZERO)
            .build()
            .is_err());
        assert!(limit(AlgorithmName::TokenBucket)
            .with_lease_ttl(Duration::from_secs(1))
            .build()
            .is_err());
        for name in AlgorithmName::ALL {
            assert_eq!(limit(name).build().map(|a| a.limit()), Ok(10), "{name}");
        }
    }

    #[test]
    fn token_buckets_store_64_bit_counts_unless_the_capacity_needs_more() {
        use crate::algorithm::{Narrow, TokenBucketState};
        assert_eq!(std::mem::size_of::<TokenBucketState<Narrow>>(), 16);
        assert_eq!(std::mem::size_of::<TokenBucketState<Wide>>(), 24);
        let common = Limit::new(AlgorithmName::TokenBucket, "1000000/d".parse().unwrap());
        assert!(matches!(common.build(), Ok(AnyAlgorithm::TokenBucket(_))));
        // A prime count over a week: 1000003 tokens of 604800e9 units each.
        let extreme = Limit::new(AlgorithmName::TokenBucket, "1000003/w".parse().unwrap());
        assert!(matches!(
            extreme.build(),
            Ok(AnyAlgorithm::WideTokenBucket(_))
        ));
        let rate = "1000003/w".parse().unwrap();
        assert_eq!(
            TokenBucket::<Narrow>::with_storage(rate, 1_000_003),
            Err(LimitError::Storage { burst: 1_000_003 })
        );
    }

    #[test]
    fn the_sync_mode_is_refused_where_usage_cannot_merge_and_left_out_of_comparisons() {
        use std::hash::{BuildHasher, RandomState};
        let rate = Rate::per_second(10).unwrap();
        let plain = Limit::new(AlgorithmName::Gcra, rate);
        let synced = plain.with_sync(SyncMode::Async);
        assert_eq!(plain, synced);
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(plain), hasher.hash_one(synced));
        assert!(synced.build().is_ok());
        assert_ne!(plain, plain.with_burst(11).with_sync(SyncMode::Async));
        let leases = Limit::new(AlgorithmName::Concurrency, rate);
        assert!(leases.with_sync(SyncMode::Exact).build().is_ok());
        let err = leases.with_sync(SyncMode::Async).build().unwrap_err();
        assert!(matches!(err, LimitError::SyncAsync { .. }), "{err}");
        assert!(err.to_string().contains("concurrency"), "{err}");
        let ban =
            crate::ban::Ban::new(3, Duration::from_secs(60), Duration::from_secs(600)).unwrap();
        let banned = plain.with_ban(ban);
        assert!(banned.with_sync(SyncMode::Exact).build().is_ok());
        let err = banned.with_sync(SyncMode::Async).build().unwrap_err();
        assert!(err.to_string().contains("ban"), "{err}");
        assert_eq!("async".parse::<SyncMode>(), Ok(SyncMode::Async));
        assert_eq!("exact".parse::<SyncMode>(), Ok(SyncMode::Exact));
        assert!("eventual".parse::<SyncMode>().is_err());
    }

    #[test]
    fn display_names_are_stable() {
        let rate = Rate::per_second(10).unwrap();
        assert_eq!(
            Limit::new(AlgorithmName::TokenBucket, rate)
                .with_burst(20)
                .to_string(),
            "token_bucket_10_per_s_burst_20"
        );
    }
}
