//! Bucket models: tokens (or queue level) as exact fractions, refilled (or
//! drained) continuously at `N/P`.

use super::ratio::Ratio;
use super::Model;

/// SPEC §2 `token_bucket` (and `gcra`, which must decide identically): up to
/// `burst` tokens, refilled at `N/P`, full at the start; `c` is admitted when
/// at least `c` tokens are there.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucketModel {
    n: u64,
    p: u64,
    burst: u64,
    tokens: Ratio,
    at: u64,
}

impl TokenBucketModel {
    pub(crate) fn new(n: u64, p: u64, burst: u64) -> Self {
        TokenBucketModel {
            n,
            p,
            burst,
            tokens: Ratio::int(burst),
            at: 0,
        }
    }

    /// Tokens at `t` (not before the last admission).
    pub(crate) fn tokens_at(&self, t: u64) -> Ratio {
        assert!(t >= self.at, "model queried in the past");
        let refill = Ratio::int(t - self.at).scale(self.n, self.p);
        self.tokens.add(refill).min(Ratio::int(self.burst))
    }

    /// Nanoseconds (rounded up) to refill `tokens`.
    fn time_for(&self, tokens: Ratio) -> u64 {
        tokens.scale(self.p, self.n).ceil_nanos()
    }
}

impl Model for TokenBucketModel {
    fn capacity(&self) -> u64 {
        self.burst
    }

    fn admits(&self, t: u64, cost: u64) -> bool {
        self.tokens_at(t) >= Ratio::int(cost)
    }

    fn admit(&mut self, t: u64, cost: u64) {
        self.tokens = self.tokens_at(t).sub(Ratio::int(cost));
        assert!(
            self.tokens >= Ratio::zero(),
            "model admitted beyond its tokens"
        );
        self.at = t;
    }

    fn first_admit(&self, t: u64, cost: u64) -> u64 {
        t + self.time_for(Ratio::int(cost).sub(self.tokens_at(t)))
    }

    fn record(&mut self, t: u64, cost: u64) {
        self.tokens = self.tokens_at(t).sub(Ratio::int(cost));
        self.at = t;
    }

    fn usage(&self, t: u64) -> u64 {
        let missing = Ratio::int(self.burst).sub(self.tokens_at(t)).ceil();
        u64::try_from(missing).expect("a bucket never holds more than full")
    }

    fn first_quiet(&self, t: u64) -> u64 {
        t + self.time_for(Ratio::int(self.burst).sub(self.tokens_at(t)))
    }
}

/// SPEC §2 `leaky_bucket`: a queue of capacity `burst` drained at `N/P`; an
/// admitted request waits for the queue ahead of it to drain
/// (`delay = level / rate`), and is rejected when it would overflow.
#[derive(Debug, Clone)]
pub(crate) struct LeakyBucketModel {
    n: u64,
    p: u64,
    burst: u64,
    level: Ratio,
    at: u64,
}

impl LeakyBucketModel {
    pub(crate) fn new(n: u64, p: u64, burst: u64) -> Self {
        LeakyBucketModel {
            n,
            p,
            burst,
            level: Ratio::zero(),
            at: 0,
        }
    }

    /// Queue level at `t`. Before the last event (a reservation booked
    /// ahead), the queue also holds all that drains until then.
    pub(crate) fn level_at(&self, t: u64) -> Ratio {
        if t < self.at {
            return self
                .level
                .add(Ratio::int(self.at - t).scale(self.n, self.p));
        }
        let drained = Ratio::int(t - self.at).scale(self.n, self.p);
        self.level.sub(drained).max(Ratio::zero())
    }

    /// Nanoseconds (rounded up) to drain `requests`.
    pub(crate) fn time_for(&self, requests: Ratio) -> u64 {
        requests.scale(self.p, self.n).ceil_nanos()
    }

    /// A reservation made at `t`, whatever the queue's level: it goes out
    /// once everything ahead of it has drained (rounded up to a whole
    /// nanosecond) and is queued from then on. Returns that instant.
    pub(crate) fn reserve(&mut self, t: u64, cost: u64) -> u64 {
        let out = t + self.time_for(self.level_at(t));
        assert_eq!(self.level_at(out), Ratio::zero());
        self.level = Ratio::int(cost);
        self.at = out;
        out
    }
}

impl Model for LeakyBucketModel {
    fn capacity(&self) -> u64 {
        self.burst
    }

    fn admits(&self, t: u64, cost: u64) -> bool {
        self.level_at(t).add(Ratio::int(cost)) <= Ratio::int(self.burst)
    }

    fn admit(&mut self, t: u64, cost: u64) {
        self.level = self.level_at(t).add(Ratio::int(cost));
        self.at = t;
    }

    fn first_admit(&self, t: u64, cost: u64) -> u64 {
        let over = self
            .level_at(t)
            .add(Ratio::int(cost))
            .sub(Ratio::int(self.burst));
        t + self.time_for(over)
    }

    fn first_quiet(&self, t: u64) -> u64 {
        t + self.time_for(self.level_at(t))
    }

    fn delay(&self, t: u64) -> u64 {
        self.time_for(self.level_at(t))
    }

    fn record(&mut self, t: u64, cost: u64) {
        self.level = self.level_at(t).add(Ratio::int(cost));
        self.at = t;
    }

    fn usage(&self, t: u64) -> u64 {
        u64::try_from(self.level_at(t).ceil()).expect("a queue is never negative")
    }
}
