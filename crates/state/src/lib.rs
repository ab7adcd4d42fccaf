//! The shared state format of tollgate's limits in Redis, version 1
//! (docs/redis-state.md): a limit's spec words (what the store sends with
//! each call) into a [`Format`], and each algorithm's stored value read
//! into the core's state and written back from it.
//!
//! The Redis module (crates/redis-module) decides inside Redis on the
//! states it reads here, the Redis store (crates/redis) writes its limits'
//! spec words with it, and the async sync mode (crates/sync) reads a key's
//! global state back into a local copy through it. The Lua scripts (crates/redis/src/lua)
//! read and write the same bytes; the conformance suite holds the three to
//! one another. The crate does no I/O: it turns bytes into states and back.
//!
//! ```
//! use tollgate_core::{AlgorithmName, Limit, Rate};
//! use tollgate_state::{algorithm_spec, AnyFormat};
//!
//! let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(10).unwrap());
//! assert_eq!(algorithm_spec(&limit), "fixed_window 10 1000000000");
//! let AnyFormat::Fixed(format) = AnyFormat::parse(algorithm_spec(&limit).as_bytes()).unwrap()
//! else {
//!     unreachable!()
//! };
//! use tollgate_state::{decode_value, Format};
//! let state = decode_value(&format, Some(b"1763000000 4")).unwrap();
//! let mut value = Vec::new();
//! format.encode(&state, &mut value);
//! assert_eq!(value, b"1763000000 4");
//! ```
//!
//! # Layout
//!
//! - `format`: the [`Format`] trait and each algorithm's value.
//! - `spec`: spec words into an [`AnyFormat`], and a [`Limit`]'s words.
//! - [`text`]: strict decimal numbers and words.

mod format;
mod spec;
pub mod text;

pub use format::{
    CounterFormat, FixedFormat, Format, GcraFormat, LeakyFormat, Leases, Log, Steps, TokenFormat,
};
pub use spec::{algorithm_spec, AnyFormat, SpecError};

use tollgate_core::algorithm::Algorithm;
use tollgate_core::Limit;

/// Why a stored value could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueError {
    /// The value starts with another format version's tag.
    NotVersion1,
    /// A version-1 value that is not a valid state of the limit.
    BadState,
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueError::NotVersion1 => "a state is not format version 1",
            ValueError::BadState => "bad state (not a valid version 1 value)",
        })
    }
}

impl std::error::Error for ValueError {}

/// The state `stored` holds for `format`'s limit: a fresh state when there
/// is none (`None`: nothing touched the limit on that key).
pub fn decode_value<F: Format>(
    format: &F,
    stored: Option<&[u8]>,
) -> Result<<F::Algorithm as Algorithm>::State, ValueError> {
    match stored {
        None => Ok(format.algorithm().new_state()),
        Some(value) => {
            if !value.first().is_some_and(u8::is_ascii_digit) {
                return Err(ValueError::NotVersion1);
            }
            format.decode(value).ok_or(ValueError::BadState)
        }
    }
}

/// The format of `limit` (its algorithm, without a ban), as an engine
/// reads the spec the store sends for it.
pub fn format_of(limit: &Limit) -> Result<AnyFormat, SpecError> {
    AnyFormat::parse(algorithm_spec(limit).as_bytes())
}
