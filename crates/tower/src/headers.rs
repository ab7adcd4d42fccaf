//! The rate-limit headers of SPEC §7 for one decision: the IETF
//! `RateLimit-Policy` / `RateLimit` Structured Field lists (one member per
//! limit that applied), the de-facto `X-RateLimit-*` trio for the most
//! constrained limit, and `Retry-After` on a rejection.
//!
//! The decision service, the gateway and the middleware all send these,
//! built here from the [`AppliedLimit`]s of a decision.
//!
//! The Structured Field serialisation is small enough to write here (a list
//! of strings with integer parameters); the tests parse the output with a
//! real Structured Fields parser.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::time::duration_to_secs_ceil;
use tollgate_core::Decision;

pub use tollgate_rules::check::AppliedLimit;

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

/// Adds the headers for a request that `applied` limits decided to
/// `headers`; `top` is the most constrained decision and `rejected` whether
/// the answer is a 429.
pub fn add_rate_limit_headers(
    headers: &mut HeaderMap,
    applied: &[AppliedLimit<'_>],
    top: Option<&Decision>,
    rejected: bool,
) {
    if applied.is_empty() {
        return;
    }
    // Written byte by byte (itoa for the numbers): on every answer of the
    // gateway, core::fmt cost more than the rest of the headers together.
    // Every value goes into one buffer, each split off as it is done: one
    // allocation for all of them (and the one shared block that splitting
    // makes), where a buffer per value (`HeaderValue::from(u64)` makes
    // one) cost an allocation apiece.
    let names: usize = applied.iter().map(|a| a.name.len() + 48).sum();
    let mut buf = BytesMut::with_capacity(2 * names + 64);
    // Room for all of them at once, rather than growing the map twice.
    headers.reserve(6);
    for (i, a) in applied.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b", ");
        }
        push_sf_string(&mut buf, &a.name);
        push_param(&mut buf, b";q=", a.policy.quota);
        push_param(&mut buf, b";w=", a.policy.window_secs.max(1));
    }
    insert(headers, RATELIMIT_POLICY, &mut buf);
    for (i, a) in applied.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b", ");
        }
        push_sf_string(&mut buf, &a.name);
        push_param(&mut buf, b";r=", a.decision.remaining);
        push_param(
            &mut buf,
            b";t=",
            duration_to_secs_ceil(a.decision.reset_after),
        );
    }
    insert(headers, RATELIMIT, &mut buf);
    if applied.iter().any(|a| a.decision.degraded) {
        headers.insert(X_RATELIMIT_DEGRADED, HeaderValue::from_static("1"));
    }
    if let Some(top) = top {
        push_param(&mut buf, b"", top.limit);
        insert(headers, X_RATELIMIT_LIMIT, &mut buf);
        push_param(&mut buf, b"", top.remaining);
        insert(headers, X_RATELIMIT_REMAINING, &mut buf);
        push_param(&mut buf, b"", duration_to_secs_ceil(top.reset_after));
        insert(headers, X_RATELIMIT_RESET, &mut buf);
        if rejected {
            push_param(&mut buf, b"", retry_after_secs(top.retry_after));
            insert(headers, http::header::RETRY_AFTER, &mut buf);
        }
    }
}

/// Appends `key` and `value` (`;q=10`).
fn push_param(out: &mut BytesMut, key: &[u8], value: u64) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The headers of [`add_rate_limit_headers`] as a map of their own.
pub fn rate_limit_headers(
    applied: &[AppliedLimit<'_>],
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

/// Inserts what `buf` holds as `name`'s value, leaving `buf` empty (and
/// its spare room for the next value).
fn insert(headers: &mut HeaderMap, name: HeaderName, buf: &mut BytesMut) {
    // Every value is built from digits and `push_sf_string` output: visible
    // ASCII. The bytes are taken over without a copy.
    if let Ok(value) = HeaderValue::from_maybe_shared(buf.split().freeze()) {
        headers.insert(name, value);
    }
}

/// A Structured Field string (RFC 9651 §3.3.3): visible ASCII and space,
/// with `"` and `\` escaped; any other character becomes `_`, so a rule
/// name from a file can never break the header.
fn push_sf_string(out: &mut BytesMut, text: &str) {
    out.reserve(text.len() + 2);
    out.put_u8(b'"');
    // Rule names are plain text nearly always: copied whole.
    if text
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        out.extend_from_slice(text.as_bytes());
    } else {
        for c in text.chars() {
            match c {
                '"' | '\\' => {
                    out.put_u8(b'\\');
                    out.put_u8(c as u8);
                }
                // Visible ASCII: one byte.
                ' '..='~' => out.put_u8(c as u8),
                _ => out.put_u8(b'_'),
            }
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{AlgorithmName, Limit, Rate};

    fn applied(name: &str, rate: &str, remaining: u64, reset_ms: u64) -> AppliedLimit<'static> {
        let rate: Rate = rate.parse().unwrap();
        let decision = Decision {
            allowed: true,
            limit: rate.limit(),
            remaining,
            reset_after: Duration::from_millis(reset_ms),
            ..Decision::default()
        };
        AppliedLimit::of(
            name.to_owned(),
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
        assert!(h.get(http::header::RETRY_AFTER).is_none());
    }

    #[test]
    fn a_bucket_announces_its_burst_over_the_time_to_refill_it() {
        let rate: Rate = "10/s".parse().unwrap();
        let limit = Limit::new(AlgorithmName::TokenBucket, rate).with_burst(20);
        let decision = Decision {
            allowed: true,
            limit: 20,
            remaining: 19,
            ..Decision::default()
        };
        let limits = [AppliedLimit::of("bucket", &limit, decision)];
        let h = rate_limit_headers(&limits, Some(&decision), false);
        assert_eq!(h[&RATELIMIT_POLICY], r#""bucket";q=20;w=2"#);
    }

    #[test]
    fn sub_second_windows_are_one_second_and_odd_names_are_sanitised() {
        let limits = [applied("é\n", "5/100ms", 0, 0)];
        let h = rate_limit_headers(&limits, Some(&limits[0].decision), true);
        assert_eq!(h[&RATELIMIT_POLICY], r#""__";q=5;w=1"#);
        assert_eq!(h[http::header::RETRY_AFTER], "1");
    }
}
