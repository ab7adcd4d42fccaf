//! [`History`]: each rule's counters as they stood every ten seconds over
//! the last ten minutes, for the dashboard's rates and sparklines.
//!
//! Decisions never touch it: a sampler reads the per-rule counters the
//! metrics already keep (plain atomics) every [`SAMPLE_MS`] and records
//! them here ([`Metrics::sample`](crate::metrics::Metrics::sample)); a
//! reader turns the samples and the counters' current values into rates
//! and per-sample counts. Time is a parameter everywhere but in
//! [`sampling`], the loop that servers spawn.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

/// How often the sampler records the counters.
pub const SAMPLE_MS: u64 = 10_000;

/// Samples kept per rule: ten minutes of them, and the one before.
pub const SAMPLES: usize = 61;

/// The span rates are averaged over.
pub const RATE_WINDOW_MS: u64 = 60_000;

/// A rule's counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Admitted.
    pub allowed: u64,
    /// Refused, and the refusal enforced.
    pub rejected: u64,
    /// Refused by a rule in shadow mode (reported, not enforced).
    pub shadow_rejected: u64,
    /// Admissions that used more than 80 % of the limit.
    pub near_limit: u64,
}

impl Counts {
    /// Adds `other`'s counts to these (saturating).
    pub fn add(&mut self, other: Counts) {
        self.allowed = self.allowed.saturating_add(other.allowed);
        self.rejected = self.rejected.saturating_add(other.rejected);
        self.shadow_rejected = self.shadow_rejected.saturating_add(other.shadow_rejected);
        self.near_limit = self.near_limit.saturating_add(other.near_limit);
    }

    /// `self - earlier`, per field (0 where a counter went backwards).
    fn since(self, earlier: Counts) -> Counts {
        Counts {
            allowed: self.allowed.saturating_sub(earlier.allowed),
            rejected: self.rejected.saturating_sub(earlier.rejected),
            shadow_rejected: self.shadow_rejected.saturating_sub(earlier.shadow_rejected),
            near_limit: self.near_limit.saturating_sub(earlier.near_limit),
        }
    }
}

/// Counters at an instant.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: u64,
    counts: Counts,
}

/// Per second, averaged over the last minute (or since counting began,
/// when that is shorter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Admitted per second.
    pub allowed: f64,
    /// Refused (enforced) per second.
    pub rejected: f64,
    /// Refused in shadow mode per second.
    pub shadow_rejected: f64,
    /// Over how many seconds the rates were averaged; 0 when there is no
    /// sample to average from yet (the rates are then 0).
    pub over_seconds: f64,
}

/// A rule's trend: rates now, and the counts between consecutive samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Trend {
    /// Rates over the last minute.
    pub rates: Rates,
    /// Admitted between consecutive samples, oldest first; the last entry
    /// counts from the last sample to now. At most [`SAMPLES`] entries.
    pub allowed_series: Vec<u64>,
    /// Refused (enforced and in shadow mode), likewise.
    pub rejected_series: Vec<u64>,
}

/// The rules' samples. Holds at most [`SAMPLES`] per rule, for as many
/// rules as the metrics have counters (bounded by the rules files).
#[derive(Debug, Default)]
pub struct History {
    rules: HashMap<(String, String), VecDeque<Sample>>,
    /// When the last sample was taken: a rule seen for the first time
    /// after it had no counts then (its counters are made on its first
    /// decision).
    last_ms: Option<u64>,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// Records every rule's `counts` at `now_ms`.
    pub fn record<'a>(
        &mut self,
        now_ms: u64,
        current: impl IntoIterator<Item = (&'a str, &'a str, Counts)>,
    ) {
        for (domain, rule, counts) in current {
            let samples = match self.rules.get_mut(&(domain.to_owned(), rule.to_owned())) {
                Some(samples) => samples,
                None => {
                    let mut samples = VecDeque::with_capacity(SAMPLES + 1);
                    if let Some(last_ms) = self.last_ms {
                        samples.push_back(Sample {
                            at_ms: last_ms,
                            counts: Counts::default(),
                        });
                    }
                    self.rules
                        .entry((domain.to_owned(), rule.to_owned()))
                        .or_insert(samples)
                }
            };
            samples.push_back(Sample {
                at_ms: now_ms,
                counts,
            });
            while samples.len() > SAMPLES {
                samples.pop_front();
            }
        }
        self.last_ms = Some(now_ms);
    }

    /// The trend of (`domain`, `rule`), whose counters read `now` at
    /// `now_ms`.
    pub fn trend(&self, domain: &str, rule: &str, now: Counts, now_ms: u64) -> Trend {
        let recorded = self.rules.get(&(domain.to_owned(), rule.to_owned()));
        // A rule not sampled yet had no counts at the last sample.
        let baseline_only = [self.last_ms.map(|at_ms| Sample {
            at_ms,
            counts: Counts::default(),
        })];
        let samples: Vec<Sample> = match recorded {
            Some(samples) => samples.iter().copied().collect(),
            None => baseline_only.iter().flatten().copied().collect(),
        };
        let from = now_ms.saturating_sub(RATE_WINDOW_MS);
        let base = samples
            .iter()
            .find(|s| s.at_ms >= from && s.at_ms < now_ms)
            .or_else(|| samples.iter().rev().find(|s| s.at_ms < now_ms));
        let rates = match base {
            Some(base) => {
                let span_ms = now_ms - base.at_ms;
                let delta = now.since(base.counts);
                #[allow(clippy::cast_precision_loss)]
                let per_second = |n: u64| n as f64 * 1000.0 / span_ms as f64;
                #[allow(clippy::cast_precision_loss)]
                let over_seconds = span_ms as f64 / 1000.0;
                Rates {
                    allowed: per_second(delta.allowed),
                    rejected: per_second(delta.rejected),
                    shadow_rejected: per_second(delta.shadow_rejected),
                    over_seconds,
                }
            }
            None => Rates::default(),
        };
        let mut allowed_series = Vec::with_capacity(samples.len());
        let mut rejected_series = Vec::with_capacity(samples.len());
        let points = samples
            .iter()
            .map(|s| s.counts)
            .chain(std::iter::once(now))
            .collect::<Vec<_>>();
        for pair in points.windows(2) {
            let delta = pair[1].since(pair[0]);
            allowed_series.push(delta.allowed);
            rejected_series.push(delta.rejected.saturating_add(delta.shadow_rejected));
        }
        let excess = allowed_series.len().saturating_sub(SAMPLES);
        allowed_series.drain(..excess);
        rejected_series.drain(..excess);
        Trend {
            rates,
            allowed_series,
            rejected_series,
        }
    }
}

/// Calls `sample` with the system time (ms since the epoch) at once and
/// then every [`SAMPLE_MS`], until the task running it is aborted.
pub async fn sampling(sample: impl Fn(u64)) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(SAMPLE_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sample(crate::reload::now_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(allowed: u64, rejected: u64) -> Counts {
        Counts {
            allowed,
            rejected,
            ..Counts::default()
        }
    }

    #[test]
    fn a_rule_first_counted_after_a_sample_starts_from_zero_at_that_sample() {
        let mut history = History::new();
        history.record(1_000, []);
        // 30 admitted and 10 refused in the 2 s after the first sample.
        let trend = history.trend("api", "api.user", counts(30, 10), 3_000);
        assert_eq!(trend.rates.allowed, 15.0);
        assert_eq!(trend.rates.rejected, 5.0);
        assert_eq!(trend.rates.over_seconds, 2.0);
        assert_eq!(trend.allowed_series, vec![30]);
        assert_eq!(trend.rejected_series, vec![10]);
        // Once sampled, the baseline is kept.
        history.record(11_000, [("api", "api.user", counts(40, 10))]);
        let trend = history.trend("api", "api.user", counts(50, 12), 21_000);
        assert_eq!(trend.allowed_series, vec![40, 10]);
        assert_eq!(trend.rejected_series, vec![10, 2]);
        assert_eq!(trend.rates.over_seconds, 20.0);
        assert_eq!(trend.rates.allowed, 2.5);
    }

    #[test]
    fn without_any_sample_there_is_no_rate() {
        let history = History::new();
        let trend = history.trend("api", "api.user", counts(5, 5), 1_000);
        assert_eq!(trend.rates, Rates::default());
        assert_eq!(trend.allowed_series, Vec::<u64>::new());
    }

    #[test]
    fn rates_cover_the_last_minute_and_series_ten_minutes() {
        let mut history = History::new();
        // One sample every 10 s for 20 minutes, 10 admissions between two.
        for i in 0..=120u64 {
            history.record(i * SAMPLE_MS, [("d", "d.r", counts(i * 10, i))]);
        }
        let now_ms = 120 * SAMPLE_MS + 5_000;
        let trend = history.trend("d", "d.r", counts(1_205, 120), now_ms);
        assert_eq!(trend.allowed_series.len(), SAMPLES);
        assert!(trend.allowed_series[..SAMPLES - 1].iter().all(|&n| n == 10));
        assert_eq!(trend.allowed_series.last(), Some(&5));
        // Since the first sample within a minute (55 s ago): 55 admitted.
        assert_eq!(trend.rates.over_seconds, 55.0);
        assert_eq!(trend.rates.allowed, 1.0);
        assert_eq!(history.rules[&("d".into(), "d.r".into())].len(), SAMPLES);
    }
}
