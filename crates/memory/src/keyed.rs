//! What the store needs to know about each algorithm beyond the core
//! [`Algorithm`] trait: how its table entries are aligned.
//!
//! The core owns the semantics; this module only classifies.

use tollgate_core::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, Narrow, SlidingWindowCounter,
    SlidingWindowLog, StateCodec, SteppedWindow, TokenBucket, Wide,
};
use tollgate_core::ban::Banned;

/// Aligns a table entry to 32 bytes (a zero-sized field).
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(32))]
pub(crate) struct Line32;

/// An [`Algorithm`] a keyed table can hold.
pub(crate) trait Keyed: Algorithm + StateCodec {
    /// A zero-sized type whose alignment the table's entries take. An entry
    /// of 32 bytes aligned to its size never straddles two cache lines,
    /// which an 8-aligned one in a table allocated at an odd multiple of 16
    /// bytes does half of the time: over many keys, that is one cache miss
    /// more per check. `()` keeps the natural alignment, for entries that
    /// alignment would only grow: the 24-byte entries of `gcra`,
    /// `token_bucket` and `fixed_window` straddle a line one time in four,
    /// and the 48- and 56-byte ones of `concurrency`, the sliding log and the
    /// stepped window most of the time; over many keys a smaller table
    /// measured faster than aligned entries (docs/benchmarks.md).
    type Line: Copy + Default + std::fmt::Debug + Send + Sync + 'static;
}

impl Keyed for TokenBucket<Narrow> {
    type Line = ();
}

impl Keyed for TokenBucket<Wide> {
    type Line = Line32;
}

impl Keyed for Gcra {
    type Line = ();
}

impl Keyed for LeakyBucket {
    type Line = Line32;
}

impl Keyed for FixedWindow {
    type Line = ();
}

impl Keyed for SlidingWindowLog {
    type Line = ();
}

impl Keyed for SlidingWindowCounter {
    type Line = ();
}

impl Keyed for Concurrency {
    type Line = ();
}

impl Keyed for SteppedWindow {
    type Line = ();
}

/// A limit with a ban keeps the ban's state beside the limit's in the
/// same entry, naturally aligned (the ban's 24 bytes make alignment a
/// matter of padding).
impl<A: Keyed> Keyed for Banned<A> {
    type Line = ();
}
