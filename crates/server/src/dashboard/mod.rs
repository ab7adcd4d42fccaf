//! The live dashboard (`GET /dashboard`) and the JSON it polls
//! (`GET /v1/dashboard`, `POST /v1/dashboard/peek`), for the decision
//! service's port and the gateway's admin port alike.
//!
//! This module owns what the page shows and how it is put together from
//! the state a server already keeps: the rules in force, the per-rule
//! counters of [`Metrics`] and their ten-minute [`History`](crate::history),
//! the last reload, the store's status and the decision latency. It counts
//! nothing and adds nothing to a decision's path. The routes themselves
//! (`routes::dashboard` and `admin`) only hand it a [`Source`].
//!
//! - `page`: the HTML page and the login form (assets in `assets/`,
//!   embedded in the binary).
//! - `peek`: the "why was this refused?" box, a check that counts nothing.

pub(crate) mod page;
pub(crate) mod peek;

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use tollgate_core::calendar::CalendarUnit;
use tollgate_core::{AlgorithmName, Limit, Rate, Store, StoreStatus};
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::{Rule, RuleSet, OVERRIDE_LABEL};

use crate::history::{Counts, Rates, SAMPLE_MS};
use crate::latency::Percentiles;
use crate::metrics::{Metrics, ReloadRecord, RuleTrend};
use crate::settings::Settings;

/// What the dashboard reads, borrowed from a server's state.
pub(crate) struct Source<'a, S> {
    pub(crate) store: &'a S,
    pub(crate) metrics: &'a Metrics,
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) rules_path: Option<&'a Path>,
    pub(crate) settings: &'a Settings,
    /// The runtime overrides, where the server takes them.
    pub(crate) overrides: Option<&'a OverrideTable>,
}

/// The answer of `GET /v1/dashboard`.
#[derive(Debug, Serialize)]
pub(crate) struct DashboardBody {
    /// When the answer was made, in milliseconds since the epoch.
    now_ms: u64,
    /// How far apart the points of each rule's series are.
    sample_seconds: u64,
    store: StoreView,
    rules_file: RulesFileView,
    /// Every rule of the rules in force, by domain then file order, then
    /// counters without a rule (inline limits).
    rules: Vec<RuleView>,
    /// Per decision route that decided anything.
    latency: Vec<LatencyView>,
    /// The runtime overrides (`/v1/overrides/{domain}`); null where the
    /// server takes none (an admin port given no table).
    overrides: Option<OverridesView>,
}

/// How many runtime overrides there are, and the first few of each
/// domain.
#[derive(Debug, Serialize)]
struct OverridesView {
    /// Every domain's together.
    count: usize,
    /// Each domain that has overrides, sorted by name.
    domains: Vec<DomainOverridesView>,
}

#[derive(Debug, Serialize)]
struct DomainOverridesView {
    domain: String,
    count: usize,
    /// The first [`OVERRIDES_SHOWN`] in key order, as
    /// `GET /v1/overrides/{domain}` lists them.
    first: Vec<serde_json::Value>,
}

/// Overrides shown per domain.
const OVERRIDES_SHOWN: usize = 10;
/// Domains whose overrides are shown.
const OVERRIDE_DOMAINS_SHOWN: usize = 20;

#[derive(Debug, Serialize)]
struct StoreView {
    /// `memory` or `redis`.
    kind: &'static str,
    /// The engine deciding in Redis (`module` or `lua`); null for memory.
    engine: Option<&'static str>,
    /// `ready`, `degraded` or `unavailable`.
    status: &'static str,
    /// Why, when not ready.
    error: Option<String>,
    /// Store operations that failed since the start.
    store_errors: u64,
    /// Bytes the memory store holds (the memory store, or the local
    /// fallback of a shared store), as last reported.
    memory_used_bytes: u64,
}

#[derive(Debug, Serialize)]
struct RulesFileView {
    /// Where the rules are loaded from; null without `--rules`.
    path: Option<String>,
    /// The last reload since the start; null when there was none.
    last_reload: Option<ReloadRecord>,
}

#[derive(Debug, Serialize)]
struct RuleView {
    domain: String,
    /// The rule's path (its metrics label), `inline` for inline limits.
    rule: String,
    /// The rule's `name`, when it has one.
    name: Option<String>,
    /// Where the rule is defined (`file:line`); null for inline limits.
    source: Option<String>,
    /// Each limit in plain words.
    limits: Vec<String>,
    shadow: bool,
    /// Counted per request value (`detailed_metric`, `value_to_metric`):
    /// its counts here add up its values' (one label per value in
    /// `/metrics`).
    per_value: bool,
    counts: Counts,
    rates: Rates,
    /// `near_limit / allowed`; null before anything was admitted.
    near_limit_share: Option<f64>,
    /// Admitted per [`SAMPLE_MS`], oldest first, the last up to now.
    allowed_series: Vec<u64>,
    /// Refused (enforced and in shadow mode), likewise.
    rejected_series: Vec<u64>,
}

#[derive(Debug, Serialize)]
struct LatencyView {
    route: &'static str,
    #[serde(flatten)]
    percentiles: Percentiles,
}

/// The dashboard's data now.
pub(crate) async fn data<S: Store>(source: &Source<'_, S>) -> DashboardBody {
    let now_ms = crate::reload::now_ms();
    let status = source.store.status().await;
    let (status, error) = match status {
        StoreStatus::Ready => ("ready", None),
        StoreStatus::Degraded(e) => ("degraded", Some(e)),
        StoreStatus::Unavailable(e) => ("unavailable", Some(e)),
    };
    let engine = source.store.engine();
    let store = StoreView {
        kind: source.metrics.store_kind(),
        engine,
        status,
        error,
        store_errors: source.metrics.store_errors(),
        memory_used_bytes: u64::try_from(source.metrics.memory_used()).unwrap_or(0),
    };
    let rules_file = RulesFileView {
        path: source.rules_path.map(|p| p.display().to_string()),
        last_reload: source.metrics.last_reload(),
    };
    DashboardBody {
        now_ms,
        sample_seconds: SAMPLE_MS / 1000,
        store,
        rules_file,
        rules: rule_views(&source.rules, source.metrics.rule_trends(now_ms)),
        latency: source
            .metrics
            .latency_percentiles()
            .into_iter()
            .map(|(route, percentiles)| LatencyView { route, percentiles })
            .collect(),
        overrides: source.overrides.map(overrides_view),
    }
}

fn overrides_view(table: &OverrideTable) -> OverridesView {
    let domains = table
        .domains()
        .into_iter()
        .take(OVERRIDE_DOMAINS_SHOWN)
        .map(|(domain, count)| {
            let page = crate::routes::overrides::page_of(table, &domain, None, OVERRIDES_SHOWN);
            DomainOverridesView {
                domain,
                count,
                first: page.overrides,
            }
        })
        .collect();
    OverridesView {
        count: table.len(),
        domains,
    }
}

/// Every rule of `rules` with its trend (zero when it never decided), then
/// the trends no rule claims (inline limits).
fn rule_views(rules: &RuleSet, mut trends: Vec<RuleTrend>) -> Vec<RuleView> {
    let mut views = Vec::new();
    for domain in rules.domains() {
        for rule in domain.rules() {
            let found = trends
                .iter()
                .position(|t| t.domain == domain.name() && t.rule == rule.id());
            let trend = found.map(|i| trends.swap_remove(i));
            views.push(view_of(domain.name(), domain.file(), rule, trend));
        }
    }
    trends.sort_by(|a, b| (&a.domain, &a.rule).cmp(&(&b.domain, &b.rule)));
    let override_label = format!(".{OVERRIDE_LABEL}");
    let (overrides, trends): (Vec<_>, Vec<_>) = trends
        .into_iter()
        .partition(|t| t.rule.ends_with(&override_label));
    // Every override of a domain counts under one label.
    for t in overrides {
        views.push(RuleView {
            limits: vec!["runtime overrides, each its own limit".to_owned()],
            per_value: true,
            ..counted(t)
        });
    }
    for t in trends.into_iter().filter(|t| t.rule == "inline") {
        views.push(RuleView {
            domain: t.domain.clone(),
            rule: t.rule.clone(),
            name: None,
            source: None,
            limits: vec!["the limit each request carries".to_owned()],
            shadow: false,
            per_value: false,
            ..counted(t)
        });
    }
    views
}

fn view_of(domain: &str, file: &str, rule: &Rule, trend: Option<RuleTrend>) -> RuleView {
    let limits = if rule.unlimited() {
        vec!["unlimited".to_owned()]
    } else if rule.denies_all() {
        vec!["refuses every request".to_owned()]
    } else {
        rule.limits().iter().map(describe).collect()
    };
    let base = trend.map_or_else(
        || RuleView {
            domain: String::new(),
            rule: String::new(),
            name: None,
            source: None,
            limits: Vec::new(),
            shadow: false,
            per_value: false,
            counts: Counts::default(),
            rates: Rates::default(),
            near_limit_share: None,
            allowed_series: Vec::new(),
            rejected_series: Vec::new(),
        },
        counted,
    );
    RuleView {
        domain: domain.to_owned(),
        rule: rule.id().to_owned(),
        name: rule.name().map(ToOwned::to_owned),
        source: Some(format!("{file}:{}", rule.line())),
        limits,
        shadow: rule.shadow_mode(),
        per_value: rule.metric_has_values(),
        ..base
    }
}

/// The counted part of a rule's view.
fn counted(t: RuleTrend) -> RuleView {
    #[allow(clippy::cast_precision_loss)]
    let near_limit_share =
        (t.counts.allowed > 0).then(|| t.counts.near_limit as f64 / t.counts.allowed as f64);
    RuleView {
        domain: t.domain,
        rule: t.rule,
        name: None,
        source: None,
        limits: Vec::new(),
        shadow: false,
        per_value: false,
        counts: t.counts,
        rates: t.trend.rates,
        near_limit_share,
        allowed_series: t.trend.allowed_series,
        rejected_series: t.trend.rejected_series,
    }
}

/// A limit in plain words: "20 burst, 10/s, token bucket".
pub(crate) fn describe(limit: &Limit) -> String {
    let algorithm = limit.algorithm.as_str().replace('_', " ");
    let rate = match limit.calendar {
        // "10000 per calendar month from the 15th, Europe/London"
        Some(calendar) => {
            let unit = calendar.unit().as_str().replace('_', " ");
            let anchor = calendar.anchor();
            let from = match calendar.unit() {
                CalendarUnit::Day if anchor > 0 => format!(" from {anchor}:00"),
                CalendarUnit::Week if anchor > 1 => format!(" from weekday {anchor}"),
                CalendarUnit::Month if anchor > 1 => format!(" from day {anchor}"),
                CalendarUnit::Year if anchor > 1 => format!(" from month {anchor}"),
                _ => String::new(),
            };
            format!(
                "{} per {unit}{from}, {}",
                limit.rate.limit(),
                calendar.zone_name()
            )
        }
        None => per_period(limit.rate),
    };
    let mut out = match limit.algorithm {
        AlgorithmName::Concurrency => format!("{} at once, concurrency", limit.rate.limit()),
        name if name.has_burst() => format!(
            "{} burst, {rate}, {algorithm}",
            limit.burst.unwrap_or(limit.rate.limit()),
        ),
        _ => format!("{rate}, {algorithm}"),
    };
    if let Some(step) = limit.step {
        out.push_str(&format!(", step {} ms", step.as_millis()));
    }
    if let Some(ban) = limit.ban {
        out.push_str(&format!(
            ", banned for {} s after {} refusals within {} s",
            ban.duration().as_secs(),
            ban.after(),
            ban.within().as_secs()
        ));
    }
    out
}

/// `10/s`, `5/min`, `100/5 min`: the largest unit that divides the period.
fn per_period(rate: Rate) -> String {
    const UNITS: [(u64, &str); 6] = [
        (7 * 86_400_000_000_000, "week"),
        (86_400_000_000_000, "day"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "min"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
    ];
    let period = rate.period_nanos();
    for (size, unit) in UNITS {
        if period.is_multiple_of(size) {
            return match period / size {
                1 => format!("{}/{unit}", rate.limit()),
                n => format!("{}/{n} {unit}", rate.limit()),
            };
        }
    }
    format!("{}/{period} ns", rate.limit())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn limits_read_as_plain_words() {
        let bucket =
            Limit::new(AlgorithmName::TokenBucket, Rate::per_second(10).unwrap()).with_burst(20);
        assert_eq!(describe(&bucket), "20 burst, 10/s, token bucket");
        let gcra = Limit::new(AlgorithmName::Gcra, Rate::per_minute(5).unwrap());
        assert_eq!(describe(&gcra), "5 burst, 5/min, gcra");
        let window = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(100).unwrap());
        assert_eq!(describe(&window), "100/min, fixed window");
        let cycles =
            tollgate_core::calendar::Calendar::new(CalendarUnit::Month, "Europe/London", Some(15))
                .unwrap();
        assert_eq!(
            describe(&window.with_calendar(cycles)),
            "100 per calendar month from day 15, Europe/London, fixed window"
        );
        let leases = Limit::new(AlgorithmName::Concurrency, Rate::per_second(3).unwrap());
        assert_eq!(describe(&leases), "3 at once, concurrency");
        let five = Rate::new(100, Duration::from_secs(300)).unwrap();
        assert_eq!(
            describe(&Limit::new(AlgorithmName::SlidingWindowLog, five)),
            "100/5 min, sliding window log"
        );
        let hourly = Limit::new(
            AlgorithmName::TokenBucket,
            Rate::new(10, Duration::from_secs(3600)).unwrap(),
        );
        assert_eq!(describe(&hourly), "10 burst, 10/h, token bucket");
    }
}
