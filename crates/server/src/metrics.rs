//! [`Metrics`]: every counter and histogram the service exports, in the
//! Prometheus text format (`GET /metrics`).
//!
//! Per-rule counters carry two labels, `domain` and `rule` (the rule's path,
//! e.g. `api.user`), so their number is bounded by the rules files. Inline
//! limits of `/v1/check` all count under `rule="inline"`, whatever limit the
//! client sent. Only a rule with `detailed_metric: true` or
//! `value_to_metric: true` adds the request's values to its `rule` label,
//! and even then at most [`values_per_rule`](Metrics::with_values_per_rule)
//! distinct labels (default [`DEFAULT_VALUES_PER_RULE`]) are created per
//! rule, and [`MAX_DETAILED_SERIES`] in all; later values count under
//! `<rule>._other_`, so a client sending random values cannot flood
//! Prometheus.
//!
//! Beside the Prometheus series, each rule that refuses requests keeps its
//! top offenders: the keys it refused most over the last five minutes, in a
//! summary of [`OFFENDERS_PER_SLOT`] counters per time slot (`top`), so the
//! memory they take is bounded per rule whatever the number of keys. They
//! are touched only when a request is refused.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::fast::RandomState;
use hashbrown::{Equivalent, HashMap};
use parking_lot::{Mutex, RwLock};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_core::{BanRefusal, Decision};

use crate::history::{Counts, History, Trend};
use crate::latency::{LatencyHistogram, Percentiles};
use crate::target::{INLINE_KEY_PREFIX, RULES_KEY_PREFIX};
use crate::top::{Estimate, TopKeys};

/// Counters per time slot of a rule's top offenders: a key refused more
/// than 1/64 of a slot's refusals is always among them.
pub const OFFENDERS_PER_SLOT: usize = 64;

/// The most distinct `rule` labels carrying request values, all rules
/// together.
pub const MAX_DETAILED_SERIES: usize = 10_000;

/// The default of the most distinct labels carrying request values that one
/// rule makes (`--metric-values-per-rule`).
pub const DEFAULT_VALUES_PER_RULE: usize = 1_000;

/// The labels made so far that carry request values.
#[derive(Debug, Default)]
struct ValueLabels {
    /// Rule path → its labels.
    by_rule: std::collections::HashMap<String, HashSet<String>>,
    /// How many labels in all.
    total: usize,
}

/// The labels of per-rule counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The rules domain; empty for inline limits.
    pub domain: String,
    /// The rule's path, `inline` for inline limits.
    pub rule: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The engine label of `tollgate_redis_engine`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: &'static str,
}

/// The listener label of the connection metrics: `http`, `grpc`,
/// `gateway` or `admin`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

/// One listener's connection metrics, as its
/// [`ConnectionObserver`](tollgate_listener::ConnectionObserver): the open
/// connections and those closed at the cap.
#[derive(Debug, Clone)]
pub struct ConnectionMetrics {
    open: Gauge,
    rejected: Counter,
}

impl tollgate_listener::ConnectionObserver for ConnectionMetrics {
    fn opened(&self) {
        self.open.inc();
    }

    fn closed(&self) {
        self.open.dec();
    }

    fn refused(&self) {
        self.rejected.inc();
    }
}

/// How one rule's decision counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted.
    Allowed,
    /// Rejected, and the rejection was enforced.
    Rejected,
    /// Rejected by a rule in shadow mode: reported, not enforced.
    ShadowRejected,
}

impl Verdict {
    /// How `decision` counts: admitted, or rejected — in shadow mode only
    /// reported.
    pub fn of(decision: &Decision, shadow: bool) -> Verdict {
        match (decision.allowed, shadow) {
            (true, _) => Verdict::Allowed,
            (false, true) => Verdict::ShadowRejected,
            (false, false) => Verdict::Rejected,
        }
    }
}

type HistogramFamily = Family<RouteLabels, LatencyHistogram, fn() -> LatencyHistogram>;

/// The service's metrics registry and handles.
pub struct Metrics {
    registry: Registry,
    total: Family<RuleLabels, Counter>,
    allowed: Family<RuleLabels, Counter>,
    rejected: Family<RuleLabels, Counter>,
    shadow_rejected: Family<RuleLabels, Counter>,
    near_limit: Family<RuleLabels, Counter>,
    bans: Family<RuleLabels, Counter>,
    ban_refusals: Family<RuleLabels, Counter>,
    latency: HistogramFamily,
    reloads: Family<ResultLabels, Counter>,
    snapshots: Family<ResultLabels, Counter>,
    snapshot_loads: Family<ResultLabels, Counter>,
    store_errors: Counter,
    response_costs: Family<ResultLabels, Counter>,
    memory_used: Gauge,
    memory_unstored: Counter,
    sync: SyncMetrics,
    redis_engine: Family<EngineLabels, Gauge>,
    connections_open: Family<ListenerLabels, Gauge>,
    connections_rejected: Family<ListenerLabels, Counter>,
    detailed: Mutex<ValueLabels>,
    values_per_rule: usize,
    /// Handles onto each (domain, rule)'s counters, so counting a decision
    /// neither allocates labels nor hashes them into five families; hashed
    /// with foldhash, seeded at random (see the root Cargo.toml), since a
    /// decision hashes its rule's labels here every time.
    by_rule: RwLock<HashMap<RuleKey, Arc<RuleCounters>, RandomState>>,
    /// This registry among the process's, for the threads' caches of
    /// [`RECENT_RULES`].
    id: u64,
    /// The counters of inline limits (`rule="inline"`), made on the first
    /// inline decision, so counting one is a few atomic increments.
    inline: OnceLock<RuleCounters>,
    /// Handles onto the latency histograms of the decision routes.
    routes: Vec<(&'static str, LatencyHistogram)>,
    /// Per (domain, rule): the keys it refused most lately, made on its
    /// first refusal.
    refused: RwLock<HashMap<RuleKey, Arc<Mutex<TopKeys>>, RandomState>>,
    /// Every rule's counters every ten seconds, for the dashboard; only
    /// the sampler and the dashboard touch it.
    history: Mutex<History>,
    /// The last rules reload, for the dashboard.
    last_reload: Mutex<Option<ReloadRecord>>,
    /// The kind of store decisions go to (`memory`, `redis`), for the
    /// dashboard.
    store_kind: &'static str,
}

/// A rules reload as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReloadRecord {
    /// When it happened, in milliseconds since the epoch.
    pub at_ms: u64,
    /// Whether the new rules are in force.
    pub ok: bool,
    /// Why it failed (`file:line:column: reason`); the previous rules were
    /// kept.
    pub error: Option<String>,
}

/// One rule's counters and trend (see [`Metrics::rule_trends`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleTrend {
    /// The rules domain; empty for inline limits.
    pub domain: String,
    /// The rule's metrics label (its path; `inline` for inline limits).
    pub rule: String,
    /// The counters since the start.
    pub counts: Counts,
    /// Rates and per-sample counts.
    pub trend: Trend,
}

/// The routes whose latency histogram handles are made up front.
const DECISION_ROUTES: [&str; 5] = ["check", "reserve", "json", "grpc", "gateway"];

/// The ids given to registries ([`Metrics::id`]).
static NEXT_METRICS_ID: AtomicU64 = AtomicU64::new(0);

/// How many rules' counters a thread keeps at hand.
const RECENT_RULES_KEPT: usize = 8;

thread_local! {
    /// The counters of the rules this thread counted last, so that counting
    /// a decision is a few comparisons and atomic increments rather than a
    /// lock and a hash of its labels (on every request of the gateway and
    /// the decision service). Counters are never removed from a registry,
    /// so a kept handle stays the registry's.
    static RECENT_RULES: std::cell::RefCell<RecentRules> =
        const { std::cell::RefCell::new(RecentRules { rules: Vec::new(), next: 0 }) };
}

/// A thread's [`RECENT_RULES`].
struct RecentRules {
    rules: Vec<RecentRule>,
    /// The entry to replace next, once full.
    next: usize,
}

/// One rule's counters in a registry, kept by a thread.
struct RecentRule {
    metrics: u64,
    domain: Box<str>,
    rule: Box<str>,
    counters: Arc<RuleCounters>,
}

impl RecentRules {
    fn find(&self, metrics: u64, domain: &str, rule: &str) -> Option<&RuleCounters> {
        self.rules
            .iter()
            .find(|r| r.metrics == metrics && *r.rule == *rule && *r.domain == *domain)
            .map(|r| &*r.counters)
    }

    fn keep(&mut self, rule: RecentRule) {
        if self.rules.len() < RECENT_RULES_KEPT {
            self.rules.push(rule);
        } else if let Some(slot) = self.rules.get_mut(self.next) {
            *slot = rule;
            self.next = (self.next + 1) % RECENT_RULES_KEPT;
        }
    }
}

/// One rule's counters.
struct RuleCounters {
    total: Counter,
    allowed: Counter,
    rejected: Counter,
    shadow_rejected: Counter,
    near_limit: Counter,
    bans: Counter,
    ban_refusals: Counter,
    /// For counts under a label carrying request values, the rule's own
    /// label: the dashboard shows them added up under it (one rule can make
    /// a thousand such labels).
    rule_of_value: Option<String>,
}

impl RuleCounters {
    fn counts(&self) -> Counts {
        Counts {
            allowed: self.allowed.get(),
            rejected: self.rejected.get(),
            shadow_rejected: self.shadow_rejected.get(),
            near_limit: self.near_limit.get(),
        }
    }

    fn count(&self, decision: &Decision, verdict: Verdict) {
        self.total.inc();
        match decision.ban {
            Some(BanRefusal::Started) => {
                self.bans.inc();
            }
            Some(BanRefusal::InForce) if !decision.allowed => {
                self.ban_refusals.inc();
            }
            _ => {}
        }
        match verdict {
            Verdict::Allowed => {
                self.allowed.inc();
                if near_limit(decision) {
                    self.near_limit.inc();
                }
            }
            Verdict::Rejected => {
                self.rejected.inc();
            }
            Verdict::ShadowRejected => {
                self.shadow_rejected.inc();
            }
        }
    }
}

/// A store key as an operator names it: without the byte that tells
/// inline keys from rules counters apart.
fn shown_key(key: &[u8]) -> &[u8] {
    match key.split_first() {
        Some((&first, rest)) if first == INLINE_KEY_PREFIX || first == RULES_KEY_PREFIX => rest,
        _ => key,
    }
}

/// The key of [`Metrics::by_rule`].
#[derive(Debug, PartialEq, Eq)]
struct RuleKey {
    domain: String,
    rule: String,
}

/// A [`RuleKey`] made of borrowed parts, for lookups without allocating.
struct RuleKeyRef<'a> {
    domain: &'a str,
    rule: &'a str,
}

impl Hash for RuleKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        RuleKeyRef {
            domain: &self.domain,
            rule: &self.rule,
        }
        .hash(state);
    }
}

impl Hash for RuleKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.domain.hash(state);
        self.rule.hash(state);
    }
}

impl Equivalent<RuleKey> for RuleKeyRef<'_> {
    fn equivalent(&self, key: &RuleKey) -> bool {
        self.domain == key.domain && self.rule == key.rule
    }
}

fn latency_histogram() -> LatencyHistogram {
    // 5 µs to about 40 ms.
    LatencyHistogram::new()
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric registered at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tollgate");
        let metrics = Metrics {
            registry: Registry::default(),
            total: Family::default(),
            allowed: Family::default(),
            rejected: Family::default(),
            shadow_rejected: Family::default(),
            near_limit: Family::default(),
            bans: Family::default(),
            ban_refusals: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> LatencyHistogram),
            reloads: Family::default(),
            snapshots: Family::default(),
            snapshot_loads: Family::default(),
            store_errors: Counter::default(),
            response_costs: Family::default(),
            memory_used: Gauge::default(),
            memory_unstored: Counter::default(),
            sync: SyncMetrics::default(),
            redis_engine: Family::default(),
            connections_open: Family::default(),
            connections_rejected: Family::default(),
            detailed: Mutex::new(ValueLabels::default()),
            values_per_rule: DEFAULT_VALUES_PER_RULE,
            by_rule: RwLock::new(HashMap::with_hasher(RandomState::default())),
            id: NEXT_METRICS_ID.fetch_add(1, Ordering::Relaxed),
            inline: OnceLock::new(),
            routes: Vec::new(),
            refused: RwLock::new(HashMap::with_hasher(RandomState::default())),
            history: Mutex::new(History::new()),
            last_reload: Mutex::new(None),
            store_kind: "memory",
        };
        registry.register(
            "requests",
            "Decisions taken, per rule",
            metrics.total.clone(),
        );
        registry.register(
            "allowed",
            "Decisions that admitted the request, per rule",
            metrics.allowed.clone(),
        );
        registry.register(
            "rejected",
            "Decisions that rejected the request, per rule",
            metrics.rejected.clone(),
        );
        registry.register(
            "shadow_rejected",
            "Rejections by rules in shadow mode (reported, not enforced), per rule",
            metrics.shadow_rejected.clone(),
        );
        registry.register(
            "near_limit",
            "Admissions that used more than 80% of the limit, per rule",
            metrics.near_limit.clone(),
        );
        registry.register(
            "bans",
            "Bans started: keys a rule's ban refuses outright from now on, per rule",
            metrics.bans.clone(),
        );
        registry.register(
            "ban_refusals",
            "Requests refused by a ban in force, per rule",
            metrics.ban_refusals.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time to decide a request, per route",
            metrics.latency.clone(),
        );
        registry.register(
            "rules_reloads",
            "Rules reloads, by result",
            metrics.reloads.clone(),
        );
        registry.register(
            "snapshots",
            "Snapshot saves, by result",
            metrics.snapshots.clone(),
        );
        registry.register(
            "snapshot_loads",
            "Snapshot loads at start, by result (ok, missing, failed)",
            metrics.snapshot_loads.clone(),
        );
        registry.register(
            "store_errors",
            "Store operations that failed",
            metrics.store_errors.clone(),
        );
        registry.register(
            "response_costs",
            "Costs read from responses (a gateway route's cost or count_if), by result: settled, uncounted (refunded by count_if), missing, invalid, aborted, unsupported (the store does not settle), failed; all but settled and uncounted leave the estimate standing",
            metrics.response_costs.clone(),
        );
        registry.register(
            "redis_engine",
            "The engine deciding on Redis: 1 for the one running (module or lua)",
            metrics.redis_engine.clone(),
        );
        registry.register(
            "memory_store_used_bytes",
            "Bytes held by the memory store (its cap bounds this)",
            metrics.memory_used.clone(),
        );
        registry.register(
            "memory_store_unstored",
            "New keys decided without being stored: the memory store was at its cap and every state it could have evicted was refusing requests",
            metrics.memory_unstored.clone(),
        );
        registry.register(
            "connections_open",
            "Connections open, per listener (http, grpc, gateway, admin)",
            metrics.connections_open.clone(),
        );
        registry.register(
            "connections_rejected",
            "Connections closed as they came because their listener was at its cap (--max-connections), per listener",
            metrics.connections_rejected.clone(),
        );
        let routes = DECISION_ROUTES
            .iter()
            .map(|&route| {
                (
                    route,
                    metrics
                        .latency
                        .get_or_create(&RouteLabels { route })
                        .clone(),
                )
            })
            .collect();
        Metrics {
            registry,
            routes,
            ..metrics
        }
    }

    /// The connection metrics of the listener `listener` (`http`, `grpc`,
    /// `gateway`, `admin`), created at zero.
    pub fn connections(&self, listener: &'static str) -> ConnectionMetrics {
        let labels = ListenerLabels { listener };
        ConnectionMetrics {
            open: self.connections_open.get_or_create(&labels).clone(),
            rejected: self.connections_rejected.get_or_create(&labels).clone(),
        }
    }

    /// Counts one rule's decision under the label `rule` (the rule's path),
    /// or, for a `detailed_metric` rule, under `detailed` (the path with the
    /// request's values) while fewer than [`MAX_DETAILED_SERIES`] exist.
    pub fn count(
        &self,
        domain: &str,
        rule: &str,
        detailed: Option<&str>,
        decision: &Decision,
        verdict: Verdict,
    ) {
        let label = match detailed {
            Some(label) => self.detailed_label(rule, label),
            None => Cow::Borrowed(rule),
        };
        // The usual case: a rule this thread counted lately, found without
        // the lock and the hash.
        if detailed.is_none() && self.count_recent(domain, rule, decision, verdict) {
            return;
        }
        let key = RuleKeyRef {
            domain,
            rule: &label,
        };
        // Else a read lock, allocating nothing.
        let found = self.by_rule.read().get(&key).cloned();
        let counters = match found {
            Some(counters) => counters,
            None => {
                let mut counters = self.rule_counters(domain, &label);
                counters.rule_of_value = detailed.map(|_| rule.to_owned());
                let counters = Arc::new(counters);
                let mut by_rule = self.by_rule.write();
                // Another thread may have made them meanwhile: theirs stay.
                Arc::clone(
                    by_rule
                        .entry(RuleKey {
                            domain: domain.to_owned(),
                            rule: label.into_owned(),
                        })
                        .or_insert(counters),
                )
            }
        };
        counters.count(decision, verdict);
        if detailed.is_none() {
            RECENT_RULES.with(|recent| {
                if let Ok(mut recent) = recent.try_borrow_mut() {
                    recent.keep(RecentRule {
                        metrics: self.id,
                        domain: domain.into(),
                        rule: rule.into(),
                        counters,
                    });
                }
            });
        }
    }

    /// Counts the decision on the counters of (`domain`, `rule`) if this
    /// thread has them at hand; whether it had.
    fn count_recent(
        &self,
        domain: &str,
        rule: &str,
        decision: &Decision,
        verdict: Verdict,
    ) -> bool {
        RECENT_RULES.with(|recent| {
            let Ok(recent) = recent.try_borrow() else {
                return false;
            };
            match recent.find(self.id, domain, rule) {
                Some(counters) => {
                    counters.count(decision, verdict);
                    true
                }
                None => false,
            }
        })
    }

    /// Counts an inline limit's decision (`domain=""`, `rule="inline"`), as
    /// [`count`](Metrics::count) would, without looking the rule up.
    pub fn count_inline(&self, decision: &Decision, verdict: Verdict) {
        self.inline
            .get_or_init(|| self.rule_counters("", "inline"))
            .count(decision, verdict);
    }

    /// Counts a refusal of `key` (a store key, as the store was asked) by
    /// (`domain`, `rule`), enforced or in shadow mode, among the rule's top
    /// offenders, now by the system clock. Inline limits count under
    /// (`""`, `"inline"`).
    pub fn count_refusal(&self, domain: &str, rule: &str, key: &[u8]) {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.count_refusal_at(domain, rule, key, now_ms);
    }

    /// [`count_refusal`](Metrics::count_refusal) at `now_ms` (milliseconds
    /// since the epoch).
    pub fn count_refusal_at(&self, domain: &str, rule: &str, key: &[u8], now_ms: u64) {
        let found = self
            .refused
            .read()
            .get(&RuleKeyRef { domain, rule })
            .cloned();
        let top = match found {
            Some(top) => top,
            None => Arc::clone(
                self.refused
                    .write()
                    .entry(RuleKey {
                        domain: domain.to_owned(),
                        rule: rule.to_owned(),
                    })
                    .or_insert_with(|| Arc::new(Mutex::new(TopKeys::new(OFFENDERS_PER_SLOT)))),
            ),
        };
        top.lock().count(shown_key(key), 1, now_ms);
    }

    /// The `n` keys (`domain`, `rule`) refused most over the five minutes
    /// up to `now_ms`, most first, as `DELETE /v1/keys/{key}` names them;
    /// empty when the rule refused nothing.
    pub fn top_refused(&self, domain: &str, rule: &str, n: usize, now_ms: u64) -> Vec<Estimate> {
        let top = self
            .refused
            .read()
            .get(&RuleKeyRef { domain, rule })
            .cloned();
        top.map_or_else(Vec::new, |top| top.lock().top(n, now_ms))
    }

    /// Every counted rule's counters now, inline limits included; the
    /// labels carrying request values added up under their rule's.
    fn current_counts(&self) -> Vec<(String, String, Counts)> {
        let mut by_rule: BTreeMap<(&str, &str), Counts> = BTreeMap::new();
        let counted = self.by_rule.read();
        for (key, counters) in counted.iter() {
            let rule = counters.rule_of_value.as_deref().unwrap_or(&key.rule);
            by_rule
                .entry((&key.domain, rule))
                .or_default()
                .add(counters.counts());
        }
        let mut out: Vec<(String, String, Counts)> = by_rule
            .into_iter()
            .map(|((domain, rule), counts)| (domain.to_owned(), rule.to_owned(), counts))
            .collect();
        drop(counted);
        if let Some(inline) = self.inline.get() {
            out.push((String::new(), "inline".to_owned(), inline.counts()));
        }
        out
    }

    /// Records every rule's counters at `now_ms` (milliseconds since the
    /// epoch) in the history the dashboard reads; a sampler calls it every
    /// [`SAMPLE_MS`](crate::history::SAMPLE_MS). Decisions never wait for
    /// it: it reads the counters, it does not lock them.
    pub fn sample(&self, now_ms: u64) {
        let current = self.current_counts();
        self.history.lock().record(
            now_ms,
            current
                .iter()
                .map(|(domain, rule, counts)| (domain.as_str(), rule.as_str(), *counts)),
        );
    }

    /// Every counted rule's counters and trend at `now_ms`, sorted by
    /// domain and rule.
    pub fn rule_trends(&self, now_ms: u64) -> Vec<RuleTrend> {
        let mut current = self.current_counts();
        current.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let history = self.history.lock();
        current
            .into_iter()
            .map(|(domain, rule, counts)| {
                let trend = history.trend(&domain, &rule, counts, now_ms);
                RuleTrend {
                    domain,
                    rule,
                    counts,
                    trend,
                }
            })
            .collect()
    }

    /// Keeps the outcome of a rules reload at `at_ms` for the dashboard.
    pub fn record_reload(&self, at_ms: u64, error: Option<String>) {
        *self.last_reload.lock() = Some(ReloadRecord {
            at_ms,
            ok: error.is_none(),
            error,
        });
    }

    /// The last rules reload, if there was one.
    pub fn last_reload(&self) -> Option<ReloadRecord> {
        self.last_reload.lock().clone()
    }

    /// The decision routes' latency percentiles since the start, for the
    /// routes that decided anything.
    pub fn latency_percentiles(&self) -> Vec<(&'static str, Percentiles)> {
        self.routes
            .iter()
            .map(|(route, histogram)| (*route, histogram.percentiles()))
            .filter(|(_, p)| p.count > 0)
            .collect()
    }

    /// Bytes the memory store holds, as last reported.
    pub fn memory_used(&self) -> i64 {
        self.memory_used.get()
    }

    /// Handles onto the counters of (`domain`, `rule`), made at zero when
    /// new.
    fn rule_counters(&self, domain: &str, rule: &str) -> RuleCounters {
        let labels = RuleLabels {
            domain: domain.to_owned(),
            rule: rule.to_owned(),
        };
        RuleCounters {
            total: self.total.get_or_create(&labels).clone(),
            allowed: self.allowed.get_or_create(&labels).clone(),
            rejected: self.rejected.get_or_create(&labels).clone(),
            shadow_rejected: self.shadow_rejected.get_or_create(&labels).clone(),
            near_limit: self.near_limit.get_or_create(&labels).clone(),
            bans: self.bans.get_or_create(&labels).clone(),
            ban_refusals: self.ban_refusals.get_or_create(&labels).clone(),
            rule_of_value: None,
        }
    }

    /// Names the kind of store decisions go to, as the dashboard shows it:
    /// `memory` (the default) or `redis`.
    pub fn with_store_kind(mut self, kind: &'static str) -> Metrics {
        self.store_kind = kind;
        self
    }

    /// Registers the async sync mode's metrics (on a shared store, where
    /// `--sync async` or a limit's `sync: async` asks for it):
    /// `tollgate_sync_lag_seconds`, `tollgate_sync_lag_max_seconds`,
    /// `tollgate_sync_batches_total`,
    /// `tollgate_sync_failed_batches_total`, `tollgate_sync_batch_keys`,
    /// `tollgate_sync_unsent` and `tollgate_sync_degraded_decisions_total`;
    /// [`set_sync`](Self::set_sync) keeps them.
    pub fn with_sync(mut self) -> Metrics {
        let sync = &self.sync;
        self.registry.register(
            "sync_lag_seconds",
            "Age of the global state behind the local copies: time since the last sync batch that reached the shared store left",
            sync.lag.clone(),
        );
        self.registry.register(
            "sync_lag_max_seconds",
            "Oldest the global state behind the local copies has been since start: the longest time from a sync batch that reached the shared store leaving to the next one coming back",
            sync.max_lag.clone(),
        );
        self.registry.register(
            "sync_batches",
            "Sync batches that reached the shared store",
            sync.batches.clone(),
        );
        self.registry.register(
            "sync_failed_batches",
            "Sync batches that did not reach the shared store (their usage goes with a later one)",
            sync.failed_batches.clone(),
        );
        self.registry.register(
            "sync_batch_keys",
            "Keys in the last sync batch",
            sync.batch_keys.clone(),
        );
        self.registry.register(
            "sync_unsent",
            "Usage entries the shared store has not acknowledged yet",
            sync.unsent.clone(),
        );
        self.registry.register(
            "sync_degraded_decisions",
            "Decisions taken from local copies while the shared store was unreachable",
            sync.degraded.clone(),
        );
        self
    }

    /// Brings the sync metrics to `figures` (the sync mode's own totals).
    pub fn set_sync(&self, figures: &SyncFigures) {
        let sync = &self.sync;
        sync.lag.set(figures.lag.as_secs_f64());
        sync.max_lag.set(figures.max_lag.as_secs_f64());
        catch_up(&sync.batches, figures.batches);
        catch_up(&sync.failed_batches, figures.failed_batches);
        catch_up(&sync.degraded, figures.degraded_decisions);
        sync.batch_keys
            .set(i64::try_from(figures.batch_keys).unwrap_or(i64::MAX));
        sync.unsent
            .set(i64::try_from(figures.unsent).unwrap_or(i64::MAX));
    }

    /// The kind of store decisions go to.
    pub fn store_kind(&self) -> &'static str {
        self.store_kind
    }

    /// At most `per_rule` distinct labels carrying request values per rule
    /// (0 lets none through: every value counts under `<rule>._other_`).
    pub fn with_values_per_rule(mut self, per_rule: usize) -> Metrics {
        self.values_per_rule = per_rule;
        self
    }

    fn detailed_label<'a>(&self, rule: &str, label: &'a str) -> Cow<'a, str> {
        let mut seen = self.detailed.lock();
        let ValueLabels { by_rule, total } = &mut *seen;
        let room = *total < MAX_DETAILED_SERIES;
        let labels = match by_rule.get_mut(rule) {
            Some(labels) => labels,
            None if room && self.values_per_rule > 0 => by_rule.entry(rule.to_owned()).or_default(),
            None => return Cow::Owned(format!("{rule}._other_")),
        };
        if labels.contains(label) {
            return Cow::Borrowed(label);
        }
        if room && labels.len() < self.values_per_rule {
            labels.insert(label.to_owned());
            *total += 1;
            return Cow::Borrowed(label);
        }
        Cow::Owned(format!("{rule}._other_"))
    }

    /// The latency histogram of `route`, as a handle a route keeps to
    /// observe into without finding it by name on every request.
    pub(crate) fn route_latency(&self, route: &'static str) -> LatencyHistogram {
        match self.routes.iter().find(|(name, _)| *name == route) {
            Some((_, histogram)) => histogram.clone(),
            None => self.latency.get_or_create(&RouteLabels { route }).clone(),
        }
    }

    /// Records how long a decision on `route` took.
    pub fn observe_latency(&self, route: &'static str, elapsed: Duration) {
        match self.routes.iter().find(|(name, _)| *name == route) {
            Some((_, histogram)) => histogram.observe(elapsed),
            None => self
                .latency
                .get_or_create(&RouteLabels { route })
                .observe(elapsed),
        }
    }

    /// Counts a rules reload (see also
    /// [`record_reload`](Metrics::record_reload)).
    pub fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts a snapshot save.
    pub fn snapshot_saved(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.snapshots.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts the snapshot load at start: `ok`, `missing` or `failed`.
    pub fn snapshot_loaded(&self, result: &'static str) {
        self.snapshot_loads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a cost read from a response, by its result (see
    /// `tollgate_tower::CostOutcome::as_str`).
    pub fn response_cost(&self, result: &'static str) {
        self.response_costs
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a failed store operation.
    pub fn store_error(&self) {
        self.store_errors.inc();
    }

    /// The failed-store-operations counter, for a store wrapper that
    /// answers some failures itself ([`Guarded`](crate::guarded::Guarded)).
    pub fn store_error_counter(&self) -> Counter {
        self.store_errors.clone()
    }

    /// Failed store operations so far (for `/readyz`).
    pub fn store_errors(&self) -> u64 {
        self.store_errors.get()
    }

    /// Sets the memory store's usage gauge.
    pub fn set_memory_used(&self, bytes: usize) {
        self.memory_used
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Brings `tollgate_memory_store_unstored_total` up to `total`, the
    /// memory store's own count so far (a counter: it never goes down).
    pub fn set_memory_unstored(&self, total: u64) {
        let counted = self.memory_unstored.get();
        if total > counted {
            self.memory_unstored.inc_by(total - counted);
        }
    }

    /// Sets `tollgate_redis_engine` to 1 for `engine` and 0 for the other
    /// (nothing for stores with one engine, `None`).
    pub fn set_engine(&self, engine: Option<&'static str>) {
        let Some(engine) = engine else { return };
        for name in ["module", "lua"] {
            let value = i64::from(name == engine);
            self.redis_engine
                .get_or_create(&EngineLabels { engine: name })
                .set(value);
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The async sync mode's figures, as [`Metrics::set_sync`] takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncFigures {
    /// Time since the last batch that reached the shared store left.
    pub lag: Duration,
    /// The longest lag so far, from a batch that reached the shared store
    /// leaving to the next one coming back.
    pub max_lag: Duration,
    /// Batches that reached the shared store, so far.
    pub batches: u64,
    /// Batches that did not, so far.
    pub failed_batches: u64,
    /// Keys in the last batch.
    pub batch_keys: u64,
    /// Usage entries not acknowledged yet.
    pub unsent: u64,
    /// Decisions taken locally while the shared store was unreachable, so
    /// far.
    pub degraded_decisions: u64,
}

/// The sync mode's series (registered by [`Metrics::with_sync`]).
#[derive(Default)]
struct SyncMetrics {
    lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    max_lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    batches: Counter,
    failed_batches: Counter,
    batch_keys: Gauge,
    unsent: Gauge,
    degraded: Counter,
}

/// Brings a counter up to `total` (it never goes down).
fn catch_up(counter: &Counter, total: u64) {
    let counted = counter.get();
    if total > counted {
        counter.inc_by(total - counted);
    }
}

/// Whether an admitted decision used more than 80% of its limit (the
/// threshold envoyproxy/ratelimit reports as "near limit").
pub fn near_limit(decision: &Decision) -> bool {
    let used = decision.limit.saturating_sub(decision.remaining);
    decision.allowed && u128::from(used) * 5 > u128::from(decision.limit) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(limit: u64, remaining: u64) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            ..Decision::default()
        }
    }

    #[test]
    fn refused_keys_are_listed_per_rule_without_their_store_prefix() {
        use crate::target::{INLINE_KEY_PREFIX, RULES_KEY_PREFIX};
        let metrics = Metrics::new();
        let now = 1_700_000_000_000;
        let rule_key = |user: &str| {
            let mut key = vec![RULES_KEY_PREFIX];
            key.extend_from_slice(format!("tg1|api|user={user}").as_bytes());
            key
        };
        for _ in 0..3 {
            metrics.count_refusal_at("api", "api.user", &rule_key("mallory"), now);
        }
        metrics.count_refusal_at("api", "api.user", &rule_key("eve"), now);
        metrics.count_refusal_at("", "inline", &[INLINE_KEY_PREFIX, b'k'], now);
        let listed = |domain: &str, rule: &str| -> Vec<(String, u64)> {
            metrics
                .top_refused(domain, rule, 10, now)
                .into_iter()
                .map(|e| (String::from_utf8(e.key).unwrap(), e.count))
                .collect()
        };
        assert_eq!(
            listed("api", "api.user"),
            vec![
                ("tg1|api|user=mallory".to_owned(), 3),
                ("tg1|api|user=eve".to_owned(), 1)
            ]
        );
        assert_eq!(listed("", "inline"), vec![("k".to_owned(), 1)]);
        assert!(listed("api", "other").is_empty());
        assert!(metrics
            .top_refused("api", "api.user", 10, now + 301_000)
            .is_empty());
    }

    #[test]
    fn two_registries_on_one_thread_count_only_their_own_decisions() {
        // The thread keeps the counters it used last at hand: they must be
        // the registry's that counts, not the other one's of the same rule.
        let (first, second) = (Metrics::new(), Metrics::new());
        let counted = |m: &Metrics| -> Vec<(String, String, u64)> {
            m.current_counts()
                .into_iter()
                .map(|(domain, rule, counts)| (domain, rule, counts.allowed))
                .collect()
        };
        for _ in 0..3 {
            first.count("api", "api.user", None, &decision(10, 9), Verdict::Allowed);
        }
        second.count("api", "api.user", None, &decision(10, 9), Verdict::Allowed);
        first.count("api", "api.ip", None, &decision(10, 9), Verdict::Allowed);
        // More rules than the thread keeps, so that some are found again
        // in the registry after being let go.
        for i in 0..2 * RECENT_RULES_KEPT {
            second.count(
                "api",
                &format!("r{i}"),
                None,
                &decision(10, 9),
                Verdict::Allowed,
            );
        }
        second.count("api", "api.user", None, &decision(10, 9), Verdict::Allowed);
        let user = |m: &Metrics| {
            counted(m)
                .into_iter()
                .find(|(_, rule, _)| rule == "api.user")
                .map(|(_, _, allowed)| allowed)
        };
        assert_eq!(user(&first), Some(3));
        assert_eq!(user(&second), Some(2));
        assert_eq!(counted(&first).len(), 2);
        assert_eq!(counted(&second).len(), 1 + 2 * RECENT_RULES_KEPT);
    }

    #[test]
    fn near_limit_is_past_eighty_percent() {
        assert!(!near_limit(&decision(10, 2)));
        assert!(near_limit(&decision(10, 1)));
        assert!(!near_limit(&Decision {
            allowed: false,
            ..decision(10, 0)
        }));
    }

    #[test]
    fn bans_started_and_refusals_by_a_ban_count_apart() {
        let m = Metrics::new();
        let ban = |ban| Decision {
            ban: Some(ban),
            ..Decision::default()
        };
        m.count("d", "d.login", None, &decision(3, 0), Verdict::Rejected);
        m.count(
            "d",
            "d.login",
            None,
            &ban(BanRefusal::Started),
            Verdict::Rejected,
        );
        m.count(
            "d",
            "d.login",
            None,
            &ban(BanRefusal::InForce),
            Verdict::Rejected,
        );
        m.count(
            "d",
            "d.login",
            None,
            &ban(BanRefusal::InForce),
            Verdict::Rejected,
        );
        let text = m.encode();
        assert!(
            text.contains(r#"tollgate_bans_total{domain="d",rule="d.login"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tollgate_ban_refusals_total{domain="d",rule="d.login"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn counters_appear_in_the_exposition() {
        let m = Metrics::new();
        m.count("api", "api.user", None, &decision(10, 1), Verdict::Allowed);
        m.count("api", "api.user", None, &decision(10, 0), Verdict::Rejected);
        let text = m.encode();
        assert!(
            text.contains(r#"tollgate_requests_total{domain="api",rule="api.user"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tollgate_near_limit_total{domain="api",rule="api.user"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tollgate_rejected_total{domain="api",rule="api.user"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn labels_with_values_are_capped_per_rule_and_in_all() {
        let m = Metrics::new().with_values_per_rule(MAX_DETAILED_SERIES);
        for i in 0..MAX_DETAILED_SERIES + 5 {
            let rule = if i % 2 == 0 { "d.k" } else { "d.j" };
            m.count(
                "d",
                rule,
                Some(&format!("{rule}_{i}")),
                &decision(10, 9),
                Verdict::Allowed,
            );
        }
        assert_eq!(m.detailed.lock().total, MAX_DETAILED_SERIES);
        let text = m.encode();
        assert!(text.contains(r#"rule="d.k._other_"} 3"#), "{text}");
        assert!(text.contains(r#"rule="d.j._other_"} 2"#), "{text}");
    }

    #[test]
    fn a_random_value_flood_makes_at_most_the_cap_of_series() {
        let m = Metrics::new().with_values_per_rule(1_000);
        // 100,000 distinct values from a client, on one rule, then a value
        // seen before the cap: it keeps its own series.
        for i in 0..100_000u64 {
            let value = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            m.count(
                "d",
                "d.user",
                Some(&format!("d.user_{value:x}")),
                &decision(10, 9),
                Verdict::Allowed,
            );
        }
        m.count(
            "d",
            "d.user",
            Some("d.user_0"),
            &decision(10, 9),
            Verdict::Allowed,
        );
        let text = m.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("tollgate_requests_total{") && l.contains("d.user"))
            .count();
        assert_eq!(series, 1_001, "1,000 values and the _other_ series");
        assert!(text.contains(r#"rule="d.user._other_"} 99000"#), "{text}");
        assert!(text.contains(r#"rule="d.user_0"} 2"#), "{text}");
        // Another rule still gets its own values.
        m.count(
            "d",
            "d.path",
            Some("d.path_/a"),
            &decision(10, 9),
            Verdict::Allowed,
        );
        assert!(m.encode().contains(r#"rule="d.path_/a"} 1"#));
    }
}
