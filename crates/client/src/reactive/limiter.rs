//! [`ReactiveLimiter`]: per-key pacing learned from a provider's answers.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderMap;
use parking_lot::Mutex;
use tollgate_core::time::{duration_to_nanos, NANOS_PER_SEC};

use super::Signals;
use crate::clock::{RealClock, WaitClock};

/// How a [`ReactiveLimiter`] adapts when the provider publishes no numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// The rate a key starts at, in calls per second.
    pub initial_rate: f64,
    /// The lowest rate a decrease goes to.
    pub min_rate: f64,
    /// The highest rate an increase goes to.
    pub max_rate: f64,
    /// Additive increase: calls per second gained per second of successes.
    pub increase: f64,
    /// Multiplicative decrease on a `429`: the rate is multiplied by this.
    pub decrease: f64,
    /// The first pause after a `429` that says nothing about when to come
    /// back; it doubles on each such `429` in a row, up to `max_backoff`.
    pub backoff: Duration,
    /// The longest pause after a `429` that says nothing.
    pub max_backoff: Duration,
    /// The most keys remembered; beyond it the least recently used goes.
    pub max_keys: usize,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            initial_rate: 10.0,
            min_rate: 0.1,
            max_rate: 10_000.0,
            increase: 1.0,
            decrease: 0.5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            max_keys: 10_000,
        }
    }
}

/// What the limiter knows about one key.
#[derive(Debug, Clone)]
struct KeyState {
    /// The earliest instant the next call may go.
    next_at: u64,
    /// The adaptive rate, calls per second (used when no budget is known).
    rate: f64,
    /// The published budget: calls left, and the instant the window resets.
    budget: Option<(u64, u64)>,
    /// Calls let through whose answers have not been observed yet.
    in_flight: u64,
    /// Bumped at each decrease of the rate: the `429`s of calls let through
    /// before a decrease are the same congestion and do not decrease again.
    generation: u64,
    /// `429`s in a row that said nothing about when to come back.
    silent_refusals: u32,
    /// When the key was last used, for eviction.
    touched: u64,
}

/// Paces calls per key by what the provider's answers say.
///
/// Call [`until_ready`](Self::until_ready) before each call; it returns a
/// [`Permit`] to hand the answer to ([`Permit::observe`]). The limiter then:
///
/// - after a `429` (or a `503` with `Retry-After`) holds the key until the
///   `Retry-After` or the published reset, or for an exponential pause when
///   the answer says nothing, and halves its rate;
/// - when answers publish the calls left and the time to the reset
///   (`RateLimit`, `RateLimit-Remaining`/`-Reset`, `X-RateLimit-*`), lets
///   that many calls go (less the calls still in flight) and then holds the
///   key until the reset, so it usually never sees a `429`;
/// - when answers publish nothing, paces at an adaptive rate: additive
///   increase on each success, multiplicative decrease on a `429` (once per
///   congestion: the `429`s of calls that were already in flight do not
///   decrease it again).
///
/// Keys are whatever the caller groups calls by (a host, a host and a
/// token); at most [`Adaptive::max_keys`] are remembered, the least
/// recently used forgotten first.
#[derive(Debug)]
pub struct ReactiveLimiter<C: WaitClock = RealClock> {
    clock: C,
    config: Adaptive,
    keys: Mutex<HashMap<String, KeyState>>,
}

/// A call let through by [`ReactiveLimiter::until_ready`]: hand it the
/// answer with [`observe`](Permit::observe). Dropping it unobserved (the
/// call failed or was cancelled) only tells the limiter the call is no
/// longer in flight.
#[derive(Debug)]
#[must_use = "hand the answer to the permit with observe()"]
pub struct Permit<'l, C: WaitClock = RealClock> {
    limiter: &'l ReactiveLimiter<C>,
    key: String,
    generation: u64,
    done: bool,
}

impl<C: WaitClock> Permit<'_, C> {
    /// Learns from the call's answer: its status and headers.
    pub fn observe(mut self, status: u16, headers: &HeaderMap) {
        self.done = true;
        self.limiter
            .observe(&self.key, self.generation, status, headers);
    }
}

impl<C: WaitClock> Drop for Permit<'_, C> {
    fn drop(&mut self) {
        if !self.done {
            let mut keys = self.limiter.keys.lock();
            if let Some(state) = keys.get_mut(&self.key) {
                state.in_flight = state.in_flight.saturating_sub(1);
            }
        }
    }
}

impl ReactiveLimiter<RealClock> {
    /// A limiter on real time with the default [`Adaptive`] settings.
    pub fn new() -> Self {
        ReactiveLimiter::with_clock(RealClock::new(), Adaptive::default())
    }
}

impl Default for ReactiveLimiter<RealClock> {
    fn default() -> Self {
        ReactiveLimiter::new()
    }
}

impl<C: WaitClock> ReactiveLimiter<C> {
    /// A limiter on `clock` with `config`.
    pub fn with_clock(clock: C, config: Adaptive) -> Self {
        ReactiveLimiter {
            clock,
            config,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until a call for `key` may go, and lets it through.
    pub async fn until_ready(&self, key: &str) -> Permit<'_, C> {
        loop {
            match self.take(key) {
                Ok(generation) => {
                    return Permit {
                        limiter: self,
                        key: key.to_owned(),
                        generation,
                        done: false,
                    }
                }
                Err(at) => self.clock.sleep_until(at).await,
            }
        }
    }

    /// The rate `key` is paced at when the provider publishes no numbers
    /// (calls per second).
    pub fn rate(&self, key: &str) -> f64 {
        self.keys
            .lock()
            .get(key)
            .map_or(self.config.initial_rate, |s| s.rate)
    }

    /// Lets the next call of `key` through when its time has come (its
    /// generation), or says when it will.
    fn take(&self, key: &str) -> Result<u64, u64> {
        let now = self.clock.now();
        let mut keys = self.keys.lock();
        let state = self.state(&mut keys, key, now);
        if now < state.next_at {
            return Err(state.next_at);
        }
        let gap = match &mut state.budget {
            Some((_, reset_at)) if *reset_at <= now => {
                state.budget = None;
                rate_gap(state.rate)
            }
            Some((0, reset_at)) => return Err(*reset_at),
            Some((left, _)) => {
                *left -= 1;
                0
            }
            None => rate_gap(state.rate),
        };
        state.next_at = now.saturating_add(gap);
        state.in_flight += 1;
        Ok(state.generation)
    }

    fn observe(&self, key: &str, generation: u64, status: u16, headers: &HeaderMap) {
        let now = self.clock.now();
        let signals = Signals::read(headers, now / NANOS_PER_SEC);
        let config = self.config;
        let mut keys = self.keys.lock();
        let state = self.state(&mut keys, key, now);
        state.in_flight = state.in_flight.saturating_sub(1);
        let refused = status == 429 || (status == 503 && signals.retry_after.is_some());
        let reset_at = signals
            .reset
            .map(|d| now.saturating_add(duration_to_nanos(d)));
        match (signals.remaining, reset_at) {
            // The calls still in flight may not be counted in `left` yet,
            // and answers can arrive out of order: within a budget's
            // window, the smaller count and the later reset win.
            (Some(left), Some(at)) => {
                let left = left.saturating_sub(state.in_flight);
                state.budget = Some(match state.budget {
                    Some((known, known_at)) if known_at > now => {
                        (known.min(left), known_at.max(at))
                    }
                    _ => (left, at),
                });
            }
            _ if refused => state.budget = None,
            _ => {}
        }
        if refused {
            let wait = match signals.retry_after.or(signals.reset) {
                Some(wait) => {
                    state.silent_refusals = 0;
                    wait
                }
                None => {
                    let doubled = config
                        .backoff
                        .saturating_mul(1 << state.silent_refusals.min(16));
                    state.silent_refusals += 1;
                    doubled.min(config.max_backoff)
                }
            };
            state.next_at = state
                .next_at
                .max(now.saturating_add(duration_to_nanos(wait)));
            if generation == state.generation {
                state.rate = (state.rate * config.decrease).max(config.min_rate);
                state.generation += 1;
            }
        } else if (200..400).contains(&status) {
            state.silent_refusals = 0;
            if state.budget.is_none() {
                // Additive increase: `increase` calls per second gained per
                // second of successes (each success adds increase / rate).
                state.rate = (state.rate + config.increase / state.rate).min(config.max_rate);
            }
        }
    }

    fn state<'k>(
        &self,
        keys: &'k mut HashMap<String, KeyState>,
        key: &str,
        now: u64,
    ) -> &'k mut KeyState {
        if !keys.contains_key(key) && keys.len() >= self.config.max_keys {
            // A full scan, only when a new key arrives at the cap.
            if let Some(oldest) = keys
                .iter()
                .min_by_key(|(_, s)| s.touched)
                .map(|(k, _)| k.clone())
            {
                keys.remove(&oldest);
            }
        }
        let state = keys.entry(key.to_owned()).or_insert_with(|| KeyState {
            next_at: now,
            rate: self.config.initial_rate,
            budget: None,
            in_flight: 0,
            generation: 0,
            silent_refusals: 0,
            touched: now,
        });
        state.touched = now;
        state
    }
}

/// The gap between calls at `rate` calls per second, in nanoseconds.
fn rate_gap(rate: f64) -> u64 {
    if rate > 0.0 && rate.is_finite() {
        (NANOS_PER_SEC as f64 / rate) as u64
    } else {
        0
    }
}
