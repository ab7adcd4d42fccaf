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

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{AlgorithmName, Decision, Limit, LimitKey, Moment, Rate, Store};
use tollgate_rules::check::{DescriptorRules, Verdicts};
use tollgate_rules::{Descriptor, Metadata, RateLimitUnit, Rule};

use crate::app::App;
use crate::decide::store;
use crate::error::ApiError;
use crate::headers::AppliedLimit;
use crate::metrics::Verdict;
use crate::target::RULES_KEY_PREFIX;

/// Store keys of request-side limit overrides start with this byte.
pub const OVERRIDE_KEY_PREFIX: u8 = b'o';

/// What the decision reads of a `RateLimitRequest`, however it was
/// decoded: [`EnvoyRequest`] (`POST /json`) and the gRPC service's protobuf
/// message implement it, so neither is copied into the other.
pub trait RequestView: Sync {
    /// Its descriptors.
    type Descriptor: DescriptorView;
    /// The rules domain.
    fn domain(&self) -> &str;
    /// The descriptors, each decided on its own.
    fn descriptors(&self) -> &[Self::Descriptor];
    /// Hits for descriptors without their own (0 means 1).
    fn hits_addend(&self) -> u32;
}

/// What the decision reads of a `RateLimitDescriptor`: its entries (as a
/// [`Descriptor`]), its request-side override and its own hits.
pub trait DescriptorView: Descriptor + Sync {
    /// A request-side limit override: requests per unit.
    fn limit(&self) -> Option<(u32, RateLimitUnit)>;
    /// This descriptor's hits; 0 checks without counting.
    fn hits_addend(&self) -> Option<u64>;
}

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

impl RequestView for EnvoyRequest {
    type Descriptor = EnvoyDescriptor;
    fn domain(&self) -> &str {
        &self.domain
    }
    fn descriptors(&self) -> &[EnvoyDescriptor] {
        &self.descriptors
    }
    fn hits_addend(&self) -> u32 {
        self.hits_addend
    }
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

impl DescriptorView for EnvoyDescriptor {
    fn limit(&self) -> Option<(u32, RateLimitUnit)> {
        self.limit
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
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

/// `RateLimitResponse.RateLimit`: the limit that applied, borrowing the
/// rule's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit<'r> {
    /// The rule's `name`, when it has one.
    pub name: Option<&'r str>,
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: RateLimitUnit,
}

/// A `DescriptorStatus`, as decided: each surface turns it into its own
/// wire form (the `S` of [`EnvoyResponse`]) as it comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus<'r> {
    /// `Ok` or `OverLimit`.
    pub code: Code,
    /// The limit that applied; `None` when no rule matched or it is
    /// unlimited.
    pub current_limit: Option<CurrentLimit<'r>>,
    /// Requests left (u32::MAX for `unlimited`).
    pub limit_remaining: u32,
    /// Until the limit resets; `None` when no limit applied.
    pub duration_until_reset: Option<Duration>,
}

/// A `RateLimitResponse`, with what the rate-limit headers need; `S` is
/// the caller's form of a descriptor status (a protobuf message, a JSON
/// object), made from each [`DescriptorStatus`] as it is decided.
#[derive(Debug, Clone)]
pub struct EnvoyResponse<S> {
    /// `OverLimit` when any enforced descriptor is over.
    pub overall_code: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<S>,
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

impl<S> EnvoyResponse<S> {
    /// A limited descriptor's status: an enforced rejection makes the whole
    /// answer over the limit, and a decision of a rule not in shadow mode
    /// takes part in the most constrained one.
    ///
    /// As in envoyproxy/ratelimit, a rule in shadow mode answers `OK` for
    /// its descriptor, while the global `--shadow` (its `SHADOW_MODE`) keeps
    /// the descriptor's `OVER_LIMIT` and only turns the overall code to `OK`.
    fn status<'r>(
        &mut self,
        decision: Decision,
        verdict: Verdict,
        rule_enforced: bool,
        quota: bool,
        current_limit: Option<CurrentLimit<'r>>,
    ) -> DescriptorStatus<'r> {
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

/// Room for most store keys (a rule path and a few values) in one
/// allocation.
const COUNTER_KEY_CAPACITY: usize = 128;

/// A key buffer larger than this (a request with long values) is not kept
/// for the next call.
const KEPT_KEY_CAPACITY: usize = 4096;

thread_local! {
    /// This thread's store key buffer, lent to one call at a time
    /// ([`KeyBuffer`]), so that a call builds its keys without allocating.
    static KEY_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A store key buffer lent by a thread: taken when a call starts, given
/// back when it ends, to whichever thread it ends on. A call on a thread
/// whose buffer is out (another call is waiting on the store) gets a new
/// one.
struct KeyBuffer(Vec<u8>);

impl KeyBuffer {
    fn take() -> KeyBuffer {
        let mut key = KEY_BUFFER.take();
        key.reserve(COUNTER_KEY_CAPACITY);
        KeyBuffer(key)
    }

    /// The store key of `rule` for `descriptor`: [`RULES_KEY_PREFIX`], then
    /// the rule's counter key.
    fn rule_key<D: Descriptor + ?Sized>(&mut self, rule: &Rule, descriptor: &D) -> &[u8] {
        self.0.clear();
        self.0.push(RULES_KEY_PREFIX);
        rule.write_counter_key(descriptor, &mut self.0);
        &self.0
    }
}

impl Drop for KeyBuffer {
    fn drop(&mut self) {
        if self.0.capacity() <= KEPT_KEY_CAPACITY {
            let key = std::mem::take(&mut self.0);
            // The thread may be exiting, its buffer already gone.
            let _ = KEY_BUFFER.try_with(|buffer| buffer.set(key));
        }
    }
}

/// Decides `request` as envoyproxy/ratelimit's `ShouldRateLimit` would;
/// with `with_headers`, also lists the limits that applied, for the rate
/// limit headers. Each descriptor's status is made into an `S` as it is
/// decided. Errors (nothing counted) on an empty domain, no descriptors, a
/// descriptor without entries or an entry with an empty key.
pub async fn should_rate_limit<S, R, T>(
    app: &App<S>,
    request: &R,
    at: Moment,
    with_headers: bool,
) -> Result<EnvoyResponse<T>, ApiError>
where
    S: Store,
    R: RequestView,
    T: for<'r> From<DescriptorStatus<'r>> + Send,
{
    let domain = request.domain();
    let descriptors = request.descriptors();
    validate(
        request,
        app.settings().max_descriptors,
        app.settings().max_key_bytes,
    )?;
    let rules = app.rules();
    let found = app.overrides().find(domain, descriptors);
    // An unknown domain matches nothing (envoyproxy/ratelimit answers OK).
    let each = rules
        .domain(domain)
        .map(|d| DescriptorRules::new(d, descriptors, &found));
    let global_shadow = app.settings().shadow;
    let global_quota = app.settings().quota_mode;

    let mut response = EnvoyResponse {
        overall_code: Code::Ok,
        statuses: Vec::with_capacity(descriptors.len()),
        applied: Vec::new(),
        top: None,
        passed_metadata: Vec::new(),
        with_headers,
        verdicts: Verdicts::default(),
        quota_decisions: Vec::new(),
    };
    let mut key = KeyBuffer::take();
    for (i, descriptor) in descriptors.iter().enumerate() {
        let rule = each.as_ref().and_then(|each| each.rule(i, descriptor));
        let hits = descriptor
            .hits_addend()
            .unwrap_or_else(|| u64::from(request.hits_addend().max(1)));
        let status = match (descriptor.limit(), rule) {
            // Boxed: a request-side override is rare, and its future (a
            // list of decisions, a limit and a key of its own) would
            // otherwise make every call's larger.
            (Some((requests_per_unit, unit)), _) if each.is_some() => {
                Box::pin(decide_override(
                    app,
                    domain,
                    descriptor,
                    requests_per_unit,
                    unit,
                    hits,
                    at,
                    global_quota,
                    &mut response,
                ))
                .await?
            }
            (_, Some(rule)) => {
                let detailed = rule
                    .metric_has_values()
                    .then(|| rule.metric_label(descriptor));
                decide_rule(
                    app,
                    rule,
                    key.rule_key(rule, descriptor),
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
        if let (Code::Ok, Some(rule)) = (status.code, rule) {
            if let Some(metadata) = rule.metadata() {
                response.passed_metadata.push(Arc::clone(metadata));
            }
        }
        response.statuses.push(T::from(status));
    }
    drop(key);
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

fn validate<R: RequestView>(
    request: &R,
    max_descriptors: usize,
    max_key_bytes: usize,
) -> Result<(), ApiError> {
    let invalid = |m: String| Err(ApiError::bad_request("invalid_request", m));
    let descriptors = request.descriptors();
    if request.domain().is_empty() {
        return invalid("rate limit domain must not be empty".into());
    }
    if descriptors.is_empty() {
        return invalid("rate limit descriptor list must not be empty".into());
    }
    if descriptors.len() > max_descriptors {
        return invalid(format!(
            "at most {max_descriptors} descriptors are accepted"
        ));
    }
    for (i, d) in descriptors.iter().enumerate() {
        if d.is_empty() {
            return invalid(format!("descriptor {i} has no entries"));
        }
        if d.len() > max_descriptors {
            return invalid(format!(
                "descriptor {i} has more than {max_descriptors} entries"
            ));
        }
        for (key, value) in (0..d.len()).map(|e| d.entry(e)) {
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
async fn decide_rule<'r, S: Store, T>(
    app: &App<S>,
    rule: &'r Rule,
    key: &[u8],
    detailed: Option<&str>,
    hits: u64,
    at: Moment,
    global_shadow: bool,
    global_quota: bool,
    response: &mut EnvoyResponse<T>,
) -> Result<DescriptorStatus<'r>, ApiError> {
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
        name: rule.name(),
        requests_per_unit: r.requests_per_unit,
        unit: r.unit,
    });
    Ok(response.status(decision, verdict, !rule.shadow_mode(), quota, current_limit))
}

#[allow(clippy::too_many_arguments)]
async fn decide_override<S: Store, D: Descriptor + ?Sized, T>(
    app: &App<S>,
    domain: &str,
    descriptor: &D,
    requests_per_unit: u32,
    unit: RateLimitUnit,
    hits: u64,
    at: Moment,
    global_quota: bool,
    response: &mut EnvoyResponse<T>,
) -> Result<DescriptorStatus<'static>, ApiError> {
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
        let key = override_key(domain, descriptor);
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
fn override_key<D: Descriptor + ?Sized>(domain: &str, descriptor: &D) -> Vec<u8> {
    let mut key = vec![OVERRIDE_KEY_PREFIX];
    let mut push = |part: &str| {
        key.extend_from_slice(part.len().to_string().as_bytes());
        key.push(b':');
        key.extend_from_slice(part.as_bytes());
    };
    push(domain);
    for (k, v) in (0..descriptor.len()).map(|i| descriptor.entry(i)) {
        push(k);
        push(v);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use tollgate_core::time::{Clock, ManualClock};
    use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
    use tollgate_rules::RuleSet;
    use tollgate_testkit::ready;

    const RULES: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: second, requests_per_unit: 1}
";

    fn app() -> App<LocalStore> {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_000_000_000_000));
        let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
        let rules = RuleSet::from_yaml(RULES, "rules.yaml").unwrap();
        // Room for a key longer than a kept buffer.
        let settings = Settings {
            max_key_bytes: 4 * KEPT_KEY_CAPACITY,
            ..Settings::default()
        };
        App::new(store, rules, None, settings)
    }

    fn request(users: &[&str]) -> EnvoyRequest {
        EnvoyRequest {
            domain: "api".into(),
            descriptors: users
                .iter()
                .map(|u| EnvoyDescriptor {
                    entries: vec![("user".into(), (*u).into())],
                    ..EnvoyDescriptor::default()
                })
                .collect(),
            hits_addend: 0,
        }
    }

    /// Each descriptor's code and the limit's name, as decided.
    fn decide(app: &App<LocalStore>, users: &[&str]) -> Vec<(Code, Option<String>)> {
        let response: EnvoyResponse<(Code, Option<String>)> =
            ready(should_rate_limit(app, &request(users), Moment::Now, false)).unwrap();
        response.statuses
    }

    impl From<DescriptorStatus<'_>> for (Code, Option<String>) {
        fn from(s: DescriptorStatus<'_>) -> (Code, Option<String>) {
            let name = s.current_limit.and_then(|l| l.name).map(str::to_owned);
            (s.code, name)
        }
    }

    #[test]
    fn each_descriptor_counts_under_its_own_key_call_after_call() {
        let app = app();
        let long = "x".repeat(2 * KEPT_KEY_CAPACITY);
        let ok = (Code::Ok, Some("per_user".to_owned()));
        let over = (Code::OverLimit, Some("per_user".to_owned()));
        // A long key first: the next keys are built afresh, not over it.
        assert_eq!(decide(&app, &[&long]), vec![ok.clone()]);
        assert_eq!(decide(&app, &["a", "bb"]), vec![ok.clone(), ok.clone()]);
        assert_eq!(
            decide(&app, &["b", "a", "bb", &long]),
            vec![ok.clone(), over.clone(), over.clone(), over]
        );
        assert_eq!(decide(&app, &["c"]), vec![ok]);
    }

    #[test]
    fn override_keys_are_unambiguous() {
        let a = override_key("d", &[("a:b", "c")]);
        let b = override_key("d", &[("a", "b:c")]);
        assert_ne!(a, b);
    }
}
