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

use std::cell::RefCell;
use std::ops::Range;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use http::header::InvalidHeaderValue;
use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::policy::QuotaPolicy;
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
    // Room for all of them at once, rather than growing the map twice.
    headers.reserve(6);
    WRITER.with(|writer| match writer.try_borrow_mut() {
        Ok(mut writer) => writer.add(headers, applied, top, rejected),
        // Never: nothing in `add` comes back here.
        Err(_) => Writer::new().add(headers, applied, top, rejected),
    });
}

thread_local! {
    static WRITER: RefCell<Writer> = const { RefCell::new(Writer::new()) };
}

/// Bytes a thread's header values are carved from, a block at a time.
const BLOCK: usize = 4096;

/// `RateLimit-Policy` values a thread keeps: a service's few limits.
const KEPT_POLICIES: usize = 16;

/// A thread's header writer: its buffer, and the `RateLimit-Policy` values
/// of the limits it saw last.
///
/// Every value is written byte by byte (itoa for the numbers; on every
/// answer of the gateway, core::fmt cost more than the rest of the headers
/// together) into one block of bytes and split off it, so a value is
/// neither copied nor allocated on its own: the block is allocated once
/// for many answers, and taken back whole once the values carved from it
/// are gone (sent and dropped). A `RateLimit-Policy` value depends only on
/// the limits' names and policies, which a service repeats on every
/// answer: it is written once per list of limits and shared after.
struct Writer {
    buf: Option<BytesMut>,
    policies: Vec<Policy>,
    /// The entry of `policies` to replace next, once it is full.
    next: usize,
    /// The `content-length` of the last answers ([`answer_headers`]).
    length: KeptNumber,
    /// A map of each [`Shape`]'s names, its values blank, made on first
    /// use: an answer's map is a copy with its values put in place.
    templates: [Option<HeaderMap>; Shape::COUNT],
}

/// A `RateLimit-Policy` value and what it was written from.
struct Policy {
    /// Each limit's name and policy.
    limits: Vec<(Box<str>, QuotaPolicy)>,
    value: HeaderValue,
    /// Where each limit's quoted name (a Structured Field string, which
    /// `RateLimit` repeats) is in `value`.
    names: Vec<Range<usize>>,
    /// `X-RateLimit-Limit` of the last answers with these limits.
    limit: KeptNumber,
    /// `X-RateLimit-Remaining` of the last answers with these limits.
    remaining: KeptNumber,
    /// `X-RateLimit-Reset` of the last answers with these limits.
    reset: KeptNumber,
    /// `Retry-After` of the last answers with these limits.
    retry_after: KeptNumber,
    /// `RateLimit` of the last answers with these limits, when they are
    /// one limit: its remaining quota and seconds to reset.
    rate_limit: Kept<(u64, u64)>,
    /// The map of the last answers ([`answer_headers`]) with these limits,
    /// when they are one limit.
    answer: KeptAnswer,
}

/// A number that the same header of one list of limits repeats from
/// answer to answer (the limit, a reset a second away, the remaining
/// quota of keys seen once), kept as a value once two answers in a row had
/// it: a kept value is shared, rather than written, split off and checked
/// again.
type KeptNumber = Kept<u64>;

/// A header value that repeats from answer to answer, kept once two
/// answers in a row had the same `K` (what it is written from).
struct Kept<K> {
    /// What the value of the last answer was written from.
    last: Option<K>,
    /// The value of `last`, once it came twice.
    value: Option<HeaderValue>,
}

impl<K> Default for Kept<K> {
    fn default() -> Self {
        Kept {
            last: None,
            value: None,
        }
    }
}

impl<K: PartialEq + Copy> Kept<K> {
    /// The value for `key`: the kept one, or `write(buf)` (whose bytes are
    /// then copied into a value of their own, kept, if `key` came twice).
    fn value(
        &mut self,
        buf: &mut BytesMut,
        key: K,
        write: impl FnOnce(&mut BytesMut) -> Result<HeaderValue, InvalidHeaderValue>,
    ) -> Result<HeaderValue, InvalidHeaderValue> {
        if self.last != Some(key) {
            self.last = Some(key);
            self.value = None;
            return write(buf);
        }
        if let Some(value) = &self.value {
            return Ok(value.clone());
        }
        // Bytes of its own: a kept value must not hold a thread's block.
        let value = HeaderValue::from_bytes(write(buf)?.as_bytes())?;
        self.value = Some(value.clone());
        Ok(value)
    }
}

impl Kept<u64> {
    /// `n` as a header value: the kept one, or written into `buf`.
    fn number(&mut self, buf: &mut BytesMut, n: u64) -> Result<HeaderValue, InvalidHeaderValue> {
        self.value(buf, n, |buf| number(buf, n))
    }
}

impl Policy {
    /// Whether this is the value for `applied`.
    fn describes(&self, applied: &[AppliedLimit<'_>]) -> bool {
        self.limits.len() == applied.len()
            && self
                .limits
                .iter()
                .zip(applied)
                .all(|((name, policy), a)| *policy == a.policy && **name == *a.name)
    }
}

impl Writer {
    const fn new() -> Writer {
        Writer {
            buf: None,
            policies: Vec::new(),
            next: 0,
            length: Kept {
                last: None,
                value: None,
            },
            templates: [const { None }; Shape::COUNT],
        }
    }

    /// The index in `policies` of `applied`'s, written if it is new.
    fn policy(&mut self, applied: &[AppliedLimit<'_>]) -> usize {
        if let Some(i) = self.policies.iter().position(|p| p.describes(applied)) {
            return i;
        }
        let policy = write_policy(applied);
        if self.policies.len() < KEPT_POLICIES {
            self.policies.push(policy);
            self.policies.len() - 1
        } else {
            let i = self.next;
            self.next = (i + 1) % KEPT_POLICIES;
            self.policies[i] = policy;
            i
        }
    }

    /// The block, with room for the values of `applied`'s headers.
    fn block(&mut self, applied: &[AppliedLimit<'_>]) -> &mut BytesMut {
        let buf = self.buf.get_or_insert_with(BytesMut::new);
        // More than `RateLimit` and four numbers can take.
        let needed: usize = applied.iter().map(|a| 2 * a.name.len() + 48).sum::<usize>() + 96;
        if buf.capacity() < needed {
            // Takes the block back when nothing carved from it is left,
            // or starts another.
            buf.reserve(needed.max(BLOCK));
        }
        buf
    }

    fn add(
        &mut self,
        headers: &mut HeaderMap,
        applied: &[AppliedLimit<'_>],
        top: Option<&Decision>,
        rejected: bool,
    ) {
        let p = self.policy(applied);
        self.write(p, applied, top, rejected, |name, value| {
            insert(headers, name, value);
        });
    }

    /// Hands `put` each header for `applied`, whose policy is
    /// `policies[p]`, name and value, in the order they are sent.
    fn write(
        &mut self,
        p: usize,
        applied: &[AppliedLimit<'_>],
        top: Option<&Decision>,
        rejected: bool,
        mut put: impl FnMut(HeaderName, Result<HeaderValue, InvalidHeaderValue>),
    ) {
        self.block(applied);
        let (Some(buf), Some(policy)) = (self.buf.as_mut(), self.policies.get_mut(p)) else {
            return;
        };
        put(RATELIMIT_POLICY, Ok(policy.value.clone()));
        let rate_limit = match applied {
            // One limit: its value repeats while its remaining quota and
            // reset do.
            [one] => {
                let key = (
                    one.decision.remaining,
                    duration_to_secs_ceil(one.decision.reset_after),
                );
                let (value, names) = (&policy.value, &policy.names);
                policy
                    .rate_limit
                    .value(buf, key, |buf| rate_limit_value(buf, value, names, applied))
            }
            _ => rate_limit_value(buf, &policy.value, &policy.names, applied),
        };
        put(RATELIMIT, rate_limit);
        if applied.iter().any(|a| a.decision.degraded) {
            put(X_RATELIMIT_DEGRADED, Ok(HeaderValue::from_static("1")));
        }
        if let Some(top) = top {
            put(X_RATELIMIT_LIMIT, policy.limit.number(buf, top.limit));
            put(
                X_RATELIMIT_REMAINING,
                policy.remaining.number(buf, top.remaining),
            );
            let reset = duration_to_secs_ceil(top.reset_after);
            put(X_RATELIMIT_RESET, policy.reset.number(buf, reset));
            if rejected {
                let retry_after = retry_after_secs(top.retry_after);
                put(
                    http::header::RETRY_AFTER,
                    policy.retry_after.number(buf, retry_after),
                );
            }
        }
    }

    /// [`answer_headers`]. An answer of one limit that repeats the last
    /// one of its limit is a copy of that answer's map, kept once two
    /// answers in a row were the same; any other is [`Writer::fill`]ed.
    fn answer(
        &mut self,
        applied: &[AppliedLimit<'_>],
        top: Option<&Decision>,
        rejected: bool,
        content_length: u64,
    ) -> HeaderMap {
        let shape = Shape::of(applied, top, rejected);
        let [one] = applied else {
            let p = (!applied.is_empty()).then(|| self.policy(applied));
            return self
                .fill(shape, p, applied, top, rejected, content_length)
                .0;
        };
        let p = self.policy(applied);
        let key = AnswerKey::of(shape, one, top, rejected, content_length);
        if let Some(kept) = self
            .policies
            .get(p)
            .and_then(|policy| policy.answer.kept(&key))
        {
            return kept;
        }
        let (headers, whole) = self.fill(shape, Some(p), applied, top, rejected, content_length);
        if let Some(policy) = self.policies.get_mut(p) {
            policy.answer.saw(key, whole.then_some(&headers));
        }
        headers
    }

    /// A copy of the thread's map of `shape`'s names, its values put in
    /// place; and whether every value was (they always are: each is digits
    /// or quoted names; one that failed is left out, as
    /// [`add_rate_limit_headers`] leaves it out).
    fn fill(
        &mut self,
        shape: Shape,
        p: Option<usize>,
        applied: &[AppliedLimit<'_>],
        top: Option<&Decision>,
        rejected: bool,
        content_length: u64,
    ) -> (HeaderMap, bool) {
        let mut headers = self.templates[shape.0]
            .get_or_insert_with(|| shape.template())
            .clone();
        // Bit `i`: the `i`th header's value failed, and is left out.
        let mut failed = 0u16;
        let mut slots = headers.values_mut();
        let mut i = 0;
        let mut fill = |value: Result<HeaderValue, InvalidHeaderValue>| {
            match (slots.next(), value) {
                (Some(slot), Ok(value)) => *slot = value,
                _ => failed |= 1 << i,
            }
            i += 1;
        };
        fill(Ok(HeaderValue::from_static(JSON)));
        if let Some(p) = p {
            self.write(p, applied, top, rejected, |_, value| fill(value));
        }
        let buf = self.buf.get_or_insert_with(BytesMut::new);
        if buf.capacity() < 24 {
            buf.reserve(BLOCK);
        }
        fill(self.length.number(buf, content_length));
        if failed == 0 {
            return (headers, true);
        }
        let mut kept = HeaderMap::with_capacity(Shape::MOST);
        for (i, (name, value)) in headers.into_iter().enumerate() {
            if let (Some(name), false) = (name, failed & (1 << i) != 0) {
                kept.append(name, value);
            }
        }
        (kept, false)
    }
}

/// The `content-type` of [`answer_headers`].
const JSON: &str = "application/json";

/// What an answer's map of one limit is made from: two answers with the
/// same have the same headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AnswerKey {
    shape: Shape,
    /// The limit's remaining quota and seconds to reset (`RateLimit`).
    remaining: u64,
    reset: u64,
    /// The most constrained decision's limit, remaining quota, seconds to
    /// reset and seconds to retry after (the trio and `Retry-After`), as
    /// far as the shape has them.
    top: [u64; 4],
    length: u64,
}

impl AnswerKey {
    fn of(
        shape: Shape,
        one: &AppliedLimit<'_>,
        top: Option<&Decision>,
        rejected: bool,
        length: u64,
    ) -> AnswerKey {
        let top = top.map_or([0; 4], |top| {
            [
                top.limit,
                top.remaining,
                duration_to_secs_ceil(top.reset_after),
                if rejected {
                    retry_after_secs(top.retry_after)
                } else {
                    0
                },
            ]
        });
        AnswerKey {
            shape,
            remaining: one.decision.remaining,
            reset: duration_to_secs_ceil(one.decision.reset_after),
            top,
            length,
        }
    }
}

/// The map of the last answers of one limit, kept once two answers in a
/// row were made from the same [`AnswerKey`].
#[derive(Default)]
struct KeptAnswer {
    last: Option<AnswerKey>,
    /// The map of `last`, once it came twice. Its values are those the
    /// [`Kept`] values of its limit kept by then: bytes of their own, not
    /// a thread's block.
    map: Option<HeaderMap>,
}

impl KeptAnswer {
    /// A copy of the kept map, if it was made from `key`.
    fn kept(&self, key: &AnswerKey) -> Option<HeaderMap> {
        if self.last.as_ref() == Some(key) {
            self.map.clone()
        } else {
            None
        }
    }

    /// Notes an answer made from `key` (its map, when whole): kept if
    /// `key` came twice in a row.
    fn saw(&mut self, key: AnswerKey, map: Option<&HeaderMap>) {
        if self.last == Some(key) {
            self.map = map.cloned();
        } else {
            self.last = Some(key);
            self.map = None;
        }
    }
}

/// The names of an answer's headers ([`answer_headers`]), as bits: which
/// of the headers that an answer may leave out it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape(usize);

impl Shape {
    /// The rate-limit headers.
    const RATE_LIMIT: usize = 1;
    /// `X-RateLimit-Degraded`.
    const DEGRADED: usize = 2;
    /// The `X-RateLimit-*` trio.
    const TOP: usize = 4;
    /// `Retry-After`.
    const RETRY_AFTER: usize = 8;
    /// Shapes there are room for.
    const COUNT: usize = 16;
    /// The most headers of a shape: `content-type`, the two IETF headers,
    /// `X-RateLimit-Degraded`, the trio, `Retry-After` and
    /// `content-length`.
    const MOST: usize = 9;

    /// The names [`Writer::write`] gives for these arguments.
    fn of(applied: &[AppliedLimit<'_>], top: Option<&Decision>, rejected: bool) -> Shape {
        if applied.is_empty() {
            return Shape(0);
        }
        let mut bits = Shape::RATE_LIMIT;
        if applied.iter().any(|a| a.decision.degraded) {
            bits |= Shape::DEGRADED;
        }
        if top.is_some() {
            bits |= Shape::TOP;
            if rejected {
                bits |= Shape::RETRY_AFTER;
            }
        }
        Shape(bits)
    }

    fn has(self, bit: usize) -> bool {
        self.0 & bit != 0
    }

    /// The names of this shape, in the order they are sent.
    fn names(self) -> impl Iterator<Item = HeaderName> {
        use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
        let rate = self.has(Shape::RATE_LIMIT);
        let top = rate && self.has(Shape::TOP);
        [
            (true, CONTENT_TYPE),
            (rate, RATELIMIT_POLICY),
            (rate, RATELIMIT),
            (rate && self.has(Shape::DEGRADED), X_RATELIMIT_DEGRADED),
            (top, X_RATELIMIT_LIMIT),
            (top, X_RATELIMIT_REMAINING),
            (top, X_RATELIMIT_RESET),
            (top && self.has(Shape::RETRY_AFTER), RETRY_AFTER),
            (true, CONTENT_LENGTH),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
    }

    /// A map of this shape's names, each with a blank value.
    fn template(self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(Shape::MOST);
        for name in self.names() {
            map.insert(name, HeaderValue::from_static(""));
        }
        map
    }
}

/// The `RateLimit` value of `applied`, whose `RateLimit-Policy` is
/// `policy`, its quoted names at `names`: each limit's quoted name again,
/// with its remaining quota and the seconds until it resets.
fn rate_limit_value(
    buf: &mut BytesMut,
    policy: &HeaderValue,
    names: &[Range<usize>],
    applied: &[AppliedLimit<'_>],
) -> Result<HeaderValue, InvalidHeaderValue> {
    let quoted = policy.as_bytes();
    for (i, (a, name)) in applied.iter().zip(names).enumerate() {
        if i > 0 {
            buf.extend_from_slice(b", ");
        }
        buf.extend_from_slice(quoted.get(name.clone()).unwrap_or_default());
        push_param(buf, b";r=", a.decision.remaining);
        push_param(buf, b";t=", duration_to_secs_ceil(a.decision.reset_after));
    }
    value(buf)
}

/// `n` as a header value.
fn number(buf: &mut BytesMut, n: u64) -> Result<HeaderValue, InvalidHeaderValue> {
    push_param(buf, b"", n);
    value(buf)
}

/// What `buf` holds as a header value, leaving `buf` empty (and its spare
/// room for the next value). Every value is built from digits and
/// `push_sf_string` output: visible ASCII, which never fails. The bytes are
/// taken over without a copy.
fn value(buf: &mut BytesMut) -> Result<HeaderValue, InvalidHeaderValue> {
    HeaderValue::from_maybe_shared(buf.split().freeze())
}

/// Inserts `value` as `name`'s.
fn insert(
    headers: &mut HeaderMap,
    name: HeaderName,
    value: Result<HeaderValue, InvalidHeaderValue>,
) {
    if let Ok(value) = value {
        headers.insert(name, value);
    }
}

/// The `RateLimit-Policy` value of `applied`, in bytes of its own (kept,
/// it must not hold a thread's block).
fn write_policy(applied: &[AppliedLimit<'_>]) -> Policy {
    let mut buf = BytesMut::with_capacity(applied.iter().map(|a| 2 * a.name.len() + 48).sum());
    let buf = &mut buf;
    let mut names = Vec::with_capacity(applied.len());
    for (i, a) in applied.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b", ");
        }
        let start = buf.len();
        push_sf_string(buf, &a.name);
        names.push(start..buf.len());
        push_param(buf, b";q=", a.policy.quota);
        push_param(buf, b";w=", a.policy.window_secs.max(1));
    }
    let value = HeaderValue::from_maybe_shared(buf.split().freeze())
        // Never: `push_sf_string` and digits write visible ASCII alone.
        .unwrap_or_else(|_| HeaderValue::from_static(""));
    Policy {
        limits: applied
            .iter()
            .map(|a| (Box::from(&*a.name), a.policy))
            .collect(),
        value,
        names,
        limit: KeptNumber::default(),
        remaining: KeptNumber::default(),
        reset: KeptNumber::default(),
        retry_after: KeptNumber::default(),
        rate_limit: Kept::default(),
        answer: KeptAnswer::default(),
    }
}

/// Appends `key` and `value` (`;q=10`).
fn push_param(out: &mut BytesMut, key: &[u8], value: u64) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The headers of a JSON answer made here, as a map of its own:
/// `content-type: application/json`, the headers of
/// [`add_rate_limit_headers`] and `content-length`, in that order (the
/// order axum gave them when it added `content-length` itself).
///
/// The map is a copy of one the thread keeps with the same names, its
/// values put in place, rather than each name hashed and inserted; an
/// answer of one limit that repeats the one before it with that limit is
/// a copy of that answer's map.
pub fn answer_headers(
    applied: &[AppliedLimit<'_>],
    top: Option<&Decision>,
    rejected: bool,
    content_length: u64,
) -> HeaderMap {
    WRITER.with(|writer| match writer.try_borrow_mut() {
        Ok(mut writer) => writer.answer(applied, top, rejected, content_length),
        // Never: nothing in `answer` comes back here.
        Err(_) => Writer::new().answer(applied, top, rejected, content_length),
    })
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
    fn kept_policies_are_the_values_written_fresh_however_many_limits_come() {
        // More lists of limits than a thread keeps, each seen again after
        // others replaced it; single limits and pairs.
        for round in 0..3u64 {
            for n in 1..=(2 * KEPT_POLICIES as u64) {
                let name = format!("rule-{n}");
                let one = applied(&name, &format!("{n}/m"), n + round, 1000 * n);
                let pair = [one.clone(), applied("per-second", "10/s", round, 10)];
                let h = rate_limit_headers(&[one], None, false);
                assert_eq!(h[&RATELIMIT_POLICY], format!("\"{name}\";q={n};w=60"));
                assert_eq!(h[&RATELIMIT], format!("\"{name}\";r={};t={n}", n + round));
                let h = rate_limit_headers(&pair, Some(&pair[1].decision), true);
                assert_eq!(
                    h[&RATELIMIT_POLICY],
                    format!("\"{name}\";q={n};w=60, \"per-second\";q=10;w=1")
                );
                assert_eq!(
                    h[&RATELIMIT],
                    format!(
                        "\"{name}\";r={};t={n}, \"per-second\";r={round};t=1",
                        n + round
                    )
                );
                assert_eq!(h[&X_RATELIMIT_REMAINING], round.to_string().as_str());
                assert_eq!(h[http::header::RETRY_AFTER], "1");
            }
        }
    }

    #[test]
    fn repeated_numbers_are_the_values_written_fresh() {
        // The limit stays while the reset goes 1, 1, 1, 2, 1, 1, 3, 3, 3.
        let resets = [1, 1, 1, 2, 1, 1, 3, 3, 3];
        for (i, reset) in resets.into_iter().enumerate() {
            let remaining = 1000 - i as u64;
            let limits = [applied("kept", "1000/m", remaining, reset * 1000 - 10)];
            let h = rate_limit_headers(&limits, Some(&limits[0].decision), false);
            assert_eq!(h[&X_RATELIMIT_LIMIT], "1000");
            assert_eq!(h[&X_RATELIMIT_REMAINING], remaining.to_string().as_str());
            assert_eq!(h[&X_RATELIMIT_RESET], reset.to_string().as_str());
            assert_eq!(h[&RATELIMIT], format!("\"kept\";r={remaining};t={reset}"));
        }
    }

    #[test]
    fn repeated_remaining_quotas_and_rate_limits_are_the_values_written_fresh() {
        // (remaining, reset ms) of one limit's answers, each repeated
        // after a change, and kept values met again after others.
        let answers = [
            (999, 1000),
            (999, 1000),
            (999, 1000),
            (999, 2000),
            (999, 2000),
            (998, 2000),
            (998, 2000),
            (999, 1000),
            (999, 1000),
            (0, 1000),
        ];
        for (remaining, reset_ms) in answers {
            let limits = [applied("kept-remaining", "1000/s", remaining, reset_ms)];
            let h = rate_limit_headers(&limits, Some(&limits[0].decision), false);
            let reset = reset_ms / 1000;
            assert_eq!(h[&X_RATELIMIT_REMAINING], remaining.to_string().as_str());
            assert_eq!(
                h[&RATELIMIT],
                format!("\"kept-remaining\";r={remaining};t={reset}")
            );
            // Two limits are written fresh, beside the kept values of one.
            let pair = [limits[0].clone(), applied("other", "10/s", 3, 500)];
            let h = rate_limit_headers(&pair, Some(&pair[0].decision), false);
            assert_eq!(
                h[&RATELIMIT],
                format!("\"kept-remaining\";r={remaining};t={reset}, \"other\";r=3;t=1")
            );
        }
    }

    /// `content-type`, [`add_rate_limit_headers`] and `content-length`
    /// inserted one by one, as answers were made before
    /// [`answer_headers`].
    fn inserted(
        applied: &[AppliedLimit<'_>],
        top: Option<&Decision>,
        rejected: bool,
        length: u64,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = HeaderMap::new();
        let json = HeaderValue::from_static("application/json");
        headers.insert(http::header::CONTENT_TYPE, json);
        add_rate_limit_headers(&mut headers, applied, top, rejected);
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
        in_order(&headers)
    }

    fn in_order(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        let pairs: Vec<_> = headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        assert_eq!(pairs.len(), headers.len(), "one value per name");
        pairs
    }

    #[test]
    fn an_answers_map_is_the_headers_inserted_one_by_one_in_their_order() {
        let degraded = {
            let mut one = applied("degraded", "5/s", 4, 200);
            one.decision.degraded = true;
            one
        };
        let lists = [
            vec![],
            vec![applied("one", "10/s", 9, 100)],
            vec![applied("one", "10/s", 0, 900)],
            vec![
                applied("one", "10/s", 9, 100),
                applied("two", "100/m", 50, 3000),
            ],
            vec![degraded.clone()],
            vec![applied("one", "10/s", 9, 100), degraded],
        ];
        // Each case thrice: the values written, then kept, then shared.
        for round in 0..3 {
            for applied in &lists {
                for (top, rejected) in [(None, false), (Some(0), false), (Some(0), true)] {
                    let top = top.and_then(|i| applied.get(i)).map(|a| {
                        let mut top = a.decision;
                        top.retry_after = Duration::from_millis(1500);
                        top
                    });
                    for length in [0, 102, 102, 102, 99_999] {
                        let made = answer_headers(applied, top.as_ref(), rejected, length);
                        assert_eq!(
                            in_order(&made),
                            inserted(applied, top.as_ref(), rejected, length),
                            "round {round}, {applied:?}, top {top:?}, rejected {rejected}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sub_second_windows_are_one_second_and_odd_names_are_sanitised() {
        let limits = [applied("é\n", "5/100ms", 0, 0)];
        let h = rate_limit_headers(&limits, Some(&limits[0].decision), true);
        assert_eq!(h[&RATELIMIT_POLICY], r#""__";q=5;w=1"#);
        assert_eq!(h[http::header::RETRY_AFTER], "1");
    }
}
