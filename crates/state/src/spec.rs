//! A limit's spec words as the store sends them (`crates/redis/src/cells.rs`)
//! into an [`AnyFormat`]: the core algorithm with its state's encoding.
//!
//! The bucket algorithms' `n p` come divided by their greatest common
//! divisor and name the units of the stored state, so a spec whose `n` and
//! `p` are not coprime is refused: the core would reduce them again and
//! read the state in other units.

use std::time::Duration;

use tollgate_core::algorithm::{
    default_step, Concurrency, FixedWindow, Gcra, LeakyBucket, Narrow, SlidingWindowCounter,
    SlidingWindowLog, SteppedWindow, TokenBucket, TokenStorage, Wide,
};
use tollgate_core::calendar::{Calendar, CalendarUnit};
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::{AlgorithmName, Limit, Rate};

use crate::format::{
    CounterFormat, FixedFormat, GcraFormat, LeakyFormat, Leases, Log, Steps, TokenFormat,
};
use crate::text::{parse_u64, words};

/// Why spec words name no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecError {
    /// A word is not what its place needs (named).
    Bad(&'static str),
    /// The first word names no algorithm.
    UnknownAlgorithm,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::Bad(what) => write!(f, "bad {what}"),
            SpecError::UnknownAlgorithm => f.write_str("unknown algorithm"),
        }
    }
}

impl std::error::Error for SpecError {}

/// The format of any algorithm, held by value.
#[derive(Debug, Clone, Copy)]
pub enum AnyFormat {
    /// `gcra`.
    Gcra(GcraFormat),
    /// `token_bucket` with a 64-bit count.
    TokenNarrow(TokenFormat<Narrow>),
    /// `token_bucket` with a 128-bit count.
    TokenWide(TokenFormat<Wide>),
    /// `leaky_bucket`.
    Leaky(LeakyFormat),
    /// `fixed_window`.
    Fixed(FixedFormat),
    /// `sliding_window_counter`.
    Counter(CounterFormat),
    /// `sliding_window_log`.
    Log(Log),
    /// `stepped_window`.
    Steps(Steps),
    /// `concurrency`.
    Leases(Leases),
}

impl AnyFormat {
    /// The format of an algorithm's spec words (without a ban's).
    pub fn parse(spec: &[u8]) -> Result<AnyFormat, SpecError> {
        let mut w = words(spec);
        let name = w.next().ok_or(SpecError::Bad("spec"))?;
        let mut number = |what| w.next().and_then(parse_u64).ok_or(SpecError::Bad(what));
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
                    _ => Err(SpecError::Bad("token storage")),
                }
            }
            b"fixed_window" => {
                let rate = window_rate(number("n")?, number("p")?)?;
                let calendar = calendar(&mut w)?;
                Ok(AnyFormat::Fixed(FixedFormat(FixedWindow::with_calendar(
                    rate, calendar,
                ))))
            }
            b"sliding_window_counter" => {
                let rate = window_rate(number("n")?, number("p")?)?;
                let calendar = calendar(&mut w)?;
                Ok(AnyFormat::Counter(CounterFormat(
                    SlidingWindowCounter::with_calendar(rate, calendar),
                )))
            }
            b"sliding_window_log" => {
                let (n, p) = (number("n")?, number("p")?);
                let log = SlidingWindowLog::new(window_rate(n, p)?);
                Ok(AnyFormat::Log(Log::new(log, n, p)))
            }
            b"stepped_window" => {
                let (n, p, step) = (number("n")?, number("p")?, number("step")?);
                let window =
                    SteppedWindow::new(window_rate(n, p)?, Some(Duration::from_nanos(step)))
                        .map_err(bad_spec)?;
                let whole = u128::from(p / step.max(1));
                let room = [(whole + 2) * 4, u128::from(n) * 10];
                Ok(AnyFormat::Steps(Steps { window, room }))
            }
            b"concurrency" => {
                let (n, ttl) = (number("n")?, number("lease ttl")?);
                let concurrency =
                    Concurrency::new(n, Duration::from_nanos(ttl)).map_err(bad_spec)?;
                let span = u128::from(ttl) * 4;
                let room = [span, span, u128::from(n)];
                Ok(AnyFormat::Leases(Leases { concurrency, room }))
            }
            _ => Err(SpecError::UnknownAlgorithm),
        }
    }
}

/// The limit's parameters (without its ban) as the engines parse them: for
/// the bucket algorithms `n p` divided by their greatest common divisor,
/// for the others as configured (see each algorithm's file in
/// crates/redis/src/lua).
pub fn algorithm_spec(limit: &Limit) -> String {
    let (n, p) = (limit.rate.limit(), limit.rate.period_nanos());
    let burst = limit.burst.unwrap_or(n);
    let name = limit.algorithm.as_str();
    match limit.algorithm {
        AlgorithmName::Gcra | AlgorithmName::LeakyBucket => {
            let common = gcd(n, p);
            format!("{name} {} {} {burst}", n / common, p / common)
        }
        AlgorithmName::TokenBucket => {
            let common = gcd(n, p);
            // The token count's storage, as `Limit::build` picks it: a
            // narrow one saturates where a wide one does not.
            let storage = if TokenBucket::<Narrow>::fits(limit.rate, burst) {
                "narrow"
            } else {
                "wide"
            };
            format!("{name} {} {} {burst} {storage}", n / common, p / common)
        }
        AlgorithmName::FixedWindow | AlgorithmName::SlidingWindowCounter => match limit.calendar {
            // The store adds, on each call, the windows around its instant.
            Some(c) => format!(
                "{name} {n} {p} calendar {} {} {}",
                c.unit(),
                c.anchor(),
                c.zone_name()
            ),
            None => format!("{name} {n} {p}"),
        },
        AlgorithmName::SlidingWindowLog => format!("{name} {n} {p}"),
        AlgorithmName::SteppedWindow => {
            let step = limit
                .step
                .unwrap_or_else(|| default_step(limit.rate.period()));
            format!("{name} {n} {p} {}", step.as_nanos())
        }
        AlgorithmName::Concurrency => {
            let ttl = limit
                .lease_ttl
                .unwrap_or(tollgate_core::limit::DEFAULT_LEASE_TTL);
            format!("{name} {n} {}", ttl.as_nanos())
        }
    }
}

/// The calendar of a window spec's `calendar <unit> <anchor> <zone>` words,
/// `None` when the spec ends after `n p`. The window starts that follow
/// them are for the script (windows.lua): the module computes every window
/// itself, with the same core code that computed those.
fn calendar<'a>(w: &mut impl Iterator<Item = &'a [u8]>) -> Result<Option<Calendar>, SpecError> {
    match w.next() {
        None => Ok(None),
        Some(b"calendar") => {
            let mut text = || w.next().and_then(|word| std::str::from_utf8(word).ok());
            let unit: CalendarUnit = text()
                .and_then(|u| u.parse().ok())
                .ok_or(SpecError::Bad("calendar unit"))?;
            let anchor = text()
                .and_then(|a| parse_u64(a.as_bytes()))
                .ok_or(SpecError::Bad("calendar anchor"))?;
            let zone = text().ok_or(SpecError::Bad("calendar time zone"))?;
            Calendar::new(unit, zone, Some(anchor))
                .map(Some)
                .map_err(|_| SpecError::Bad("calendar (unknown time zone or anchor)"))
        }
        Some(_) => Err(SpecError::Bad("spec")),
    }
}

fn bad_spec<E>(_: E) -> SpecError {
    SpecError::Bad("spec")
}

fn token<S: TokenStorage>(
    rate: Rate,
    burst: u64,
    capacity: u128,
) -> Result<TokenFormat<S>, SpecError> {
    let bucket = TokenBucket::<S>::with_storage(rate, burst).map_err(bad_spec)?;
    Ok(TokenFormat { bucket, capacity })
}

/// A window's rate, `n` per `p` ns as configured.
fn window_rate(n: u64, p: u64) -> Result<Rate, SpecError> {
    Rate::from_nanos(n, p).map_err(bad_spec)
}

/// A rate whose reduced form is `n` per `p` ns: the reduced numbers scaled
/// up to a period a rate may have (at least 1 ms). The configured rate was
/// such a multiple, so the scaled one never exceeds it and is valid.
fn bucket_rate(n: u64, p: u64) -> Result<Rate, SpecError> {
    if n == 0 || p == 0 || gcd(n, p) != 1 {
        return Err(SpecError::Bad("spec (n and p must be coprime)"));
    }
    let k = NANOS_PER_MS.div_ceil(p).max(1);
    let (n, p) = (n.checked_mul(k), p.checked_mul(k));
    Rate::from_nanos(
        n.ok_or(SpecError::Bad("spec"))?,
        p.ok_or(SpecError::Bad("spec"))?,
    )
    .map_err(bad_spec)
}

/// The greatest common divisor of two non-zero numbers.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_limit_s_spec_parses_into_its_algorithm() {
        let rate = Rate::per_second(10).unwrap();
        for name in AlgorithmName::ALL {
            let limit = Limit::new(name, rate);
            let format = AnyFormat::parse(algorithm_spec(&limit).as_bytes()).unwrap();
            let matches = matches!(
                (name, format),
                (AlgorithmName::Gcra, AnyFormat::Gcra(_))
                    | (AlgorithmName::TokenBucket, AnyFormat::TokenNarrow(_))
                    | (AlgorithmName::LeakyBucket, AnyFormat::Leaky(_))
                    | (AlgorithmName::FixedWindow, AnyFormat::Fixed(_))
                    | (AlgorithmName::SlidingWindowCounter, AnyFormat::Counter(_))
                    | (AlgorithmName::SlidingWindowLog, AnyFormat::Log(_))
                    | (AlgorithmName::SteppedWindow, AnyFormat::Steps(_))
                    | (AlgorithmName::Concurrency, AnyFormat::Leases(_))
            );
            assert!(matches, "{name}");
        }
        let wide = Limit::new(AlgorithmName::TokenBucket, "1000003/w".parse().unwrap());
        assert_eq!(
            algorithm_spec(&wide),
            "token_bucket 1000003 604800000000000 1000003 wide"
        );
        assert!(matches!(
            AnyFormat::parse(algorithm_spec(&wide).as_bytes()),
            Ok(AnyFormat::TokenWide(_))
        ));
        assert_eq!(
            AnyFormat::parse(b"gcra 2 4 10").err(),
            Some(SpecError::Bad("spec (n and p must be coprime)"))
        );
        assert_eq!(
            AnyFormat::parse(b"nope 1 1").err(),
            Some(SpecError::UnknownAlgorithm)
        );
        assert_eq!(
            AnyFormat::parse(b"token_bucket 1 1 1 thin").err(),
            Some(SpecError::Bad("token storage"))
        );
    }
}
