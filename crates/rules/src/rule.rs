//! A validated rule: what one descriptor of a rules file says, ready for the
//! server to apply — its limits, flags, names, and what envoy's gRPC answer
//! reports about it.
//!
//! This module owns [`Rule`] and the small types it exposes; matching a
//! request to a rule is `matcher`, and building rules from YAML is `parse`.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use tollgate_core::policy::QuotaPolicy;
use tollgate_core::Limit;

use crate::metadata::Metadata;
use crate::resolve::Descriptor;
use crate::wildcard::WildcardPattern;

/// envoyproxy/ratelimit's units (`RateLimitResponse.RateLimit.Unit`), with
/// their wire numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RateLimitUnit {
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3,600 s.
    Hour = 3,
    /// 86,400 s.
    Day = 4,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month = 5,
    /// 365 days, as envoyproxy/ratelimit counts a year.
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl RateLimitUnit {
    /// Every unit, shortest first.
    pub const ALL: [RateLimitUnit; 7] = [
        RateLimitUnit::Second,
        RateLimitUnit::Minute,
        RateLimitUnit::Hour,
        RateLimitUnit::Day,
        RateLimitUnit::Week,
        RateLimitUnit::Month,
        RateLimitUnit::Year,
    ];

    /// The unit's length in seconds (month = 30 days, year = 365 days,
    /// as in envoyproxy/ratelimit's `UnitToDivider`).
    pub fn seconds(self) -> u64 {
        match self {
            RateLimitUnit::Second => 1,
            RateLimitUnit::Minute => 60,
            RateLimitUnit::Hour => 3_600,
            RateLimitUnit::Day => 86_400,
            RateLimitUnit::Week => 7 * 86_400,
            RateLimitUnit::Month => 30 * 86_400,
            RateLimitUnit::Year => 365 * 86_400,
        }
    }

    /// The upper-case name used in envoy's protos (`SECOND`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitUnit::Second => "SECOND",
            RateLimitUnit::Minute => "MINUTE",
            RateLimitUnit::Hour => "HOUR",
            RateLimitUnit::Day => "DAY",
            RateLimitUnit::Week => "WEEK",
            RateLimitUnit::Month => "MONTH",
            RateLimitUnit::Year => "YEAR",
        }
    }

    /// Parses a unit name in any case (`second`, `SECOND`, `Second`), as
    /// envoyproxy/ratelimit does.
    pub fn from_name(name: &str) -> Option<RateLimitUnit> {
        Self::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(name))
    }

    /// The unit that best names a window of `nanos`: the exact unit when the
    /// window is one whole unit, otherwise the nearest on a logarithmic
    /// scale (ties go to the longer unit, which understates the rate).
    ///
    /// ```
    /// use tollgate_rules::RateLimitUnit;
    /// let s = 1_000_000_000;
    /// assert_eq!(RateLimitUnit::nearest(60 * s), RateLimitUnit::Minute);
    /// assert_eq!(RateLimitUnit::nearest(90 * s), RateLimitUnit::Minute);
    /// assert_eq!(RateLimitUnit::nearest(12 * 3600 * s), RateLimitUnit::Day);
    /// assert_eq!(RateLimitUnit::nearest(s / 2), RateLimitUnit::Second);
    /// ```
    pub fn nearest(nanos: u64) -> RateLimitUnit {
        let secs = nanos as f64 / 1e9;
        let mut best = RateLimitUnit::Second;
        let mut best_distance = f64::INFINITY;
        for unit in Self::ALL {
            let distance = (secs / unit.seconds() as f64).ln().abs();
            if distance <= best_distance {
                best = unit;
                best_distance = distance;
            }
        }
        best
    }
}

impl fmt::Display for RateLimitUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What envoy's `RateLimitResponse.RateLimit` reports for one limit:
/// `requests_per_unit` per `unit`.
///
/// For a limit given with `unit`, these are exactly the file's values. For a
/// `window:` limit, `requests_per_unit` is the limit's `N` and `unit` is
/// [`RateLimitUnit::nearest`] the window; the real period is the limit's
/// `rate.period()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReportedLimit {
    /// The count.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: RateLimitUnit,
}

/// How one level of a rule's path matches a request entry's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueMatch {
    /// `value: x` — exactly `x`.
    Exact(String),
    /// A `value` with `*` in it, as written (`foo*`, `*bar`, `foo*bar*baz`):
    /// each `*` matches any run of characters, none included.
    Wildcard(String),
    /// No `value` — any value; each distinct value gets its own counter.
    Any,
}

/// One level of a rule's path: the key and how its value matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathStep {
    /// The descriptor entry's key.
    pub key: String,
    /// How the entry's value matches.
    pub value: ValueMatch,
    /// `share_threshold: true` (wildcard values only): every value the
    /// wildcard matches draws on one counter, named by the pattern.
    pub share_threshold: bool,
    /// `value_to_metric: true`: the metric label names this level by the
    /// request's value (`key_value`), not as the rule is written.
    pub value_to_metric: bool,
}

/// One rule: the descriptor of a rules file that a request descriptor
/// matched, with everything the server needs to apply it.
///
/// Rules compare equal when they would behave the same, wherever in the
/// files they are written, so a server can keep counters and metrics of the
/// rules a reload did not change.
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) id: String,
    pub(crate) domain: String,
    pub(crate) path: Vec<PathStep>,
    pub(crate) name: Option<String>,
    pub(crate) replaces: Vec<String>,
    pub(crate) limits: Vec<Limit>,
    pub(crate) reported: Vec<ReportedLimit>,
    pub(crate) unlimited: bool,
    pub(crate) denies_all: bool,
    pub(crate) shadow_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) quota_mode: bool,
    pub(crate) metadata: Option<Arc<Metadata>>,
    pub(crate) key_prefix: Vec<u8>,
    /// A runtime override's rule: `key_prefix` already names the
    /// descriptor's keys and values, and its counters do not depend on
    /// anything else of the request.
    pub(crate) exact_entries: bool,
    /// Each limit's name in the rate-limit headers, written at load (see
    /// [`Rule::limit_header_name`]); derived from `name`, `id` and
    /// `limits`, so left out of the comparison.
    pub(crate) header_names: Vec<String>,
    /// Each limit's `RateLimit-Policy` quota and window
    /// ([`Limit::policy`]), worked out at load rather than on every
    /// answer; follows from `limits`, so left out of the comparison.
    pub(crate) policies: Vec<QuotaPolicy>,
    pub(crate) line: usize,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Rule) -> bool {
        // `line` (and the precomputed key prefix, which follows from the
        // path) are left out: moving a rule in its file changes nothing.
        self.id == other.id
            && self.domain == other.domain
            && self.path == other.path
            && self.name == other.name
            && self.replaces == other.replaces
            && self.limits == other.limits
            // Limits compare without their sync mode; a reload that changes
            // it changes the rule.
            && self.limits.iter().map(|l| l.sync).eq(other.limits.iter().map(|l| l.sync))
            && self.reported == other.reported
            && self.unlimited == other.unlimited
            && self.denies_all == other.denies_all
            && self.shadow_mode == other.shadow_mode
            && self.detailed_metric == other.detailed_metric
            && self.quota_mode == other.quota_mode
            && self.metadata == other.metadata
            && self.exact_entries == other.exact_entries
    }
}

impl Eq for Rule {}

/// The header name of each of `limits` of a rule called `name`: see
/// [`Rule::limit_header_name`].
pub(crate) fn header_names(name: &str, limits: &[Limit]) -> Vec<String> {
    match limits {
        [_] => vec![name.to_owned()],
        limits => limits
            .iter()
            .map(|l| format!("{name}:{}", l.rate))
            .collect(),
    }
}

impl Rule {
    /// A stable, human-readable path naming the rule, as envoyproxy/ratelimit
    /// names its stats: the domain, then each level's `key` or `key_value`,
    /// joined by dots, e.g. `messaging.message_type_marketing.to_number`.
    /// Use it as the metric label.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The domain the rule belongs to.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The levels of the rule's path, outermost first.
    pub fn path(&self) -> &[PathStep] {
        &self.path
    }

    /// The rule's `name`, if given (what `replaces` refers to, and the name
    /// in the `RateLimit` headers).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The names of the rules this one replaces when both apply to a request.
    pub fn replaces(&self) -> &[String] {
        &self.replaces
    }

    /// The limits to check, all-or-nothing; empty for an
    /// [`unlimited`](Rule::unlimited) rule and for one that
    /// [`denies_all`](Rule::denies_all).
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// What envoy's gRPC answer reports for each limit, in the order of
    /// [`limits`](Rule::limits); for a rule that denies all, one entry with
    /// `requests_per_unit` 0; empty when unlimited.
    pub fn reported_limits(&self) -> &[ReportedLimit] {
        &self.reported
    }

    /// `unlimited: true`: always allowed, never counted (envoy answers OK
    /// with `limit_remaining` 4294967295).
    pub fn unlimited(&self) -> bool {
        self.unlimited
    }

    /// `requests_per_unit: 0`: every request is over the limit, as in
    /// envoyproxy/ratelimit (its README uses this to block an address).
    pub fn denies_all(&self) -> bool {
        self.denies_all
    }

    /// `shadow_mode: true`: evaluate and count, report in metrics, but never
    /// reject.
    pub fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// `quota_mode: true`: the rule is a quota. It is checked and debited on
    /// its own, and its rejection decides the request only when every quota
    /// rule of the request rejects it (see
    /// [`check::over_limit`](crate::check::over_limit)).
    pub fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// The descriptor's `metadata` mapping, if it has one: what the gRPC
    /// answer's `dynamic_metadata` carries when the descriptor passes (with
    /// `--response-dynamic-metadata`).
    pub fn metadata(&self) -> Option<&Arc<Metadata>> {
        self.metadata.as_ref()
    }

    /// `detailed_metric: true`: metrics carry the request's values (see
    /// [`metric_label`](Rule::metric_label)).
    pub fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// The name of limit `l` in the rate-limit headers: the rule's `name`
    /// (or its path), with the limit's rate appended when the rule has
    /// several limits (`per_key:10/s`). Written once, at load.
    pub fn limit_header_name(&self, l: usize) -> &str {
        match self.header_names.get(l) {
            Some(name) => name,
            None => self.name().unwrap_or(self.id()),
        }
    }

    /// What `RateLimit-Policy` announces for limit `l` (its
    /// [`Limit::policy`], worked out when the rule was loaded); for an
    /// index past the rule's limits, nothing admitted over one second.
    pub fn limit_policy(&self, l: usize) -> QuotaPolicy {
        match self.policies.get(l) {
            Some(policy) => *policy,
            None => QuotaPolicy {
                quota: 0,
                window_secs: 1,
            },
        }
    }

    /// Whether the rule is a runtime override's (set through
    /// `PUT /v1/overrides/{domain}`, not written in a rules file): it
    /// applies to one exact descriptor, and its metric label is the
    /// domain's one override label (`api._override_`), whatever the
    /// descriptor.
    pub fn is_override(&self) -> bool {
        self.exact_entries
    }

    /// The line of the rules file where the rule's descriptor starts (0
    /// for an override).
    pub fn line(&self) -> usize {
        self.line
    }

    /// Whether the metric label carries request values: with
    /// `detailed_metric`, or `value_to_metric` on any level. The server caps
    /// how many distinct labels one rule makes (`--metric-values-per-rule`).
    pub fn metric_has_values(&self) -> bool {
        self.detailed_metric || self.path.iter().any(|step| step.value_to_metric)
    }

    /// The metric label for a request this rule matched: [`id`](Rule::id),
    /// and with `detailed_metric`, `_value` appended for each level matched
    /// by a wildcard or key-only descriptor (the levels whose value the id
    /// does not already name), as envoyproxy/ratelimit appends the value. A
    /// level with `share_threshold` has one counter for all its values and
    /// adds nothing: the id already names its pattern.
    ///
    /// Without `detailed_metric` (which takes precedence, as in
    /// envoyproxy/ratelimit), each level with `value_to_metric` is named
    /// `key_value` with the request's value, the others as in the id:
    /// `api.path_/users/42` for a key-only `path` level.
    pub fn metric_label<D: Descriptor + ?Sized>(&self, descriptor: &D) -> String {
        if !self.detailed_metric {
            if !self.metric_has_values() {
                return self.id.clone();
            }
            let mut label = self.domain.clone();
            for (i, step) in self.path.iter().enumerate() {
                let _ = write!(label, ".{}", step.key);
                let value = match &step.value {
                    _ if step.value_to_metric && i < descriptor.len() => descriptor.entry(i).1,
                    ValueMatch::Exact(v) | ValueMatch::Wildcard(v) => v.as_str(),
                    ValueMatch::Any => continue,
                };
                let _ = write!(label, "_{value}");
            }
            return label;
        }
        let mut label = self.id.clone();
        for (i, step) in self.path.iter().enumerate() {
            if matches!(step.value, ValueMatch::Exact(_)) || step.share_threshold {
                continue;
            }
            if i < descriptor.len() {
                let _ = write!(label, "_{}", descriptor.entry(i).1);
            }
        }
        label
    }

    /// Writes the store key for `descriptor` under this rule into `buf`
    /// (appending): the domain and rule path (precomputed), then each of the
    /// request's values, every part length-prefixed (`len:bytes`), so no two
    /// different (domain, rule, values) give the same key.
    ///
    /// Every request value is part of the key, as in envoyproxy/ratelimit's
    /// cache key: key-only and wildcard levels give one counter per distinct
    /// value; exact levels have one value, so one counter. A wildcard level
    /// with `share_threshold` writes `*` in place of the value (no part
    /// starts with `*`, they start with their length), so every value the
    /// pattern matches shares one counter.
    ///
    /// A runtime override's rule applies to exact descriptors: after its
    /// prefix (the domain and `!`) come each entry's key and value.
    pub fn write_counter_key<D: Descriptor + ?Sized>(&self, descriptor: &D, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.key_prefix);
        if self.exact_entries {
            write_entries(descriptor, buf);
            return;
        }
        for i in 0..descriptor.len() {
            if self.path.get(i).is_some_and(|step| step.share_threshold) {
                buf.push(b'*');
            } else {
                push_part(buf, descriptor.entry(i).1.as_bytes());
            }
        }
    }

    /// The store key for `descriptor` under this rule (see
    /// [`write_counter_key`](Rule::write_counter_key)).
    pub fn counter_key<D: Descriptor + ?Sized>(&self, descriptor: &D) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.key_prefix.len() + 16 * descriptor.len());
        self.write_counter_key(descriptor, &mut buf);
        buf
    }
}

/// Where key bytes are written: a `Vec` for keys that are kept, a stack
/// buffer for a key that is only looked up (an override's probe).
pub(crate) trait KeyBuf {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl KeyBuf for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Appends `len:bytes`.
#[inline]
pub(crate) fn push_part<B: KeyBuf + ?Sized>(buf: &mut B, part: &[u8]) {
    let mut digits = [0u8; 20];
    let mut n = part.len();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put(&digits[at..]);
    buf.put(b":");
    buf.put(part);
}

/// The id (and metric label) of every override of `domain`: one label per
/// domain, so a million overrides make one series, not a million.
pub(crate) fn override_id(domain: &str) -> String {
    format!("{domain}.{OVERRIDE_LABEL}")
}

/// The last part of an override's metric label.
pub const OVERRIDE_LABEL: &str = "_override_";

/// The start of the counter keys of `domain`'s overrides: the version
/// tag, the domain and `!` (no rule path starts with it: a path's first
/// part starts with its length). Each key goes on with the descriptor's
/// entries ([`write_entries`]).
pub(crate) fn override_key_prefix(domain: &str) -> Vec<u8> {
    let mut buf = b"tg1|".to_vec();
    push_part(&mut buf, domain.as_bytes());
    buf.push(b'!');
    buf
}

/// Appends each entry's key and value, length-prefixed: the exact
/// descriptor, unambiguously (an override's key, and its counter key's
/// end).
pub(crate) fn write_entries<D: Descriptor + ?Sized, B: KeyBuf + ?Sized>(
    descriptor: &D,
    buf: &mut B,
) {
    for i in 0..descriptor.len() {
        let (key, value) = descriptor.entry(i);
        push_part(buf, key.as_bytes());
        push_part(buf, value.as_bytes());
    }
}

/// The precomputed part of a rule's counter keys: a version tag, the
/// domain, and each path step's key, match kind and pattern.
pub(crate) fn key_prefix(domain: &str, path: &[PathStep]) -> Vec<u8> {
    let mut buf = b"tg1|".to_vec();
    push_part(&mut buf, domain.as_bytes());
    for step in path {
        push_part(&mut buf, step.key.as_bytes());
        match &step.value {
            ValueMatch::Exact(v) => {
                buf.push(b'=');
                push_part(&mut buf, v.as_bytes());
            }
            ValueMatch::Wildcard(p) => match WildcardPattern::compile(p)
                .as_ref()
                .and_then(WildcardPattern::plain_prefix)
            {
                // A plain prefix keeps the key earlier versions gave it.
                Some(prefix) => {
                    buf.push(b'*');
                    push_part(&mut buf, prefix.as_bytes());
                }
                None => {
                    buf.push(b'~');
                    push_part(&mut buf, p.as_bytes());
                }
            },
            ValueMatch::Any => buf.push(b'?'),
        }
    }
    buf.push(b'|');
    buf
}

/// A rules counter key read back into what it names (for people: the
/// dashboard's top offenders): the domain and, for each level of the
/// rule's path, the descriptor entry's key and the request's value (`*` on
/// a wildcard level whose values share one counter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterKeyParts {
    /// The rule's domain.
    pub domain: String,
    /// `(key, value)` per level, in path order.
    pub entries: Vec<(String, String)>,
}

/// Reads a key written by [`Rule::write_counter_key`] back into its parts;
/// `None` for any other bytes (an inline key, a later key version).
///
/// ```
/// use tollgate_rules::parse_counter_key;
/// let parts = parse_counter_key(b"tg1|3:api4:user?|7:mallory").unwrap();
/// assert_eq!(parts.domain, "api");
/// assert_eq!(parts.entries, [("user".to_owned(), "mallory".to_owned())]);
/// assert!(parse_counter_key(b"my-inline-key").is_none());
/// // A runtime override's key names its exact descriptor.
/// let parts = parse_counter_key(b"tg1|3:api!4:user3:vip").unwrap();
/// assert_eq!(parts.entries, [("user".to_owned(), "vip".to_owned())]);
/// ```
pub fn parse_counter_key(key: &[u8]) -> Option<CounterKeyParts> {
    /// One `len:bytes` part at the start of `rest`, and what follows it.
    fn part(rest: &[u8]) -> Option<(&str, &[u8])> {
        let colon = rest.iter().position(|&b| b == b':')?;
        let digits = std::str::from_utf8(&rest[..colon]).ok()?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let len: usize = digits.parse().ok()?;
        let body = rest.get(colon + 1..)?;
        let bytes = body.get(..len)?;
        Some((std::str::from_utf8(bytes).ok()?, &body[len..]))
    }
    let rest = key.strip_prefix(b"tg1|")?;
    let (domain, mut rest) = part(rest)?;
    // A runtime override's key: `!` then the exact descriptor.
    if let Some(entries) = rest.strip_prefix(b"!") {
        return Some(CounterKeyParts {
            domain: domain.to_owned(),
            entries: crate::overrides::parse_entries(entries)?,
        });
    }
    let mut keys = Vec::new();
    loop {
        match rest.split_first()? {
            (b'|', after) => {
                rest = after;
                break;
            }
            _ => {
                let (step_key, after) = part(rest)?;
                rest = match after.split_first()? {
                    (b'?', after) => after,
                    (b'=' | b'*' | b'~', after) => part(after)?.1,
                    _ => return None,
                };
                keys.push(step_key);
            }
        }
    }
    let mut entries = Vec::with_capacity(keys.len());
    for step_key in keys {
        let value = match rest.split_first()? {
            (b'*', after) => {
                rest = after;
                "*"
            }
            _ => {
                let (value, after) = part(rest)?;
                rest = after;
                value
            }
        };
        entries.push((step_key.to_owned(), value.to_owned()));
    }
    rest.is_empty().then(|| CounterKeyParts {
        domain: domain.to_owned(),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_keys_read_back_into_their_parts() {
        let rules = crate::RuleSet::from_yaml(
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: path\n    value: /a:b|c\n    descriptors:\n      - key: ip\n        value: 10.*\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
            "rules.yaml",
        )
        .unwrap();
        let ask = |entries: Vec<(&str, &str)>| {
            let request = [entries];
            let resolved = rules.resolve("api", &request).unwrap();
            let key = resolved[0].expect("a rule applies").counter_key();
            parse_counter_key(&key).expect("a rules key")
        };
        let user = ask(vec![("user", "mal|lo:ry")]);
        assert_eq!(user.domain, "api");
        assert_eq!(user.entries, [("user".to_owned(), "mal|lo:ry".to_owned())]);
        let nested = ask(vec![("path", "/a:b|c"), ("ip", "10.0.0.1")]);
        assert_eq!(
            nested.entries,
            [
                ("path".to_owned(), "/a:b|c".to_owned()),
                ("ip".to_owned(), "10.0.0.1".to_owned())
            ]
        );
        for other in [
            &b""[..],
            b"tg1|",
            b"tg1|3:api",
            b"tg1|3:api4:user?|",
            b"tg1|3:api4:user?|7:mallory!",
            b"tg2|3:api|",
        ] {
            assert_eq!(parse_counter_key(other), None, "{other:?}");
        }
    }

    #[test]
    fn units_parse_in_any_case_and_have_envoy_lengths() {
        assert_eq!(
            RateLimitUnit::from_name("second"),
            Some(RateLimitUnit::Second)
        );
        assert_eq!(
            RateLimitUnit::from_name("MONTH"),
            Some(RateLimitUnit::Month)
        );
        assert_eq!(RateLimitUnit::from_name("Week"), Some(RateLimitUnit::Week));
        assert_eq!(RateLimitUnit::from_name("unknown"), None);
        assert_eq!(RateLimitUnit::from_name("seconds"), None);
        assert_eq!(RateLimitUnit::Month.seconds(), 2_592_000);
        assert_eq!(RateLimitUnit::Year.seconds(), 31_536_000);
        assert_eq!(RateLimitUnit::Week as i32, 7);
    }

    #[test]
    fn parts_are_length_prefixed() {
        let mut buf = Vec::new();
        push_part(&mut buf, b"");
        push_part(&mut buf, b"a:b");
        push_part(&mut buf, &[b'x'; 12]);
        assert_eq!(buf, b"0:3:a:b12:xxxxxxxxxxxx".to_vec());
    }
}
