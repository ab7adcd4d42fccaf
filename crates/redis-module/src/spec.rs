//! A limit's spec as the store sends it (the words the script's algorithms
//! parse, `crates/redis/src/cells.rs` `spec`) into a [`Spec`]: its ban and
//! the core algorithm with its state's encoding, from which each call's
//! [`AnyCell`] is made with the state read from Redis.
//!
//! The bucket algorithms' `n p` come divided by their greatest common
//! divisor and name the units of the stored state, so a spec whose `n` and
//! `p` are not coprime is refused: the core would reduce them again and
//! read the state in other units.

use std::time::Duration;

use tollgate_core::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, Narrow, SlidingWindowCounter,
    SlidingWindowLog, SteppedWindow, TokenBucket, TokenStorage, Wide,
};
use tollgate_core::ban::Ban;
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::Rate;

use crate::ban;
use crate::cell::{AnyCell, Held};
use crate::error::Error;
use crate::state::{
    CounterFormat, FixedFormat, Format, GcraFormat, LeakyFormat, Leases, Log, Steps, TokenFormat,
};
use crate::text::{parse_u64, words};

/// A limit's spec, parsed: everything of the limit but its state.
#[derive(Clone, Copy)]
pub(crate) struct Spec {
    /// The limit's ban, when it has one.
    pub(crate) ban: Option<Ban>,
    /// The algorithm and its state's encoding.
    pub(crate) format: AnyFormat,
}

/// The format of any algorithm, held by value.
#[derive(Clone, Copy)]
pub(crate) enum AnyFormat {
    Gcra(GcraFormat),
    TokenNarrow(TokenFormat<Narrow>),
    TokenWide(TokenFormat<Wide>),
    Leaky(LeakyFormat),
    Fixed(FixedFormat),
    Counter(CounterFormat),
    Log(Log),
    Steps(Steps),
    Leases(Leases),
}

impl AnyFormat {
    /// The cell of this limit holding `stored` (`None`: a state nothing
    /// touched).
    pub(crate) fn cell(self, stored: Option<&[u8]>) -> Result<AnyCell, Error> {
        Ok(match self {
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
}

/// The spec of `bytes`: a ban's words, if any, then the algorithm's.
pub(crate) fn parse(bytes: &[u8]) -> Result<Spec, Error> {
    let (ban, algorithm) = ban::split(bytes)?;
    Ok(Spec {
        ban,
        format: format(algorithm)?,
    })
}

/// The format of an algorithm's spec words.
fn format(spec: &[u8]) -> Result<AnyFormat, Error> {
    let mut w = words(spec);
    let name = w.next().ok_or(Error::Bad("spec"))?;
    let mut number = |what| w.next().and_then(parse_u64).ok_or(Error::Bad(what));
    match name {
        b"gcra" => {
            let (rate, burst) = (bucket_rate(number("n")?, number("p")?)?, number("burst")?);
            let gcra = Gcra::new(rate, burst).map_err(bad_spec)?;
            Ok(AnyFormat::Gcra(GcraFormat(gcra)))
        }
        b"leaky_bucket" => {
            let (rate, burst) = (bucket_rate(number("n")?, number("p")?)?, number("burst")?);
            let bucket = LeakyBucket::new(rate, burst).map_err(bad_spec)?;
            Ok(AnyFormat::Leaky(LeakyFormat(bucket)))
        }
        b"token_bucket" => {
            let (n, p) = (number("n")?, number("p")?);
            let (rate, burst) = (bucket_rate(n, p)?, number("burst")?);
            let capacity = u128::from(burst) * u128::from(p);
            match w.next() {
                Some(b"narrow") => Ok(AnyFormat::TokenNarrow(token(rate, burst, capacity)?)),
                Some(b"wide") => Ok(AnyFormat::TokenWide(token(rate, burst, capacity)?)),
                _ => Err(Error::Bad("token storage")),
            }
        }
        b"fixed_window" => {
            let rate = window_rate(number("n")?, number("p")?)?;
            Ok(AnyFormat::Fixed(FixedFormat(FixedWindow::new(rate))))
        }
        b"sliding_window_counter" => {
            let rate = window_rate(number("n")?, number("p")?)?;
            Ok(AnyFormat::Counter(CounterFormat(
                SlidingWindowCounter::new(rate),
            )))
        }
        b"sliding_window_log" => {
            let (n, p) = (number("n")?, number("p")?);
            let log = SlidingWindowLog::new(window_rate(n, p)?);
            Ok(AnyFormat::Log(Log::new(log, n, p)))
        }
        b"stepped_window" => {
            let (n, p, step) = (number("n")?, number("p")?, number("step")?);
            let window = SteppedWindow::new(window_rate(n, p)?, Some(Duration::from_nanos(step)))
                .map_err(bad_spec)?;
            let whole = u128::from(p / step.max(1));
            let room = [(whole + 2) * 4, u128::from(n) * 10];
            Ok(AnyFormat::Steps(Steps { window, room }))
        }
        b"concurrency" => {
            let (n, ttl) = (number("n")?, number("lease ttl")?);
            let concurrency = Concurrency::new(n, Duration::from_nanos(ttl)).map_err(bad_spec)?;
            let span = u128::from(ttl) * 4;
            let room = [span, span, u128::from(n)];
            Ok(AnyFormat::Leases(Leases { concurrency, room }))
        }
        _ => Err(Error::UnknownAlgorithm),
    }
}

fn bad_spec<E>(_: E) -> Error {
    Error::Bad("spec")
}

/// The cell of `format` with its state read from `stored`.
fn held<F: Format>(format: F, stored: Option<&[u8]>) -> Result<Held<F>, Error> {
    let state = match stored {
        None => format.algorithm().new_state(),
        Some(value) => {
            if !value.first().is_some_and(u8::is_ascii_digit) {
                return Err(Error::NotVersion1);
            }
            format.decode(value).ok_or(Error::BadState)?
        }
    };
    Ok(Held { format, state })
}

fn token<S: TokenStorage>(rate: Rate, burst: u64, capacity: u128) -> Result<TokenFormat<S>, Error> {
    let bucket = TokenBucket::<S>::with_storage(rate, burst).map_err(bad_spec)?;
    Ok(TokenFormat { bucket, capacity })
}

/// A window's rate, `n` per `p` ns as configured.
fn window_rate(n: u64, p: u64) -> Result<Rate, Error> {
    Rate::from_nanos(n, p).map_err(bad_spec)
}

/// A rate whose reduced form is `n` per `p` ns: the reduced numbers scaled
/// up to a period a rate may have (at least 1 ms). The configured rate was
/// such a multiple, so the scaled one never exceeds it and is valid.
fn bucket_rate(n: u64, p: u64) -> Result<Rate, Error> {
    if n == 0 || p == 0 || gcd(n, p) != 1 {
        return Err(Error::Bad("spec (n and p must be coprime)"));
    }
    let k = NANOS_PER_MS.div_ceil(p).max(1);
    let (n, p) = (n.checked_mul(k), p.checked_mul(k));
    Rate::from_nanos(n.ok_or(Error::Bad("spec"))?, p.ok_or(Error::Bad("spec"))?).map_err(bad_spec)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
