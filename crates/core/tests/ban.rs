//! A ban around every algorithm, on random traces with an injected clock,
//! against a model kept beside it: the plain algorithm deciding while the
//! key is not banned, and the strikes kept as a list of instants. The ban
//! answers as the model says (refused with the time left while banned, the
//! limit's own answer otherwise, the ban's on the strike that starts it),
//! changes nothing while banned, and its `retry_after` is the truth: the
//! ban is over exactly then.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::ban::{Ban, Banned};
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::{Algorithm, AlgorithmName, AnyAlgorithm, BanRefusal, Limit, Rate};

const MS: u64 = NANOS_PER_MS;
const START: u64 = 1_600_000_000_000_000_000;

/// One step of a trace: `dt` ms after the last, a check or a reservation
/// of `cost`.
#[derive(Debug, Clone, Copy)]
struct Step {
    dt: u64,
    cost: u64,
    reserve: bool,
}

/// The ban as the model keeps it: every strike of the open window.
#[derive(Debug, Default)]
struct Model {
    strikes: Vec<u64>,
    until: u64,
}

impl Model {
    fn strike(&mut self, ban: &Ban, now: u64) -> bool {
        let within = ban.within().as_nanos() as u64;
        if self
            .strikes
            .first()
            .is_some_and(|&first| now >= first + within)
        {
            self.strikes.clear();
        }
        self.strikes.push(now);
        if self.strikes.len() as u64 >= ban.after() {
            self.strikes.clear();
            self.until = now + ban.duration().as_nanos() as u64;
            return true;
        }
        false
    }
}

fn follows_the_model<A: Algorithm>(alg: A, ban: Ban, steps: &[Step]) -> Result<(), TestCaseError> {
    let banned = Banned::new(alg, ban);
    let plain = banned.limit();
    let mut state = banned.new_state();
    let mut model_state = plain.new_state();
    let mut model = Model::default();
    let mut now = START;
    let reserves = plain.slot(&plain.new_state(), now, 0).is_some();
    for (i, step) in steps.iter().enumerate() {
        now += step.dt * MS;
        let cost = step.cost.min(plain.capacity());
        let at = format!("step {i} at +{} ms", (now - START) / MS);
        if step.reserve && reserves {
            let got = banned.reserve(&mut state, now, cost, Some(Duration::from_millis(50)));
            let open = now.max(model.until);
            let slot = plain.slot(&model_state, open, cost).unwrap();
            let wait = slot.wait + (open - now);
            let fits = cost == 0 || wait <= 50 * MS;
            if fits && cost > 0 {
                plain.book(&mut model_state, open, slot, cost);
            }
            prop_assert_eq!(got.unwrap().decision.allowed, fits, "reserve, {}", at);
        } else {
            let got = banned.check(&mut state, now, cost).unwrap();
            if now < model.until {
                let left = Duration::from_nanos(model.until - now);
                prop_assert_eq!(got.allowed, cost == 0, "banned, {}", at);
                prop_assert_eq!(got.remaining, 0, "banned, {}", at);
                prop_assert_eq!(got.ban, Some(BanRefusal::InForce), "banned, {}", at);
                if cost > 0 {
                    prop_assert_eq!(got.retry_after, left, "banned, {}", at);
                }
            } else {
                let mut want = plain.check(&mut model_state, now, cost).unwrap();
                if !want.allowed && cost > 0 && model.strike(&ban, now) {
                    want.remaining = 0;
                    want.retry_after = ban.duration();
                    want.reset_after = want.reset_after.max(ban.duration());
                    want.ban = Some(BanRefusal::Started);
                }
                prop_assert_eq!(got, want, "{}", at);
            }
        }
        prop_assert_eq!(
            format!("{:?}", state.limit),
            format!("{model_state:?}"),
            "limit state, {}",
            at
        );
        prop_assert_eq!(state.ban.until, model.until, "ban end, {}", at);
        prop_assert_eq!(state.ban.strikes, model.strikes.len() as u64, "{}", at);
        // The truth of retry_after: the ban is over exactly when it says.
        if now < model.until {
            prop_assert!(banned.ban().is_banned(&state.ban, model.until - 1));
            prop_assert!(!banned.ban().is_banned(&state.ban, model.until));
            prop_assert!(banned.expires_at(&state) >= model.until);
            prop_assert!(banned.debt(&state, now).refusing);
        }
    }
    Ok(())
}

fn run(limit: Limit, ban: Ban, steps: &[Step]) -> Result<(), TestCaseError> {
    match limit.build().unwrap() {
        AnyAlgorithm::TokenBucket(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::WideTokenBucket(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::Gcra(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::LeakyBucket(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::FixedWindow(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::SlidingWindowLog(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::SlidingWindowCounter(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::SteppedWindow(a) => follows_the_model(a, ban, steps),
        AnyAlgorithm::Concurrency(a) => follows_the_model(a, ban, steps),
    }
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![Just(0u64), 0..20u64, 0..400u64],
        prop_oneof![4 => Just(1u64), 1 => 0..4u64],
        prop::bool::weighted(0.15),
    )
        .prop_map(|(dt, cost, reserve)| Step { dt, cost, reserve });
    prop::collection::vec(step, 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_algorithm_with_a_ban_follows_the_model(
        algorithm in prop::sample::select(AlgorithmName::ALL.to_vec()),
        n in 1..5u64,
        period_ms in 10..500u64,
        after in 1..4u64,
        within_ms in 1..1_000u64,
        for_ms in 1..2_000u64,
        steps in steps(),
    ) {
        let rate = Rate::from_nanos(n, period_ms * MS).unwrap();
        let limit = Limit::new(algorithm, rate);
        let ban = Ban::new(
            after,
            Duration::from_millis(within_ms),
            Duration::from_millis(for_ms),
        )
        .unwrap();
        run(limit, ban, &steps)?;
    }
}
