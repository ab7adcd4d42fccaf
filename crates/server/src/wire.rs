//! The JSON bodies of the HTTP API (SPEC §5): what requests may contain and
//! what answers look like. Decoding is strict (`deny_unknown_fields`), and
//! nothing here interprets a value beyond its JSON type; `decide` validates.

use serde::{Deserialize, Serialize};
use tollgate_core::time::nanos_to_ms_ceil;
use tollgate_core::Decision;

/// An inline limit: `{"algorithm": "token_bucket", "rate": "10/s", "burst": 20}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// One of the eight algorithm names; `token_bucket` when absent.
    #[serde(default)]
    pub algorithm: Option<String>,
    /// Limit notation, e.g. `10/s`, `5/15min`, `100 per minute`.
    pub rate: String,
    /// Bucket capacity (token bucket, GCRA, leaky bucket).
    #[serde(default, deserialize_with = "crate::numbers::optional_u64")]
    pub burst: Option<u64>,
    /// Step of a stepped window, e.g. `1s`.
    #[serde(default)]
    pub step: Option<String>,
    /// Lease lifetime of a concurrency limit, e.g. `30s`.
    #[serde(default)]
    pub lease_ttl: Option<String>,
}

/// One descriptor entry: `{"key": "user", "value": "42"}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// The descriptor key.
    pub key: String,
    /// The value; empty when absent.
    #[serde(default)]
    pub value: String,
}

/// One request descriptor: its entries, in order.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DescriptorSpec {
    /// The entries, outermost first.
    pub entries: Vec<EntrySpec>,
}

/// The body of `/v1/check`, `/v1/reserve` and `/v1/release`. Either `key`
/// and `limit` (inline) or `domain` and `descriptors` (rules-based); each
/// route refuses the fields that are not its own.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// Inline: the key to count under.
    #[serde(default)]
    pub key: Option<String>,
    /// Inline: the limit.
    #[serde(default)]
    pub limit: Option<LimitSpec>,
    /// Rules-based: the rules domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// Rules-based: the descriptors, each checked against the domain's rules.
    #[serde(default)]
    pub descriptors: Option<Vec<DescriptorSpec>>,
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
