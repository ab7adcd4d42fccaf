//! Limit notation: `N/P` and `N per P`.
//!
//! `P` is `[n]unit` with unit one of `ms`, `s`/`sec`/`second`,
//! `m`/`min`/`minute`, `h`/`hour`, `d`/`day`, `w`/`week` (plurals accepted,
//! case-insensitive): `10/s`, `100/minute`, `5/15min`, `1200/60s`,
//! `7 per 2 hours`. Parsing happens once, at the edge; the rest of tollgate
//! passes the validated [`Rate`] around.
//!
//! ```
//! use tollgate_core::Rate;
//! use std::time::Duration;
//!
//! let rate: Rate = "5/15min".parse().unwrap();
//! assert_eq!(rate.limit(), 5);
//! assert_eq!(rate.period(), Duration::from_secs(15 * 60));
//! assert_eq!("7 per 2 hours".parse::<Rate>().unwrap().period(), Duration::from_secs(7200));
//! assert!("10/fortnight".parse::<Rate>().unwrap_err().to_string().contains("fortnight"));
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::time::{duration_to_nanos, NANOS_PER_MS, NANOS_PER_SEC};

/// The largest `N` a rate may have; keeps every algorithm's arithmetic exact
/// in 128-bit integers.
pub const MAX_LIMIT: u64 = u32::MAX as u64;
/// The longest period a rate may have (about 146 years).
pub const MAX_PERIOD_NANOS: u64 = 1 << 62;

/// `limit` requests per `period`; both non-zero and within the bounds above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    limit: u64,
    period_ns: u64,
}

/// Why a rate could not be built or parsed. Each message names the bad text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// The text has no `/` or `per` between count and period.
    #[error("rate {text:?} is not of the form N/P or N per P (e.g. 10/s, 100 per minute)")]
    Form {
        /// The whole rate text.
        text: String,
    },
    /// The count is not a whole number.
    #[error("rate {text:?}: count {count:?} is not a whole number")]
    Count {
        /// The whole rate text.
        text: String,
        /// The count part.
        count: String,
    },
    /// The period's unit is not one tollgate knows.
    #[error("rate {text:?}: unknown time unit {unit:?} (use ms, s, min, h, d or w)")]
    Unit {
        /// The whole rate text.
        text: String,
        /// The unit part.
        unit: String,
    },
    /// The period's multiplier is not a whole number.
    #[error("rate {text:?}: period multiplier {multiplier:?} is not a whole number")]
    Multiplier {
        /// The whole rate text.
        text: String,
        /// The multiplier part.
        multiplier: String,
    },
    /// The count is zero or too large.
    #[error("limit {limit} is out of range (1 to {MAX_LIMIT})")]
    LimitRange {
        /// The rejected count.
        limit: u64,
    },
    /// The period is zero or too long.
    #[error("period of {period_ns} ns is out of range (1 ms to about 146 years)")]
    PeriodRange {
        /// The rejected period, in nanoseconds.
        period_ns: u64,
    },
}

impl Rate {
    /// `limit` requests per `period`.
    ///
    /// The period must be at least one millisecond: tollgate's APIs speak
    /// milliseconds, and a shorter window could not be observed through them.
    pub fn new(limit: u64, period: Duration) -> Result<Rate, RateError> {
        Self::from_nanos(limit, duration_to_nanos(period))
    }

    /// `limit` requests per `period_ns` nanoseconds.
    pub fn from_nanos(limit: u64, period_ns: u64) -> Result<Rate, RateError> {
        if limit == 0 || limit > MAX_LIMIT {
            return Err(RateError::LimitRange { limit });
        }
        if !(NANOS_PER_MS..=MAX_PERIOD_NANOS).contains(&period_ns) {
            return Err(RateError::PeriodRange { period_ns });
        }
        Ok(Rate { limit, period_ns })
    }

    /// `limit` per second.
    pub fn per_second(limit: u64) -> Result<Rate, RateError> {
        Self::from_nanos(limit, NANOS_PER_SEC)
    }

    /// `limit` per minute.
    pub fn per_minute(limit: u64) -> Result<Rate, RateError> {
        Self::from_nanos(limit, 60 * NANOS_PER_SEC)
    }

    /// The `N` of `N/P`.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The `P` of `N/P`.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The `P` of `N/P`, in nanoseconds.
    pub fn period_nanos(&self) -> u64 {
        self.period_ns
    }
}

impl Rate {
    /// Writes `N`, then `separator`, then the period in canonical notation
    /// (the largest unit that divides it: `s`, `15m`, `250ms`).
    pub(crate) fn write_with(&self, f: &mut impl fmt::Write, separator: &str) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (7 * 86_400 * NANOS_PER_SEC, "w"),
            (86_400 * NANOS_PER_SEC, "d"),
            (3_600 * NANOS_PER_SEC, "h"),
            (60 * NANOS_PER_SEC, "m"),
            (NANOS_PER_SEC, "s"),
            (NANOS_PER_MS, "ms"),
        ];
        let p = self.period_ns;
        for (size, unit) in UNITS {
            if p.is_multiple_of(size) {
                let n = p / size;
                return if n == 1 {
                    write!(f, "{}{separator}{unit}", self.limit)
                } else {
                    write!(f, "{}{separator}{n}{unit}", self.limit)
                };
            }
        }
        write!(f, "{}{separator}{p}ns", self.limit)
    }
}

impl fmt::Display for Rate {
    /// Canonical notation: the largest unit that divides the period.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_with(f, "/")
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Rate, RateError> {
        let form = || RateError::Form {
            text: text.to_string(),
        };
        let trimmed = text.trim();
        let (count, period) = match trimmed.split_once('/') {
            Some(parts) => parts,
            None => split_per(trimmed).ok_or_else(form)?,
        };
        let count = count.trim();
        let limit: u64 = count.parse().map_err(|_| RateError::Count {
            text: text.to_string(),
            count: count.to_string(),
        })?;
        let period_ns = parse_period(text, period.trim())?;
        Rate::from_nanos(limit, period_ns)
    }
}

/// Splits `N per P` (any case, any spacing) into its two halves.
fn split_per(text: &str) -> Option<(&str, &str)> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find(" per ")?;
    Some((&text[..at], &text[at + " per ".len()..]))
}

/// Parses the period half of a rate (`s`, `15min`, `2 hours`, `500ms`; whole
/// multiples only) into nanoseconds; `text` is the whole rate, for errors.
pub fn parse_period(text: &str, period: &str) -> Result<u64, RateError> {
    let digits_end = period
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(period.len());
    let (multiplier_text, unit_text) = period.split_at(digits_end);
    let unit_text = unit_text.trim();
    let multiplier: u64 = if multiplier_text.is_empty() {
        1
    } else {
        multiplier_text.parse().map_err(|_| RateError::Multiplier {
            text: text.to_string(),
            multiplier: multiplier_text.to_string(),
        })?
    };
    let unit_ns = unit_nanos(unit_text).ok_or_else(|| RateError::Unit {
        text: text.to_string(),
        unit: unit_text.to_string(),
    })?;
    Ok(multiplier.saturating_mul(unit_ns))
}

/// Parses a bare duration like `5m`, `1s`, `250ms` (used for `step`,
/// `window` and `lease_ttl` settings).
///
/// ```
/// use tollgate_core::rate::parse_duration;
/// assert_eq!(parse_duration("5m").unwrap(), std::time::Duration::from_secs(300));
/// assert!(parse_duration("5 parsecs").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, RateError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(RateError::Multiplier {
            text: text.to_string(),
            multiplier: trimmed.to_string(),
        });
    }
    parse_period(text, trimmed).map(Duration::from_nanos)
}

fn unit_nanos(unit: &str) -> Option<u64> {
    let unit = unit.to_ascii_lowercase();
    let singular = match unit.as_str() {
        "ms" => return Some(NANOS_PER_MS),
        u => u.strip_suffix('s').filter(|s| !s.is_empty()).unwrap_or(u),
    };
    let secs = match singular {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hr" | "hour" => 3_600,
        "d" | "day" => 86_400,
        "w" | "wk" | "week" => 7 * 86_400,
        "millisecond" | "msec" => return Some(NANOS_PER_MS),
        _ => return None,
    };
    Some(secs * NANOS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Rate {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn accepts_the_documented_forms() {
        let cases: &[(&str, u64, u64)] = &[
            ("10/s", 10, 1),
            ("10/sec", 10, 1),
            ("10/second", 10, 1),
            ("10/seconds", 10, 1),
            ("100/minute", 100, 60),
            ("100/m", 100, 60),
            ("100/min", 100, 60),
            ("100/mins", 100, 60),
            ("5/15min", 5, 900),
            ("1200/60s", 1200, 60),
            ("3/h", 3, 3600),
            ("3/hours", 3, 3600),
            ("1/d", 1, 86_400),
            ("2/days", 2, 86_400),
            ("1/w", 1, 604_800),
            ("1/weeks", 1, 604_800),
            ("7 per 2 hours", 7, 7200),
            ("7 PER minute", 7, 60),
            (" 10 / s ", 10, 1),
        ];
        for &(text, limit, secs) in cases {
            let rate = parse(text);
            assert_eq!(rate.limit(), limit, "{text}");
            assert_eq!(rate.period(), Duration::from_secs(secs), "{text}");
        }
        assert_eq!(parse("50/250ms").period(), Duration::from_millis(250));
    }

    #[test]
    fn errors_name_the_offending_text() {
        let cases: &[(&str, &str)] = &[
            ("ten/s", "\"ten\""),
            ("10/fortnight", "\"fortnight\""),
            ("10 every second", "10 every second"),
            ("0/s", "limit 0"),
            ("10/0s", "period of 0"),
            ("10/", "unknown time unit"),
            ("99999999999/s", "limit 99999999999"),
            ("-1/s", "\"-1\""),
        ];
        for &(text, needle) in cases {
            let err = text.parse::<Rate>().expect_err(text).to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["10/s", "5/15m", "1/d", "3/2w", "50/250ms", "7/90s"] {
            let rate = parse(text);
            assert_eq!(rate.to_string(), text);
            assert_eq!(parse(&rate.to_string()), rate);
        }
    }

    #[test]
    fn bare_durations() {
        assert_eq!(parse_duration("5m").ok(), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("10ms").ok(), Some(Duration::from_millis(10)));
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("").is_err());
    }
}
