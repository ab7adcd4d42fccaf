//! [`apply_reload`]: putting a rules reload's outcome in force, for every
//! holder of the rules in force (the decision service's [`App`](crate::App)
//! and the gateway).

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_rules::{RuleSet, RulesError};

use crate::metrics::Metrics;

/// New rules for every request that starts from now on, or, when loading
/// failed, the previous rules kept and the failure logged with its
/// file:line:reason. Either way the reload is counted in `metrics`.
pub fn apply_reload(
    rules: &ArcSwap<RuleSet>,
    metrics: &Metrics,
    loaded: Result<RuleSet, RulesError>,
) -> Result<(), RulesError> {
    match loaded {
        Ok(new) => {
            rules.store(Arc::new(new));
            metrics.reloaded(true);
            tracing::info!("rules reloaded");
            Ok(())
        }
        Err(error) => {
            metrics.reloaded(false);
            tracing::error!(%error, "rules reload failed; keeping the previous rules");
            Err(error)
        }
    }
}
