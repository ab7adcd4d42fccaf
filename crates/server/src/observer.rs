//! [`MetricsObserver`]: the rate-limiting layer's decisions counted in the
//! Prometheus registry, under the same names and labels as the decision
//! service's (`tollgate_requests_total{domain, rule}` and the rest), with
//! their latency under `route="gateway"`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Decision, StoreError};
use tollgate_rules::check::Outcome;
use tollgate_tower::{CostOutcome, Observer};

use crate::metrics::{Metrics, Verdict};

/// Counts each decision of the gateway's rate-limiting layer in `Metrics`.
#[derive(Clone)]
pub struct MetricsObserver {
    metrics: Arc<Metrics>,
    /// Whether the store's refusal to settle has been logged.
    settle_unsupported_logged: Arc<AtomicBool>,
}

impl MetricsObserver {
    /// Counting into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        MetricsObserver {
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
        self.metrics.observe_latency("gateway", took);
    }

    fn inline_decided(&self, name: &str, decision: &Decision, shadow: bool, took: Duration) {
        let verdict = Verdict::of(decision, shadow);
        self.metrics.count("", name, None, decision, verdict);
        self.metrics.observe_latency("gateway", took);
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
