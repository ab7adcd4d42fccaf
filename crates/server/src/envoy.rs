//! The envoyproxy/ratelimit decision (`ShouldRateLimit`), shared by the
//! `POST /json` endpoint and the gRPC service: the same request, the same
//! answers as that project for its rules files.
//!
//! Unlike `/v1/check`, descriptors are decided independently, as
//! envoyproxy/ratelimit does: each is counted by its own hits even when
//! another descriptor of the request is over its limit (a descriptor whose
//! rule has several `rate_limits` is all-or-nothing within itself). The
//! hits of a descriptor are its own `hits_addend` when set (0 checks without
//! counting), otherwise `max(1, request.hits_addend)`. A request-side
//! `limit` override replaces the configured limit with a fixed window of
//! that size, counted under the descriptor's entries. An unknown domain is
//! not an error here: every descriptor is `OK` without a limit.
//!
//! A descriptor of a quota rule (`quota_mode: true`, or every descriptor
//! under `--quota-mode`) keeps its own `OVER_LIMIT` code, but the overall
//! code is `OVER_LIMIT` only as `tollgate_rules::check::over_limit` says:
//! when an ordinary descriptor is over, or every quota descriptor is.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{AlgorithmName, Decision, Limit, LimitKey, Moment, Rate, Store};
use tollgate_rules::check::Verdicts;
use tollgate_rules::{Descriptor, Metadata, RateLimitUnit, Rule};

use crate::app::App;
use crate::decide::store;
use crate::error::ApiError;
use crate::headers::AppliedLimit;
use crate::metrics::Verdict;
use crate::target::RULES_KEY_PREFIX;

/// Store keys of request-side limit overrides start with this byte.
pub const OVERRIDE_KEY_PREFIX: u8 = b'o';

/// A `RateLimitRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnvoyRequest {
    /// The rules domain.
    pub domain: String,
    /// The descriptors, each decided on its own.
    pub descriptors: Vec<EnvoyDescriptor>,
    /// Hits for descriptors without their own (0 means 1).
    pub hits_addend: u32,
}

/// A `RateLimitDescriptor`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnvoyDescriptor {
    /// (key, value) entries.
    pub entries: Vec<(String, String)>,
    /// A request-side limit override: requests per unit.
    pub limit: Option<(u32, RateLimitUnit)>,
    /// This descriptor's hits; 0 checks without counting.
    pub hits_addend: Option<u64>,
}

/// Matched as its entries, so a request resolves without copying them.
impl Descriptor for EnvoyDescriptor {
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        self.entries.as_slice().entry(index)
    }
}

/// A response or descriptor code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or no limit applies).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// `RateLimitResponse.RateLimit`: the limit that applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's `name`, when it has one.
    pub name: Option<String>,
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: RateLimitUnit,
}

/// A `DescriptorStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// `Ok` or `OverLimit`.
    pub code: Code,
    /// The limit that applied; `None` when no rule matched or it is
    /// unlimited.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left (u32::MAX for `unlimited`).
    pub limit_remaining: u32,
    /// Until the limit resets; `None` when no limit applied.
    pub duration_until_reset: Option<Duration>,
}

/// A `RateLimitResponse`, with what the rate-limit headers need.
#[derive(Debug, Clone)]
pub struct EnvoyResponse {
    /// `OverLimit` when any enforced descriptor is over.
    pub overall_code: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Every limit that applied (for the SPEC §7 headers); left empty when
    /// the caller asked for no headers.
    pub applied: Vec<AppliedLimit<'static>>,
    /// The most constrained decision.
    pub top: Option<Decision>,
    /// The `metadata` of every descriptor that passed (code `OK`) under a
    /// rule that has some, in request order: what the gRPC answer's
    /// `dynamic_metadata` merges.
    pub passed_metadata: Vec<Arc<Metadata>>,
    /// Whether to fill `applied`.
    with_headers: bool,
    /// (over, quota) of every descriptor whose rejection is not shadowed.
    verdicts: Verdicts,
    /// The quota descriptors' decisions, folded into `top` at the end.
    quota_decisions: Vec<Decision>,
}

impl EnvoyResponse {
    /// A limited descriptor's status: an enforced rejection makes the whole
    /// answer over the limit, and a decision of a rule not in shadow mode
    /// takes part in the most constrained one.
    ///
    /// As in envoyproxy/ratelimit, a rule in shadow mode answers `OK` for
    /// its descriptor, while the global `--shadow` (its `SHADOW_MODE`) keeps
    /// the descriptor's `OVER_LIMIT` and only turns the overall code to `OK`.
    fn status(
        &mut self,
        decision: Decision,
        verdict: Verdict,
        rule_enforced: bool,
        quota: bool,
        current_limit: Option<CurrentLimit>,
    ) -> DescriptorStatus {
        if rule_enforced {
            self.verdicts.add(verdict == Verdict::Rejected, quota);
            if quota {
                self.quota_decisions.push(decision);
            } else {
                self.top = Some(self.top.map_or(decision, |t| t.most_constrained(decision)));
            }
        }
        let over = rule_enforced && !decision.allowed;
        DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok },
            current_limit,
            limit_remaining: remaining_u32(decision.remaining),
            duration_until_reset: Some(decision.reset_after),
        }
    }
}

/// A matched descriptor: its rule, store key and detailed metric label.
type Matched<'r> = (&'r Rule, Vec<u8>, Option<String>);

/// Room for most store keys (a rule path and a few values) in one
/// allocation.
const COUNTER_KEY_CAPACITY: usize = 128;

/// Decides `request` as envoyproxy/ratelimit's `ShouldRateLimit` would;
/// with `with_headers`, also lists the limits that applied, for the rate
/// limit headers. Errors (nothing counted) on an empty domain, no
/// descriptors, a descriptor without entries or an entry with an empty key.
pub async fn should_rate_limit<S: Store>(
    app: &App<S>,
    request: &EnvoyRequest,
    at: Moment,
    with_headers: bool,
) -> Result<EnvoyResponse, ApiError> {
    validate(
        request,
        app.settings().max_descriptors,
        app.settings().max_key_bytes,
    )?;
    let rules = app.rules();
    let found = app.overrides().find(&request.domain, &request.descriptors);
    // An unknown domain matches nothing (envoyproxy/ratelimit answers OK).
    // Only rules and keys are kept: a `Resolved` borrows the request and is
    // not held across the store's `.await`.
    let (known_domain, matched): (bool, Vec<Option<Matched<'_>>>) =
        match rules.resolve_with(&request.domain, &request.descriptors, &found) {
            Ok(resolved) => (
                true,
                resolved
                    .iter()
                    .map(|r| {
                        r.as_ref().map(|r| {
                            let mut key = Vec::with_capacity(COUNTER_KEY_CAPACITY);
                            key.push(RULES_KEY_PREFIX);
                            r.write_counter_key(&mut key);
                            let detailed = r.rule().metric_has_values().then(|| r.metric_label());
                            (r.rule(), key, detailed)
                        })
                    })
                    .collect(),
            ),
            Err(_) => (false, vec![None; request.descriptors.len()]),
        };
    let global_shadow = app.settings().shadow;

    let mut response = EnvoyResponse {
        overall_code: Code::Ok,
        statuses: Vec::with_capacity(request.descriptors.len()),
        applied: Vec::new(),
        top: None,
        passed_metadata: Vec::new(),
        with_headers,
        verdicts: Verdicts::default(),
        quota_decisions: Vec::new(),
    };
    let global_quota = app.settings().quota_mode;
    for (descriptor, matched) in request.descriptors.iter().zip(&matched) {
        let hits = descriptor
            .hits_addend
            .unwrap_or_else(|| u64::from(request.hits_addend.max(1)));
        let status = match (descriptor.limit, matched) {
            (Some((requests_per_unit, unit)), _) if known_domain => {
                decide_override(
                    app,
                    &request.domain,
                    descriptor,
                    requests_per_unit,
                    unit,
                    hits,
                    at,
                    global_quota,
                    &mut response,
                )
                .await?
            }
            (_, Some((rule, key, detailed))) => {
                decide_rule(
                    app,
                    rule,
                    key,
                    detailed.as_deref(),
                    hits,
                    at,
                    global_shadow,
                    global_quota,
                    &mut response,
                )
                .await?
            }
            _ => DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: None,
            },
        };
        if let (Code::Ok, Some((rule, _, _))) = (status.code, matched) {
            if let Some(metadata) = rule.metadata() {
                response.passed_metadata.push(Arc::clone(metadata));
            }
        }
        response.statuses.push(status);
    }
    if response.verdicts.over_limit() {
        response.overall_code = Code::OverLimit;
    }
    // Quota decisions shape the top one with what they admitted, and with
    // their rejections only when those decide the answer.
    let quotas_decide = response.overall_code == Code::OverLimit;
    for decision in std::mem::take(&mut response.quota_decisions) {
        if decision.allowed || quotas_decide {
            response.top = Some(
                response
                    .top
                    .map_or(decision, |t| t.most_constrained(decision)),
            );
        }
    }
    Ok(response)
}

fn validate(
    request: &EnvoyRequest,
    max_descriptors: usize,
    max_key_bytes: usize,
) -> Result<(), ApiError> {
    let invalid = |m: String| Err(ApiError::bad_request("invalid_request", m));
    if request.domain.is_empty() {
        return invalid("rate limit domain must not be empty".into());
    }
    if request.descriptors.is_empty() {
        return invalid("rate limit descriptor list must not be empty".into());
    }
    if request.descriptors.len() > max_descriptors {
        return invalid(format!(
            "at most {max_descriptors} descriptors are accepted"
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return invalid(format!("descriptor {i} has no entries"));
        }
        if d.entries.len() > max_descriptors {
            return invalid(format!(
                "descriptor {i} has more than {max_descriptors} entries"
            ));
        }
        for (key, value) in &d.entries {
            if key.is_empty() {
                return invalid(format!("descriptor {i} has an entry with an empty key"));
            }
            if key.len() + value.len() > max_key_bytes {
                return Err(ApiError::bad_request(
                    "key_too_long",
                    format!("descriptor {i} entry {key:?} is over the {max_key_bytes}-byte limit"),
                ));
            }
        }
    }
    Ok(())
}

fn remaining_u32(remaining: u64) -> u32 {
    u32::try_from(remaining).unwrap_or(u32::MAX)
}

#[allow(clippy::too_many_arguments)]
async fn decide_rule<S: Store>(
    app: &App<S>,
    rule: &Rule,
    key: &[u8],
    detailed: Option<&str>,
    hits: u64,
    at: Moment,
    global_shadow: bool,
    global_quota: bool,
    response: &mut EnvoyResponse,
) -> Result<DescriptorStatus, ApiError> {
    let reported = rule.reported_limits().first().copied();
    let quota = rule.quota_mode() || global_quota;
    if rule.unlimited() {
        if !rule.shadow_mode() {
            response.verdicts.add(false, quota);
        }
        return Ok(DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: u32::MAX,
            duration_until_reset: None,
        });
    }
    let name = rule.name().map(str::to_owned);
    let decision = if rule.denies_all() {
        let unit = reported.map_or(1, |r| r.unit.seconds());
        Decision {
            allowed: false,
            retry_after: Duration::from_secs(unit),
            reset_after: Duration::from_secs(unit),
            ..Decision::default()
        }
    } else {
        let label = rule.name().unwrap_or(rule.id());
        match rule.limits() {
            // One limit, the usual rule: the store answers its decision
            // without a list around it.
            [limit] => {
                let decision = store(
                    app,
                    app.store()
                        .check_one(LimitKey { limit, key }, at, hits)
                        .await,
                )?;
                if response.with_headers {
                    response
                        .applied
                        .push(AppliedLimit::of(label.to_owned(), limit, decision));
                }
                decision
            }
            limits => {
                let requests: Vec<LimitKey<'_>> =
                    limits.iter().map(|limit| LimitKey { limit, key }).collect();
                let decisions = store(app, app.store().check(&requests, at, hits).await)?;
                if response.with_headers {
                    for (limit, d) in limits.iter().zip(&decisions) {
                        response.applied.push(AppliedLimit::of(
                            format!("{label}:{}", limit.rate),
                            limit,
                            *d,
                        ));
                    }
                }
                decisions
                    .into_iter()
                    .reduce(Decision::most_constrained)
                    .unwrap_or_default()
            }
        }
    };
    let verdict = Verdict::of(&decision, rule.shadow_mode() || global_shadow);
    app.metrics()
        .count(rule.domain(), rule.id(), detailed, &decision, verdict);
    let current_limit = reported.map(|r| CurrentLimit {
        name,
        requests_per_unit: r.requests_per_unit,
        unit: r.unit,
    });
    Ok(response.status(decision, verdict, !rule.shadow_mode(), quota, current_limit))
}

#[allow(clippy::too_many_arguments)]
async fn decide_override<S: Store>(
    app: &App<S>,
    domain: &str,
    descriptor: &EnvoyDescriptor,
    requests_per_unit: u32,
    unit: RateLimitUnit,
    hits: u64,
    at: Moment,
    global_quota: bool,
    response: &mut EnvoyResponse,
) -> Result<DescriptorStatus, ApiError> {
    let current_limit = Some(CurrentLimit {
        name: None,
        requests_per_unit,
        unit,
    });
    let decision = if requests_per_unit == 0 {
        Decision {
            allowed: false,
            reset_after: Duration::from_secs(unit.seconds()),
            retry_after: Duration::from_secs(unit.seconds()),
            ..Decision::default()
        }
    } else {
        let rate = Rate::new(
            u64::from(requests_per_unit),
            Duration::from_secs(unit.seconds()),
        )
        .map_err(|e| ApiError::bad_request("invalid_rate", format!("limit override: {e}")))?;
        let limit = Limit::new(AlgorithmName::FixedWindow, rate);
        let key = override_key(domain, &descriptor.entries);
        let decisions = store(
            app,
            app.store()
                .check(
                    &[LimitKey {
                        limit: &limit,
                        key: &key,
                    }],
                    at,
                    hits,
                )
                .await,
        )?;
        let decision = decisions.first().copied().unwrap_or_default();
        if response.with_headers {
            response
                .applied
                .push(AppliedLimit::of(limit.to_string(), &limit, decision));
        }
        decision
    };
    let verdict = Verdict::of(&decision, app.settings().shadow);
    app.metrics()
        .count(domain, "override", None, &decision, verdict);
    Ok(response.status(decision, verdict, true, global_quota, current_limit))
}

/// The store key of an override: the domain and every entry, each part
/// length-prefixed.
fn override_key(domain: &str, entries: &[(String, String)]) -> Vec<u8> {
    let mut key = vec![OVERRIDE_KEY_PREFIX];
    let mut push = |part: &str| {
        key.extend_from_slice(part.len().to_string().as_bytes());
        key.push(b':');
        key.extend_from_slice(part.as_bytes());
    };
    push(domain);
    for (k, v) in entries {
        push(k);
        push(v);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_keys_are_unambiguous() {
        let a = override_key("d", &[("a:b".into(), "c".into())]);
        let b = override_key("d", &[("a".into(), "b:c".into())]);
        assert_ne!(a, b);
    }
}
