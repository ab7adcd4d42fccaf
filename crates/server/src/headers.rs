//! The rate-limit headers of SPEC §7 for one decision: the IETF
//! `RateLimit-Policy` / `RateLimit` Structured Field lists (one member per
//! limit that applied), the de-facto `X-RateLimit-*` trio for the most
//! constrained limit, and `Retry-After` on a rejection.
//!
//! The Structured Field serialisation is small enough to write here (a list
//! of strings with integer parameters); the tests parse the output with a
//! real Structured Fields parser.

use std::fmt::Write as _;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::time::{duration_to_secs_ceil, NANOS_PER_SEC};
use tollgate_core::{Decision, Limit};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `X-RateLimit-Degraded: 1`: the store could not be asked and the failure
/// policy decided (SPEC §8).
pub const X_RATELIMIT_DEGRADED: HeaderName = HeaderName::from_static("x-ratelimit-degraded");

/// One limit that applied to a request, as the headers describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedLimit {
    /// The rule's name, or the limit's derived name for inline limits.
    pub name: String,
    /// The window the policy is stated over (`w`): the limit's period in
    /// whole seconds.
    pub window_secs: u64,
    /// Its decision for this request.
    pub decision: Decision,
}

impl AppliedLimit {
    /// `limit`'s decision, named `name`.
    pub fn of(name: String, limit: &Limit, decision: Decision) -> AppliedLimit {
        AppliedLimit {
            name,
            window_secs: limit.rate.period_nanos() / NANOS_PER_SEC,
            decision,
        }
    }
}

/// Adds the headers for a request that `applied` limits decided to
/// `headers`; `top` is the most constrained decision and `rejected` whether
/// the answer is a 429.
pub fn add_rate_limit_headers(
    headers: &mut HeaderMap,
    applied: &[AppliedLimit],
    top: Option<&Decision>,
    rejected: bool,
) {
    if applied.is_empty() {
        return;
    }
    let mut policy = String::with_capacity(32 * applied.len());
    let mut state = String::with_capacity(32 * applied.len());
    for (i, a) in applied.iter().enumerate() {
        if i > 0 {
            policy.push_str(", ");
            state.push_str(", ");
        }
        push_sf_string(&mut policy, &a.name);
        push_sf_string(&mut state, &a.name);
        // Writing into a String cannot fail.
        let _ = write!(policy, ";q={};w={}", a.decision.limit, a.window_secs.max(1));
        let _ = write!(
            state,
            ";r={};t={}",
            a.decision.remaining,
            duration_to_secs_ceil(a.decision.reset_after)
        );
    }
    insert(headers, RATELIMIT_POLICY, policy);
    insert(headers, RATELIMIT, state);
    if applied.iter().any(|a| a.decision.degraded) {
        insert(headers, X_RATELIMIT_DEGRADED, "1".to_owned());
    }
    if let Some(top) = top {
        insert(headers, X_RATELIMIT_LIMIT, top.limit.to_string());
        insert(headers, X_RATELIMIT_REMAINING, top.remaining.to_string());
        insert(
            headers,
            X_RATELIMIT_RESET,
            duration_to_secs_ceil(top.reset_after).to_string(),
        );
        if rejected {
            insert(
                headers,
                axum::http::header::RETRY_AFTER,
                retry_after_secs(top.retry_after).to_string(),
            );
        }
    }
}

/// The headers of [`add_rate_limit_headers`] as a map of their own.
pub fn rate_limit_headers(
    applied: &[AppliedLimit],
    top: Option<&Decision>,
    rejected: bool,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    add_rate_limit_headers(&mut headers, applied, top, rejected);
    headers
}

/// `Retry-After` seconds: rounded up, and at least 1 on a rejection.
pub fn retry_after_secs(retry_after: Duration) -> u64 {
    duration_to_secs_ceil(retry_after).max(1)
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: String) {
    // Every value is built from digits and `push_sf_string` output: visible
    // ASCII. Converting the String hands its buffer over without a copy.
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert(name, value);
    }
}

/// A Structured Field string (RFC 9651 §3.3.3): visible ASCII and space,
/// with `"` and `\` escaped; any other character becomes `_`, so a rule
/// name from a file can never break the header.
fn push_sf_string(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{AlgorithmName, Rate};

    fn applied(name: &str, rate: &str, remaining: u64, reset_ms: u64) -> AppliedLimit {
        let rate: Rate = rate.parse().unwrap();
        let decision = Decision {
            allowed: true,
            limit: rate.limit(),
            remaining,
            reset_after: Duration::from_millis(reset_ms),
            ..Decision::default()
        };
        AppliedLimit::of(
            name.into(),
            &Limit::new(AlgorithmName::FixedWindow, rate),
            decision,
        )
    }

    #[test]
    fn one_member_per_limit_and_the_trio_for_the_top() {
        let limits = [
            applied("per-second", "10/s", 4, 300),
            applied("per \"day\"", "1000/d", 900, 86_000_500),
        ];
        let top = limits[0].decision;
        let h = rate_limit_headers(&limits, Some(&top), false);
        assert_eq!(
            h[&RATELIMIT_POLICY],
            r#""per-second";q=10;w=1, "per \"day\"";q=1000;w=86400"#
        );
        assert_eq!(
            h[&RATELIMIT],
            r#""per-second";r=4;t=1, "per \"day\"";r=900;t=86001"#
        );
        assert_eq!(h[&X_RATELIMIT_REMAINING], "4");
        assert_eq!(h[&X_RATELIMIT_RESET], "1");
        assert!(h.get(axum::http::header::RETRY_AFTER).is_none());
    }

    #[test]
    fn sub_second_windows_are_one_second_and_odd_names_are_sanitised() {
        let limits = [applied("é\n", "5/100ms", 0, 0)];
        let h = rate_limit_headers(&limits, Some(&limits[0].decision), true);
        assert_eq!(h[&RATELIMIT_POLICY], r#""__";q=5;w=1"#);
        assert_eq!(h[axum::http::header::RETRY_AFTER], "1");
    }
}
