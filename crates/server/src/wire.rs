//! The JSON bodies of the HTTP API (SPEC §5): what requests may contain and
//! what answers look like. Decoding is strict (`deny_unknown_fields`), and
//! nothing here interprets a value beyond its JSON type; `decide` validates.
//! The strings of a decision request borrow from the request body (unless
//! they hold escapes), so decoding one allocates nothing for them.

use std::borrow::Cow;
use std::fmt;

use bytes::BufMut;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use tollgate_core::time::nanos_to_ms_ceil;
use tollgate_core::Decision;

/// An optional string, borrowed from the body unless it holds escapes.
/// serde borrows a `Cow<str>` field marked `borrow` but copies the one in
/// an `Option` into a `String` of its own: an allocation per field per
/// request, for the key and the algorithm of every inline check.
fn optional_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;

    impl<'de> Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
            inner.deserialize_str(Text)
        }

        fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(text)))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text.to_owned())))
        }

        fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text)))
        }
    }

    deserializer.deserialize_option(Text)
}

/// An inline limit: `{"algorithm": "token_bucket", "rate": "10/s", "burst": 20}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec<'a> {
    /// One of the eight algorithm names; `token_bucket` when absent.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub algorithm: Option<Cow<'a, str>>,
    /// Limit notation, e.g. `10/s`, `5/15min`, `100 per minute`.
    #[serde(borrow)]
    pub rate: Cow<'a, str>,
    /// Bucket capacity (token bucket, GCRA, leaky bucket).
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub burst: Option<u64>,
    /// Step of a stepped window, e.g. `1s`.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub step: Option<Cow<'a, str>>,
    /// Lease lifetime of a concurrency limit, e.g. `30s`.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub lease_ttl: Option<Cow<'a, str>>,
    /// A calendar window instead of the rate's period: `calendar_day`,
    /// `calendar_week`, `calendar_month` or `calendar_year`; `rate` is then
    /// the count per window alone (`"10000"`).
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub window: Option<Cow<'a, str>>,
    /// The calendar window's IANA time zone, e.g. `Europe/London`.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub timezone: Option<Cow<'a, str>>,
    /// Where the calendar window starts (see docs/semantics.md).
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub anchor: Option<u64>,
    /// On a shared store, `exact` or `async` for this limit, whatever the
    /// process's `--sync` (ignored by the memory store).
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub sync: Option<Cow<'a, str>>,
}

impl<'a> LimitSpec<'a> {
    /// An algorithm (none: `token_bucket`) and a rate, every other field
    /// absent.
    pub fn plain(algorithm: Option<Cow<'a, str>>, rate: Cow<'a, str>) -> LimitSpec<'a> {
        LimitSpec {
            algorithm,
            rate,
            burst: None,
            step: None,
            lease_ttl: None,
            window: None,
            timezone: None,
            anchor: None,
            sync: None,
        }
    }
}

/// One descriptor entry: `{"key": "user", "value": "42"}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec<'a> {
    /// The descriptor key.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// The value; empty when absent.
    #[serde(default, borrow)]
    pub value: Cow<'a, str>,
}

/// One request descriptor: its entries, in order.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DescriptorSpec<'a> {
    /// The entries, outermost first.
    #[serde(borrow)]
    pub entries: Vec<EntrySpec<'a>>,
}

/// The body of `/v1/check`, `/v1/reserve` and `/v1/release`. Either `key`
/// and `limit` (inline) or `domain` and `descriptors` (rules-based); each
/// route refuses the fields that are not its own.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest<'a> {
    /// Inline: the key to count under.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub key: Option<Cow<'a, str>>,
    /// Inline: the limit.
    #[serde(default, borrow)]
    pub limit: Option<LimitSpec<'a>>,
    /// Rules-based: the rules domain.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub domain: Option<Cow<'a, str>>,
    /// Rules-based: the descriptors, each checked against the domain's rules.
    #[serde(default, borrow)]
    pub descriptors: Option<Vec<DescriptorSpec<'a>>>,
    /// The request's weight; 1 when absent, 0 peeks.
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub cost: Option<u64>,
    /// Decision time in ms since the epoch (only with `--trust-client-time`).
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub at_ms: Option<u64>,
    /// `/v1/reserve`: the longest acceptable wait.
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub max_wait_ms: Option<u64>,
    /// `/v1/release`: the lease to end.
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub lease: Option<u64>,
    /// `/v1/check`: `cost` is an estimate, to be settled with the actual
    /// cost through `/v1/settle` and the answer's `ticket`.
    #[serde(default)]
    pub settle: Option<bool>,
}

/// The decision fields of one limit, or of a descriptor, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DecisionFields {
    /// Admitted (and counted).
    pub allowed: bool,
    /// The limit's maximum; `null` when no limit applied.
    pub limit: Option<u64>,
    /// Unit-cost requests still admitted now; `null` when no limit applied.
    pub remaining: Option<u64>,
    /// When rejected, the wait after which the same request is admitted
    /// (rounded up, so retrying then succeeds).
    pub retry_after_ms: u64,
    /// Time until the limit is back to untouched (rounded up).
    pub reset_after_ms: u64,
    /// Shaping delay to apply before the request goes on (rounded up).
    pub delay_ms: u64,
    /// `concurrency`: the lease to hand back to `/v1/release`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// The store could not be asked; the failure policy decided (SPEC §8).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
    /// `"async"` when decided from a local copy in the async sync mode
    /// (SPEC §8); absent when the store decided exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<&'static str>,
}

impl DecisionFields {
    /// The fields of `decision`.
    pub fn of(decision: &Decision) -> DecisionFields {
        DecisionFields {
            allowed: decision.allowed,
            limit: Some(decision.limit),
            remaining: Some(decision.remaining),
            retry_after_ms: nanos_to_ms_ceil(duration_nanos(decision.retry_after)),
            reset_after_ms: nanos_to_ms_ceil(duration_nanos(decision.reset_after)),
            delay_ms: nanos_to_ms_ceil(duration_nanos(decision.delay)),
            lease: decision.lease,
            degraded: decision.degraded,
            sync: decision.asynchronous.then_some("async"),
        }
    }

    /// Allowed, with no limit applied.
    pub fn unlimited() -> DecisionFields {
        DecisionFields {
            allowed: true,
            limit: None,
            remaining: None,
            retry_after_ms: 0,
            reset_after_ms: 0,
            delay_ms: 0,
            lease: None,
            degraded: false,
            sync: None,
        }
    }
}

fn duration_nanos(d: std::time::Duration) -> u64 {
    tollgate_core::time::duration_to_nanos(d)
}

/// One descriptor's status in a rules-based answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatusBody {
    /// The matched rule's `name` (or its path when it has none); `null` when
    /// no rule matched.
    pub name: Option<String>,
    /// The descriptor's decision (the most constrained of its limits).
    #[serde(flatten)]
    pub fields: DecisionFields,
    /// The rule is in shadow mode: `allowed` is what it decided, but it
    /// rejected nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// The rule is `unlimited`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unlimited: bool,
}

/// The answer of `/v1/check` and `/v1/reserve`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DecisionBody {
    /// The top-level decision (the most constrained status).
    #[serde(flatten)]
    pub fields: DecisionFields,
    /// `/v1/reserve`: how long to wait before making the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Rules-based requests: one status per descriptor, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statuses: Option<Vec<StatusBody>>,
    /// A limit in shadow mode rejected the request; it was admitted anyway.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_rejected: bool,
    /// A check admitted with `"settle": true`: the ticket to settle its
    /// actual cost with (`/v1/settle`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
}

impl DecisionBody {
    /// Appends this body's JSON to `out`: the bytes `serde_json` writes
    /// for it (the derived `Serialize` is the reference, and a test holds
    /// the two together), without going through serde's map serializer —
    /// every field but a status's `name` is a number or a boolean.
    pub fn write_json<B: BufMut>(&self, out: &mut B) {
        out.put_u8(b'{');
        write_fields(out, &self.fields);
        if let Some(wait) = self.wait_ms {
            push_u64(out, b",\"wait_ms\":", wait);
        }
        if let Some(statuses) = &self.statuses {
            out.put_slice(b",\"statuses\":[");
            for (i, status) in statuses.iter().enumerate() {
                if i > 0 {
                    out.put_u8(b',');
                }
                status.write_json(out);
            }
            out.put_u8(b']');
        }
        if self.shadow_rejected {
            out.put_slice(b",\"shadow_rejected\":true");
        }
        if let Some(ticket) = &self.ticket {
            out.put_slice(b",\"ticket\":");
            // serde_json's string escaping; writing into a buffer cannot fail.
            let _ = serde_json::to_writer((&mut *out).writer(), ticket);
        }
        out.put_u8(b'}');
    }
}

impl StatusBody {
    fn write_json<B: BufMut>(&self, out: &mut B) {
        out.put_slice(b"{\"name\":");
        match &self.name {
            // serde_json's string escaping; writing into a buffer cannot fail.
            Some(name) => {
                let _ = serde_json::to_writer((&mut *out).writer(), name);
            }
            None => out.put_slice(b"null"),
        }
        out.put_u8(b',');
        write_fields(out, &self.fields);
        if self.shadow {
            out.put_slice(b",\"shadow\":true");
        }
        if self.unlimited {
            out.put_slice(b",\"unlimited\":true");
        }
        out.put_u8(b'}');
    }
}

/// The members of `fields`, in declaration order, without braces.
fn write_fields<B: BufMut>(out: &mut B, fields: &DecisionFields) {
    out.put_slice(if fields.allowed {
        b"\"allowed\":true"
    } else {
        b"\"allowed\":false"
    });
    push_optional_u64(out, b",\"limit\":", fields.limit);
    push_optional_u64(out, b",\"remaining\":", fields.remaining);
    push_u64(out, b",\"retry_after_ms\":", fields.retry_after_ms);
    push_u64(out, b",\"reset_after_ms\":", fields.reset_after_ms);
    push_u64(out, b",\"delay_ms\":", fields.delay_ms);
    if let Some(lease) = fields.lease {
        push_u64(out, b",\"lease\":", lease);
    }
    if fields.degraded {
        out.put_slice(b",\"degraded\":true");
    }
    if let Some(sync) = fields.sync {
        out.put_slice(b",\"sync\":\"");
        out.put_slice(sync.as_bytes());
        out.put_u8(b'"');
    }
}

fn push_u64<B: BufMut>(out: &mut B, key: &[u8], value: u64) {
    out.put_slice(key);
    out.put_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn push_optional_u64<B: BufMut>(out: &mut B, key: &[u8], value: Option<u64>) {
    match value {
        Some(value) => push_u64(out, key, value),
        None => {
            out.put_slice(key);
            out.put_slice(b"null");
        }
    }
}

/// The body of `/v1/settle`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    /// The ticket of the check to settle (32 hex digits).
    pub ticket: String,
    /// The request's actual cost.
    #[serde(deserialize_with = "crate::numbers::u64")]
    pub cost: u64,
    /// Settle time in ms since the epoch (only with `--trust-client-time`).
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub at_ms: Option<u64>,
}

/// How one limit was settled.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SettledLimit {
    /// The limit's name, as in the check's headers.
    pub name: String,
    /// `exact` (nothing to change), `charged` (the difference counted,
    /// possibly into debt), `refunded` (the difference given back) or
    /// `refund_dropped` (what the request was counted in no longer counts:
    /// the estimate stood).
    pub outcome: &'static str,
}

/// The answer of `/v1/settle`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SettleBody {
    /// The cost the check counted.
    pub estimate: u64,
    /// The actual cost it was settled with.
    pub cost: u64,
    /// Each limit the check counted in, in the check's order.
    pub settled: Vec<SettledLimit>,
}

/// The answer of `/v1/release` and `DELETE /v1/keys/{key}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReleasedBody {
    /// Whether anything was released or reset.
    pub released: bool,
}

/// The body of the Databox `POST /increment`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IncrementRequest {
    /// The quota's id (the key).
    pub id: String,
    /// The window, in seconds.
    #[serde(deserialize_with = "crate::numbers::u64")]
    pub interval: u64,
    /// Requests allowed per window.
    #[serde(deserialize_with = "crate::numbers::u64")]
    pub requests: u64,
    /// When the call was made, in ms since the epoch; now when absent.
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub timestamp: Option<u64>,
    /// The window's step, e.g. `1s`; the default step table when absent.
    #[serde(default)]
    pub step: Option<String>,
}

/// The answer of `POST /increment`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IncrementBody {
    /// Requests now counted in the window.
    pub count: u64,
}

/// The query of the Databox `GET /delay`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelayQuery {
    /// The quota's id (the key).
    pub id: String,
    /// The window, in seconds.
    pub interval: u64,
    /// Requests allowed per window.
    pub requests: u64,
    /// The window's step.
    #[serde(default)]
    pub step: Option<String>,
    /// Decision time (only with `--trust-client-time`).
    #[serde(default)]
    pub at_ms: Option<u64>,
}

/// The answer of `GET /delay`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DelayBody {
    /// The earliest instant the next call may go out, ms since the epoch.
    pub next_at_ms: u64,
    /// How long from now; 0 means go now.
    pub delay_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_strings_borrow_from_the_body_unless_escaped() {
        let body = r#"{"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s",
                       "step": "1s", "lease_ttl": "2\u0073"}}"#;
        let request: DecisionRequest = serde_json::from_str(body).unwrap();
        assert!(matches!(request.key, Some(Cow::Borrowed("k"))));
        let limit = request.limit.unwrap();
        assert!(matches!(limit.algorithm, Some(Cow::Borrowed("gcra"))));
        assert!(matches!(limit.step, Some(Cow::Borrowed("1s"))));
        assert_eq!(limit.lease_ttl.as_deref(), Some("2s"));
        let wrong = serde_json::from_str::<DecisionRequest>(r#"{"key": 5}"#).unwrap_err();
        assert!(wrong.to_string().contains("expected a string"), "{wrong}");
    }

    #[test]
    fn integers_may_be_written_with_a_fraction_and_optional_fields_as_null() {
        let request: DecisionRequest = serde_json::from_str(
            r#"{"key": "k", "limit": {"rate": "1/s", "burst": 5.0, "algorithm": null, "step": null},
                "cost": 2.0, "at_ms": null, "max_wait_ms": 1e3, "lease": null, "domain": null}"#,
        )
        .unwrap();
        assert_eq!(request.limit.as_ref().and_then(|l| l.burst), Some(5));
        assert_eq!(
            request.limit.as_ref().and_then(|l| l.algorithm.clone()),
            None
        );
        let escaped: DecisionRequest =
            serde_json::from_str(r#"{"key": "a\"b", "domain": "d"}"#).unwrap();
        assert_eq!(escaped.key.as_deref(), Some("a\"b"));
        assert!(matches!(escaped.key, Some(Cow::Owned(_))));
        assert!(matches!(escaped.domain, Some(Cow::Borrowed("d"))));
        assert_eq!(
            (
                request.cost,
                request.at_ms,
                request.max_wait_ms,
                request.lease
            ),
            (Some(2), None, Some(1000), None)
        );
        assert_eq!(request.domain, None);
        let increment: IncrementRequest = serde_json::from_str(
            r#"{"id": "q", "interval": 60.0, "requests": 1e1, "timestamp": null, "step": null}"#,
        )
        .unwrap();
        assert_eq!(
            (increment.interval, increment.requests, increment.timestamp),
            (60, 10, None)
        );
    }

    fn fields(n: u64) -> DecisionFields {
        DecisionFields {
            allowed: n.is_multiple_of(2),
            limit: (!n.is_multiple_of(3)).then_some(n * 1000),
            remaining: (!n.is_multiple_of(5)).then_some(u64::MAX - n),
            retry_after_ms: n,
            reset_after_ms: n * 7,
            delay_ms: n % 4,
            lease: (n % 3 == 1).then_some(n << 40),
            degraded: n.is_multiple_of(7),
            sync: n.is_multiple_of(4).then_some("async"),
        }
    }

    #[test]
    fn hand_written_answers_are_what_serde_json_writes() {
        let names = [
            None,
            Some("per_user".to_owned()),
            Some("quote \" back \\ slash".to_owned()),
            Some("ctl \u{1}\n\t é ✓".to_owned()),
        ];
        for n in 0..64u64 {
            let statuses = (!n.is_multiple_of(3)).then(|| {
                (0..n % 4)
                    .map(|i| StatusBody {
                        name: names[((n + i) % 4) as usize].clone(),
                        fields: fields(n + i),
                        shadow: (n + i) % 2 == 1,
                        unlimited: (n + i) % 3 == 2,
                    })
                    .collect()
            });
            let body = DecisionBody {
                fields: fields(n),
                wait_ms: (n % 4 == 1).then_some(n * 3),
                statuses,
                shadow_rejected: n % 5 == 3,
                ticket: (n % 6 == 2).then(|| format!("{n:032x}")),
            };
            let mut written = Vec::new();
            body.write_json(&mut written);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&body).unwrap()
            );
        }
    }

    #[test]
    fn a_fraction_is_refused_naming_the_value() {
        let error = serde_json::from_str::<DecisionRequest>(r#"{"cost": 1.5}"#).unwrap_err();
        assert!(
            error.to_string().contains("1.5 is not an unsigned integer"),
            "{error}"
        );
        let error = serde_json::from_str::<IncrementRequest>(
            r#"{"id": "q", "interval": 0.5, "requests": 1}"#,
        )
        .unwrap_err();
        assert!(error.to_string().contains("0.5"), "{error}");
    }
}
