//! A limit's spec as the store sends it (the words the script's algorithms
//! parse, `crates/redis/src/cells.rs` `spec`) into a [`Spec`]: its ban and
//! the core algorithm with its state's encoding (`tollgate-state`'s
//! [`AnyFormat`]), from which each call's [`AnyCell`] is made with the
//! state read from Redis.

use tollgate_core::ban::Ban;
use tollgate_state::{decode_value, AnyFormat, Format, SpecError, ValueError};

use crate::ban;
use crate::cell::{AnyCell, Held};
use crate::error::Error;

/// A limit's spec, parsed: everything of the limit but its state.
#[derive(Clone, Copy)]
pub(crate) struct Spec {
    /// The limit's ban, when it has one.
    pub(crate) ban: Option<Ban>,
    /// The algorithm and its state's encoding.
    pub(crate) format: AnyFormat,
}

/// The cell of the limit `format` holding `stored` (`None`: a state
/// nothing touched).
pub(crate) fn cell(format: AnyFormat, stored: Option<&[u8]>) -> Result<AnyCell, Error> {
    Ok(match format {
        AnyFormat::Gcra(f) => AnyCell::Gcra(held(f, stored)?),
        AnyFormat::TokenNarrow(f) => AnyCell::TokenNarrow(held(f, stored)?),
        AnyFormat::TokenWide(f) => AnyCell::TokenWide(held(f, stored)?),
        AnyFormat::Leaky(f) => AnyCell::Leaky(held(f, stored)?),
        AnyFormat::Fixed(f) => AnyCell::Fixed(held(f, stored)?),
        AnyFormat::Counter(f) => AnyCell::Counter(held(f, stored)?),
        AnyFormat::Log(f) => AnyCell::Log(held(f, stored)?),
        AnyFormat::Steps(f) => AnyCell::Steps(held(f, stored)?),
        AnyFormat::Leases(f) => AnyCell::Leases(held(f, stored)?),
    })
}

/// The spec of `bytes`: a ban's words, if any, then the algorithm's.
pub(crate) fn parse(bytes: &[u8]) -> Result<Spec, Error> {
    let (ban, algorithm) = ban::split(bytes)?;
    Ok(Spec {
        ban,
        format: AnyFormat::parse(algorithm)?,
    })
}

impl From<SpecError> for Error {
    fn from(error: SpecError) -> Error {
        match error {
            SpecError::Bad(what) => Error::Bad(what),
            SpecError::UnknownAlgorithm => Error::UnknownAlgorithm,
        }
    }
}

impl From<ValueError> for Error {
    fn from(error: ValueError) -> Error {
        match error {
            ValueError::NotVersion1 => Error::NotVersion1,
            ValueError::BadState => Error::BadState,
        }
    }
}

/// The cell of `format` with its state read from `stored`.
fn held<F: Format>(format: F, stored: Option<&[u8]>) -> Result<Held<F>, Error> {
    let state = decode_value(&format, stored)?;
    Ok(Held { format, state })
}
