//! A limit's spec as the store sends it (the words the script's algorithms
//! parse, `crates/redis/src/cells.rs` `spec`) into the core algorithm,
//! with the state read from its stored value: an [`AnyCell`].
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
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::Rate;

use crate::cell::{AnyCell, Held};
use crate::error::Error;
use crate::state::{
    CounterFormat, FixedFormat, Format, GcraFormat, LeakyFormat, Leases, Log, Steps, TokenFormat,
};
use crate::text::{parse_u64, words};

/// The cell of `spec` holding `stored` (`None`: a state nothing touched).
pub(crate) fn cell(spec: &[u8], stored: Option<&[u8]>) -> Result<AnyCell, Error> {
    let mut w = words(spec);
    let name = w.next().ok_or(Error::Bad("spec"))?;
    let mut number = |what| w.next().and_then(parse_u64).ok_or(Error::Bad(what));
    match name {
        b"gcra" => {
            let (rate, burst) = (bucket_rate(number("n")?, number("p")?)?, number("burst")?);
            held(
                GcraFormat(Gcra::new(rate, burst).map_err(bad_spec)?),
                stored,
            )
            .map(AnyCell::Gcra)
        }
        b"leaky_bucket" => {
            let (rate, burst) = (bucket_rate(number("n")?, number("p")?)?, number("burst")?);
            held(
                LeakyFormat(LeakyBucket::new(rate, burst).map_err(bad_spec)?),
                stored,
            )
            .map(AnyCell::Leaky)
        }
        b"token_bucket" => {
            let (n, p) = (number("n")?, number("p")?);
            let (rate, burst) = (bucket_rate(n, p)?, number("burst")?);
            let capacity = u128::from(burst) * u128::from(p);
            match w.next() {
                Some(b"narrow") => {
                    held(token::<Narrow>(rate, burst, capacity)?, stored).map(AnyCell::TokenNarrow)
                }
                Some(b"wide") => {
                    held(token::<Wide>(rate, burst, capacity)?, stored).map(AnyCell::TokenWide)
                }
                _ => Err(Error::Bad("token storage")),
            }
        }
        b"fixed_window" => {
            let rate = window_rate(number("n")?, number("p")?)?;
            held(FixedFormat(FixedWindow::new(rate)), stored).map(AnyCell::Fixed)
        }
        b"sliding_window_counter" => {
            let rate = window_rate(number("n")?, number("p")?)?;
            held(CounterFormat(SlidingWindowCounter::new(rate)), stored).map(AnyCell::Counter)
        }
        b"sliding_window_log" => {
            let (n, p) = (number("n")?, number("p")?);
            let log = SlidingWindowLog::new(window_rate(n, p)?);
            held(Log::new(log, n, p), stored).map(AnyCell::Log)
        }
        b"stepped_window" => {
            let (n, p, step) = (number("n")?, number("p")?, number("step")?);
            let window = SteppedWindow::new(window_rate(n, p)?, Some(Duration::from_nanos(step)))
                .map_err(bad_spec)?;
            let whole = u128::from(p / step.max(1));
            let room = [(whole + 2) * 4, u128::from(n) * 10];
            held(
                Steps {
                    window,
                    period: p,
                    room,
                },
                stored,
            )
            .map(AnyCell::Steps)
        }
        b"concurrency" => {
            let (n, ttl) = (number("n")?, number("lease ttl")?);
            let concurrency = Concurrency::new(n, Duration::from_nanos(ttl)).map_err(bad_spec)?;
            let span = u128::from(ttl) * 4;
            let room = [span, span, u128::from(n)];
            held(Leases { concurrency, room }, stored).map(AnyCell::Leases)
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
