//! [`LatencyHistogram`]: the decision routes' latency histogram, observed
//! with plain atomic increments.
//!
//! prometheus-client's own `Histogram` takes a mutex on every observation;
//! this one is a fixed array of atomic bucket counters and an atomic sum,
//! observed on every decision without a lock, and encoded through
//! prometheus-client like its histogram (the same `_sum`, `_count` and
//! `_bucket{le=…}` lines, the same bounds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Buckets with a finite upper bound: 5 µs, doubling, to about 40 ms.
const BOUNDED: usize = 14;

/// A latency histogram in seconds. Clones share the counts.
#[derive(Debug, Clone)]
pub(crate) struct LatencyHistogram {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// Upper bounds in seconds, as prometheus-client computes them.
    bounds: [f64; BOUNDED],
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; BOUNDED + 1],
    /// The sum of observations, in nanoseconds.
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// An empty histogram.
    pub(crate) fn new() -> LatencyHistogram {
        let mut bounds = [0.0; BOUNDED];
        for (bound, value) in bounds.iter_mut().zip(exponential_buckets(5e-6, 2.0, 14)) {
            *bound = value;
        }
        LatencyHistogram {
            inner: Arc::new(Counts {
                bounds,
                buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                sum_nanos: AtomicU64::new(0),
            }),
        }
    }

    /// Counts one observation of `elapsed`.
    pub(crate) fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let counts = &*self.inner;
        let bucket = counts
            .bounds
            .iter()
            .position(|&bound| bound >= seconds)
            .unwrap_or(BOUNDED);
        counts.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        counts.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// Latency percentiles read from a histogram: each the upper bound of the
/// bucket the percentile falls in (so never below the true value).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Observations so far.
    pub count: u64,
    /// The median, in milliseconds; `None` when above the largest bound
    /// (about 41 ms) or when nothing was observed.
    pub p50_ms: Option<f64>,
    /// The 90th percentile, likewise.
    pub p90_ms: Option<f64>,
    /// The 99th percentile, likewise.
    pub p99_ms: Option<f64>,
}

impl LatencyHistogram {
    /// The percentiles of every observation so far.
    pub(crate) fn percentiles(&self) -> Percentiles {
        let counts = &*self.inner;
        let buckets: Vec<u64> = counts
            .buckets
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let count: u64 = buckets.iter().sum();
        let at = |per_mille: u64| -> Option<f64> {
            if count == 0 {
                return None;
            }
            // The rank of the percentile, 1-based, rounded up.
            let rank = (u128::from(count) * u128::from(per_mille)).div_ceil(1000);
            let mut seen = 0u128;
            for (i, &n) in buckets.iter().enumerate() {
                seen += u128::from(n);
                if seen >= rank {
                    return counts.bounds.get(i).map(|seconds| seconds * 1000.0);
                }
            }
            None
        };
        Percentiles {
            count,
            p50_ms: at(500),
            p90_ms: at(900),
            p99_ms: at(990),
        }
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = &*self.inner;
        let buckets: Vec<(f64, u64)> = counts
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&counts.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|&(_, n)| n).sum();
        #[allow(clippy::cast_precision_loss)]
        let sum = counts.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    fn text(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn percentiles_are_the_bounds_of_their_buckets() {
        let histogram = LatencyHistogram::new();
        assert_eq!(histogram.percentiles(), Percentiles::default());
        // 90 fast (under 5 µs), 9 at 1 ms, 1 at a second.
        for _ in 0..90 {
            histogram.observe(Duration::from_micros(3));
        }
        for _ in 0..9 {
            histogram.observe(Duration::from_millis(1));
        }
        histogram.observe(Duration::from_secs(1));
        let p = histogram.percentiles();
        assert_eq!(p.count, 100);
        assert!((p.p50_ms.unwrap() - 0.005).abs() < 1e-12, "{p:?}");
        assert!((p.p90_ms.unwrap() - 0.005).abs() < 1e-12, "{p:?}");
        // 1 ms falls in the bucket up to 1.28 ms.
        assert!((p.p99_ms.unwrap() - 1.28).abs() < 1e-9, "{p:?}");
        histogram.observe(Duration::from_secs(1));
        histogram.observe(Duration::from_secs(1));
        assert_eq!(histogram.percentiles().p99_ms, None);
    }

    #[test]
    fn encodes_as_prometheus_clients_histogram_does() {
        let ours = LatencyHistogram::new();
        let theirs = Histogram::new(exponential_buckets(5e-6, 2.0, 14));
        // Whole microseconds and milliseconds, so both sums are exact.
        for micros in [1, 5, 6, 250, 1_000, 40_000, 90_000, 2_000_000] {
            ours.observe(Duration::from_micros(micros));
            theirs.observe(Duration::from_micros(micros).as_secs_f64());
        }
        let ours = text(|r| r.register("latency", "help", ours));
        let theirs = text(|r| r.register("latency", "help", theirs));
        // The sums are added up differently (integer nanoseconds here,
        // floating-point seconds there): every other line is the same.
        let without_sum = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with("latency_sum"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(without_sum(&ours), without_sum(&theirs));
        assert!(ours.contains("latency_sum 2.131262\n"), "{ours}");
        assert!(ours.contains(r#"latency_bucket{le="0.00001"} 3"#), "{ours}");
    }
}
