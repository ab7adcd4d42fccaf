//! What a provider's answer says about its limit: [`Signals`], read from
//! `Retry-After`, `RateLimit` / `RateLimit-Policy` (the IETF draft's
//! Structured Fields form), `RateLimit-Limit` / `-Remaining` / `-Reset`
//! (its earlier form) and the common `X-RateLimit-*` headers.
//!
//! Headers that do not parse are ignored: a provider's malformed header
//! never stops the caller, it only leaves the limiter with fewer numbers.

use std::time::Duration;

use http::HeaderMap;

/// Reset values above this are Unix timestamps (GitHub's
/// `X-RateLimit-Reset`), below it delays in seconds.
const EPOCH_THRESHOLD_SECS: u64 = 1_000_000_000;

/// The numbers an answer published, each only when present and valid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    /// `Retry-After`: how long to wait before the next call.
    pub retry_after: Option<Duration>,
    /// Calls left in the current window.
    pub remaining: Option<u64>,
    /// Time until the window resets (or the quota is refilled).
    pub reset: Option<Duration>,
    /// The window's quota.
    pub limit: Option<u64>,
}

impl Signals {
    /// Reads `headers`; `now_unix` (seconds since the epoch) turns
    /// HTTP-dates and epoch resets into delays.
    pub fn read(headers: &HeaderMap, now_unix: u64) -> Signals {
        let mut signals = Signals {
            retry_after: text(headers, "retry-after").and_then(|v| retry_after(v, now_unix)),
            ..Signals::default()
        };
        // The current draft first: `RateLimit: "name";r=R;t=T`,
        // `RateLimit-Policy: "name";q=Q;w=W`.
        if let Some((remaining, reset)) = text(headers, "ratelimit").and_then(structured_limit) {
            signals.remaining = Some(remaining);
            signals.reset = reset;
        }
        if let Some(quota) = text(headers, "ratelimit-policy").and_then(structured_policy) {
            signals.limit = Some(quota);
        }
        for prefix in ["ratelimit-", "x-ratelimit-"] {
            let field = |name: &str| text(headers, &format!("{prefix}{name}"));
            if signals.remaining.is_none() {
                signals.remaining = field("remaining").and_then(integer);
            }
            if signals.reset.is_none() {
                signals.reset = field("reset").and_then(|v| reset(v, now_unix));
            }
            if signals.limit.is_none() {
                signals.limit = field("limit").and_then(leading_integer);
            }
        }
        signals
    }

    /// Whether the answer published any number about the limit.
    pub fn has_numbers(&self) -> bool {
        self.retry_after.is_some() || self.remaining.is_some() || self.reset.is_some()
    }
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

fn integer(value: &str) -> Option<u64> {
    value.parse().ok()
}

/// `RateLimit-Limit: 100, 100;w=60` (the earlier draft) or plain `100`.
fn leading_integer(value: &str) -> Option<u64> {
    integer(value.split([',', ';']).next()?.trim())
}

/// Delta seconds, or an HTTP-date.
fn retry_after(value: &str, now_unix: u64) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now_unix)))
}

/// Delta seconds (possibly fractional), or a Unix timestamp.
fn reset(value: &str, now_unix: u64) -> Option<Duration> {
    let seconds: f64 = value.parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    if seconds >= EPOCH_THRESHOLD_SECS as f64 {
        return Some(Duration::from_secs(
            (seconds as u64).saturating_sub(now_unix),
        ));
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// The most constrained member of a `RateLimit` list: its `r` and `t`.
fn structured_limit(value: &str) -> Option<(u64, Option<Duration>)> {
    let list: sfv::List = sfv::Parser::new(value).parse_list().ok()?;
    list.iter()
        .filter_map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                return None;
            };
            let param = |key: &str| {
                item.params
                    .iter()
                    .find(|(k, _)| k.as_str() == key)
                    .and_then(|(_, v)| v.as_integer())
                    .and_then(|v| u64::try_from(i64::from(v)).ok())
            };
            Some((param("r")?, param("t").map(Duration::from_secs)))
        })
        .min_by_key(|(remaining, _)| *remaining)
}

/// The smallest quota `q` of a `RateLimit-Policy` list.
fn structured_policy(value: &str) -> Option<u64> {
    let list: sfv::List = sfv::Parser::new(value).parse_list().ok()?;
    list.iter()
        .filter_map(|entry| match entry {
            sfv::ListEntry::Item(item) => item
                .params
                .iter()
                .find(|(k, _)| k.as_str() == "q")
                .and_then(|(_, v)| v.as_integer())
                .and_then(|v| u64::try_from(i64::from(v)).ok()),
            sfv::ListEntry::InnerList(_) => None,
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    fn read(pairs: &[(&'static str, &str)]) -> Signals {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(value) = value.parse() {
                headers.insert(*name, value);
            }
        }
        Signals::read(&headers, NOW)
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(
            read(&[("retry-after", "120")]).retry_after,
            Some(Duration::from_secs(120))
        );
        let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(NOW + 30));
        assert_eq!(
            read(&[("retry-after", &date)]).retry_after,
            Some(Duration::from_secs(30))
        );
        assert_eq!(read(&[("retry-after", "soon")]).retry_after, None);
    }

    #[test]
    fn the_structured_draft_takes_the_most_constrained_policy() {
        let s = read(&[
            ("ratelimit", "\"minute\";r=40;t=20, \"day\";r=3;t=3600"),
            (
                "ratelimit-policy",
                "\"minute\";q=100;w=60, \"day\";q=1000;w=86400",
            ),
        ]);
        assert_eq!(s.remaining, Some(3));
        assert_eq!(s.reset, Some(Duration::from_secs(3600)));
        assert_eq!(s.limit, Some(100));
        assert!(s.has_numbers());
    }

    #[test]
    fn earlier_draft_and_x_headers() {
        let s = read(&[
            ("ratelimit-limit", "100, 100;w=60"),
            ("ratelimit-remaining", "7"),
            ("ratelimit-reset", "12"),
        ]);
        assert_eq!(
            (s.limit, s.remaining, s.reset),
            (Some(100), Some(7), Some(Duration::from_secs(12)))
        );
        // GitHub's reset is a Unix timestamp.
        let s = read(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &(NOW + 90).to_string()),
        ]);
        assert_eq!(
            (s.limit, s.remaining, s.reset),
            (Some(5000), Some(0), Some(Duration::from_secs(90)))
        );
        let s = read(&[("x-ratelimit-reset", "0.25")]);
        assert_eq!(s.reset, Some(Duration::from_millis(250)));
    }

    #[test]
    fn malformed_headers_are_ignored() {
        let s = read(&[
            ("ratelimit", "r=oops;;"),
            ("ratelimit-policy", "((("),
            ("x-ratelimit-remaining", "-3"),
            ("x-ratelimit-reset", "NaN"),
            ("retry-after", "-1"),
        ]);
        assert_eq!(s, Signals::default());
        assert!(!s.has_numbers());
    }
}
