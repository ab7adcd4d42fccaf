//! [`MetricsObserver`]: the rate-limiting layer's decisions counted in the
//! Prometheus registry, under the same names and labels as the decision
//! service's (`tollgate_requests_total{domain, rule}` and the rest), with
//! their latency under `route="gateway"`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Decision, StoreError};
use tollgate_rules::check::{OneLimit, Outcome, PlainDecided};
use tollgate_tower::{CostOutcome, Observer};

use crate::latency::LatencyHistogram;
use crate::metrics::{Metrics, Verdict};

/// Counts each decision of the gateway's rate-limiting layer in `Metrics`.
#[derive(Clone)]
pub struct MetricsObserver {
    metrics: Arc<Metrics>,
    /// The `gateway` route's latency histogram, kept rather than found by
    /// name per decision.
    latency: LatencyHistogram,
    /// Whether the store's refusal to settle has been logged.
    settle_unsupported_logged: Arc<AtomicBool>,
}

impl MetricsObserver {
    /// Counting into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        MetricsObserver {
            latency: metrics.route_latency("gateway"),
            metrics,
            settle_unsupported_logged: Arc::default(),
        }
    }
}

impl Observer for MetricsObserver {
    fn rules_decided(
        &self,
        domain: &str,
        _route: Option<&str>,
        outcome: &Outcome<'_>,
        took: Duration,
    ) {
        for d in outcome.descriptors.iter().flatten() {
            if d.decided() {
                let verdict = Verdict::of(&d.decision, d.shadow);
                self.metrics.count(
                    domain,
                    d.rule.id(),
                    d.detailed.as_deref(),
                    &d.decision,
                    verdict,
                );
                if !d.decision.allowed {
                    self.metrics.count_refusal(domain, d.rule.id(), &d.key);
                }
            }
        }
        self.latency.observe(took);
    }

    /// What `rules_decided` counts for the outcome of one enforced limit.
    fn one_limit_decided(
        &self,
        domain: &str,
        _route: Option<&str>,
        one: &OneLimit<'_>,
        key: &[u8],
        decision: &Decision,
        took: Duration,
    ) {
        let rule = one.rule().id();
        let verdict = Verdict::of(decision, false);
        self.metrics.count(domain, rule, None, decision, verdict);
        if !decision.allowed {
            self.metrics.count_refusal(domain, rule, key);
        }
        self.latency.observe(took);
    }

    /// What `rules_decided` counts for the outcome of plain rules.
    fn plain_decided(
        &self,
        domain: &str,
        _route: Option<&str>,
        decided: &[PlainDecided<'_, '_>],
        took: Duration,
    ) {
        for d in decided {
            let rule = d.rule.id();
            self.metrics.count(
                domain,
                rule,
                None,
                &d.decision,
                Verdict::of(&d.decision, false),
            );
            if !d.decision.allowed {
                self.metrics.count_refusal(domain, rule, d.key);
            }
        }
        self.latency.observe(took);
    }

    fn inline_decided(&self, name: &str, decision: &Decision, shadow: bool, took: Duration) {
        let verdict = Verdict::of(decision, shadow);
        self.metrics.count("", name, None, decision, verdict);
        self.latency.observe(took);
    }

    fn cost_settled(&self, outcome: CostOutcome) {
        self.metrics.response_cost(outcome.as_str());
        if outcome == CostOutcome::Unsupported
            && !self.settle_unsupported_logged.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "this store does not settle costs read from responses: each request's estimate stands (counted in tollgate_response_costs_total{{result=\"unsupported\"}})"
            );
        }
    }

    fn store_failed(&self, error: &StoreError) {
        if error.is_outage() {
            self.metrics.store_error();
            tracing::warn!(%error, "store operation failed");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tollgate_rules::RuleSet;

    /// The counts of a decision through one limit are those of the outcome
    /// it stands for, admitted or refused.
    #[test]
    fn one_limit_counts_as_its_outcome() {
        let rules = RuleSet::from_yaml(
            "domain: web\n\
             descriptors:\n\
             \x20 - key: remote_address\n\
             \x20   rate_limit: {name: per-client, unit: second, requests_per_unit: 5}\n",
            "web.yaml",
        )
        .unwrap();
        let domain = rules.domain("web").unwrap();
        let descriptor = [("remote_address", "192.0.2.1")];
        let one = OneLimit::find(domain, &descriptor, false, false).unwrap();
        let key = b"r-key".to_vec();
        let (direct, summed) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
        let took = Duration::from_micros(30);
        for allowed in [true, false, true] {
            let decision = Decision {
                allowed,
                limit: 5,
                remaining: u64::from(allowed),
                ..Decision::default()
            };
            MetricsObserver::new(Arc::clone(&direct))
                .one_limit_decided("web", None, &one, &key, &decision, took);
            MetricsObserver::new(Arc::clone(&summed)).rules_decided(
                "web",
                None,
                &one.outcome(key.clone(), decision),
                took,
            );
        }
        // The same samples (the encoding's order of histograms is a map's).
        let sorted = |m: &Metrics| {
            let mut lines: Vec<String> = m.encode().lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        assert_eq!(sorted(&direct), sorted(&summed));
        assert!(direct.encode().contains("rule=\"web.remote_address\""));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let refused = direct.top_refused("web", "web.remote_address", 3, now_ms);
        assert_eq!(refused.len(), 1);
        assert_eq!(
            refused,
            summed.top_refused("web", "web.remote_address", 3, now_ms)
        );
    }
}
