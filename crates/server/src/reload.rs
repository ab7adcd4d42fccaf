//! [`apply_reload`]: putting a rules reload's outcome in force, for every
//! holder of the rules in force (the decision service's [`App`](crate::App)
//! and the gateway).

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_rules::{RuleSet, RulesError};

use crate::metrics::Metrics;

/// New rules for every request that starts from now on, or, when loading
/// failed, the previous rules kept and the failure logged with its
/// file:line:reason. Either way the reload is counted in `metrics`, and
/// its time and outcome kept there for the dashboard.
pub fn apply_reload(
    rules: &ArcSwap<RuleSet>,
    metrics: &Metrics,
    loaded: Result<RuleSet, RulesError>,
) -> Result<(), RulesError> {
    match loaded {
        Ok(new) => {
            rules.store(Arc::new(new));
            metrics.reloaded(true);
            metrics.record_reload(now_ms(), None);
            tracing::info!("rules reloaded");
            Ok(())
        }
        Err(error) => {
            metrics.reloaded(false);
            metrics.record_reload(now_ms(), Some(error.to_string()));
            tracing::error!(%error, "rules reload failed; keeping the previous rules");
            Err(error)
        }
    }
}

/// Milliseconds since the epoch by the system clock (0 before 1970).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_reload_is_kept_with_its_error() {
        let rules = ArcSwap::from_pointee(RuleSet::default());
        let metrics = Metrics::new();
        assert_eq!(metrics.last_reload(), None);
        let broken = RuleSet::from_yaml("domain: api\ncolour: red\n", "api.yaml");
        assert!(apply_reload(&rules, &metrics, broken).is_err());
        let failed = metrics.last_reload().unwrap();
        assert!(!failed.ok);
        let error = failed.error.unwrap();
        assert!(error.starts_with("api.yaml:2:"), "{error}");
        let fixed = RuleSet::from_yaml("domain: api\n", "api.yaml");
        assert!(apply_reload(&rules, &metrics, fixed).is_ok());
        let ok = metrics.last_reload().unwrap();
        assert!(ok.ok && ok.error.is_none() && ok.at_ms >= failed.at_ms);
    }
}
