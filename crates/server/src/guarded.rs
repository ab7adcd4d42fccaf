//! [`Guarded`]: a shared store wrapped in the failure policy of SPEC §8,
//! chosen with `--on-store-error`.
//!
//! When the shared store fails (unreachable, or no answer within its
//! timeout), `fail_closed` passes the error on (HTTP `503
//! store_unavailable`, gRPC `UNAVAILABLE`); `fail_open` admits without
//! counting; `local` decides with this process's own memory store, which
//! keeps its counts across the outage and is used again on the next one.
//! Decisions made by a policy are marked [`Decision::degraded`] (body
//! `"degraded": true`, header `X-RateLimit-Degraded: 1`) and counted in
//! `tollgate_store_errors_total`. Every call goes to the shared store
//! first, so decisions come back from it as soon as it answers again; the
//! store's own timeout bounds how long a call can take. Errors of the
//! request itself (a cost that can never fit, …) are never masked.

use std::str::FromStr;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tollgate_core::algorithm::Settled;
use tollgate_core::{Decision, LimitKey, Moment, MultiReservation, Store, StoreError, StoreStatus};
use tollgate_memory::LocalStore;

/// What to do when the shared store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// Admit, count nothing, mark the answer degraded.
    FailOpen,
    /// Fail the request (`503` / `UNAVAILABLE`).
    FailClosed,
    /// Decide with the local memory store, mark the answer degraded.
    Local,
}

impl FromStr for OnStoreError {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fail_open" => Ok(OnStoreError::FailOpen),
            "fail_closed" => Ok(OnStoreError::FailClosed),
            "local" => Ok(OnStoreError::Local),
            other => Err(format!(
                "unknown store error policy {other:?}: expected fail_open, fail_closed or local"
            )),
        }
    }
}

impl OnStoreError {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnStoreError::FailOpen => "fail_open",
            OnStoreError::FailClosed => "fail_closed",
            OnStoreError::Local => "local",
        }
    }
}

/// `primary` with a failure policy and a local fallback.
pub struct Guarded<S> {
    primary: S,
    fallback: LocalStore,
    policy: OnStoreError,
    outages: Counter,
}

/// What a failed primary call turns into.
enum Fallback {
    /// Pass the error on.
    Fail(StoreError),
    /// Answer as `fail_open` does.
    Open,
    /// Ask the local store.
    Local,
}

impl<S: Store> Guarded<S> {
    /// `primary` under `policy`; `fallback` answers under `local`; policy
    /// decisions are counted in `outages`.
    pub fn new(primary: S, fallback: LocalStore, policy: OnStoreError, outages: Counter) -> Self {
        Guarded {
            primary,
            fallback,
            policy,
            outages,
        }
    }

    /// The shared store.
    pub fn primary(&self) -> &S {
        &self.primary
    }

    /// The local fallback store.
    pub fn fallback(&self) -> &LocalStore {
        &self.fallback
    }

    /// The policy.
    pub fn policy(&self) -> OnStoreError {
        self.policy
    }

    fn on_error(&self, error: StoreError) -> Fallback {
        if !error.is_outage() {
            return Fallback::Fail(error);
        }
        match self.policy {
            OnStoreError::FailClosed => Fallback::Fail(error),
            policy => {
                self.outages.inc();
                tracing::warn!(%error, policy = policy.as_str(), "shared store failed; the failure policy decides");
                match policy {
                    OnStoreError::FailOpen => Fallback::Open,
                    _ => Fallback::Local,
                }
            }
        }
    }
}

/// An admission that counted nothing.
fn open_decision(request: &LimitKey<'_>) -> Decision {
    let limit = request
        .limit
        .build()
        .map_or(request.limit.rate.limit(), |a| a.limit());
    Decision {
        allowed: true,
        limit,
        remaining: limit,
        degraded: true,
        ..Decision::default()
    }
}

fn degraded(mut decisions: Vec<Decision>) -> Vec<Decision> {
    for d in &mut decisions {
        d.degraded = true;
    }
    decisions
}

impl<S: Store> Store for Guarded<S> {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        match self.primary.check(requests, at, cost).await {
            Ok(decisions) => Ok(decisions),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => Ok(requests.iter().map(open_decision).collect()),
                Fallback::Local => self.fallback.check(requests, at, cost).await.map(degraded),
            },
        }
    }

    async fn check_one(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        match self.primary.check_one(request, at, cost).await {
            Ok(decision) => Ok(decision),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => Ok(open_decision(&request)),
                Fallback::Local => {
                    let mut decision = self.fallback.check_one(request, at, cost).await?;
                    decision.degraded = true;
                    Ok(decision)
                }
            },
        }
    }

    async fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> Result<MultiReservation, StoreError> {
        match self.primary.reserve(requests, at, cost, max_wait).await {
            Ok(reservation) => Ok(reservation),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => Ok(MultiReservation {
                    wait: Duration::ZERO,
                    booked: true,
                    retry_after: Duration::ZERO,
                    decisions: requests.iter().map(open_decision).collect(),
                }),
                Fallback::Local => {
                    let mut reservation =
                        self.fallback.reserve(requests, at, cost, max_wait).await?;
                    reservation.decisions = degraded(reservation.decisions);
                    Ok(reservation)
                }
            },
        }
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        match self.primary.next_available(request, at, cost).await {
            Ok(instant) => Ok(instant),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => match at {
                    Moment::At(t) => Ok(t),
                    Moment::Now => self.fallback.now().await,
                },
                Fallback::Local => self.fallback.next_available(request, at, cost).await,
            },
        }
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        match self.primary.record(request, at, cost).await {
            Ok(count) => Ok(count),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => Ok(cost),
                Fallback::Local => self.fallback.record(request, at, cost).await,
            },
        }
    }

    /// A settle is never answered by a policy: it changes the shared
    /// store or fails (the estimate then stands), since a fallback that
    /// never counted the estimate has nothing to settle.
    async fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> Result<Settled, StoreError> {
        self.primary
            .settle(request, admitted_at, at, estimate, actual)
            .await
    }

    fn settles(&self) -> bool {
        self.primary.settles()
    }

    async fn release(&self, request: LimitKey<'_>, lease: u64) -> Result<bool, StoreError> {
        match self.primary.release(request, lease).await {
            Ok(held) => Ok(held),
            Err(e) => match self.on_error(e) {
                Fallback::Fail(e) => Err(e),
                Fallback::Open => Ok(false),
                Fallback::Local => self.fallback.release(request, lease).await,
            },
        }
    }

    /// An administrative reset is never answered by a policy: it fails when
    /// the shared store does. The local store forgets the key too.
    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        let _ = self.fallback.reset(key).await;
        self.primary.reset(key).await
    }

    async fn now(&self) -> Result<u64, StoreError> {
        match self.primary.now().await {
            Ok(now) => Ok(now),
            Err(e) if self.policy == OnStoreError::FailClosed => Err(e),
            Err(_) => self.fallback.now().await,
        }
    }

    fn engine(&self) -> Option<&'static str> {
        self.primary.engine()
    }

    async fn status(&self) -> StoreStatus {
        match self.primary.status().await {
            StoreStatus::Ready => StoreStatus::Ready,
            StoreStatus::Unavailable(e) | StoreStatus::Degraded(e)
                if self.policy == OnStoreError::FailClosed =>
            {
                StoreStatus::Unavailable(e)
            }
            StoreStatus::Unavailable(e) | StoreStatus::Degraded(e) => StoreStatus::Degraded(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tollgate_core::time::ManualClock;
    use tollgate_core::{AlgorithmName, Limit, Rate};
    use tollgate_memory::{MemoryConfig, MemoryStore};
    use tollgate_testkit::{ready, DownStore};

    use super::*;

    #[test]
    fn one_limit_is_decided_as_a_list_of_one_under_every_policy() {
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(2).unwrap());
        let request = LimitKey {
            limit: &limit,
            key: b"k",
        };
        for policy in [
            OnStoreError::FailClosed,
            OnStoreError::FailOpen,
            OnStoreError::Local,
        ] {
            // Two stores in the same state: one asked for a list, one for one limit.
            let guarded = || {
                let local = LocalStore::new(
                    MemoryStore::new(MemoryConfig::default()),
                    Arc::new(ManualClock::new(0)),
                );
                Guarded::new(DownStore::new("down"), local, policy, Counter::default())
            };
            let (listed, single) = (guarded(), guarded());
            for _ in 0..3 {
                let as_list = ready(listed.check(&[request], Moment::Now, 1))
                    .map(|d| d.first().copied().unwrap_or_default());
                let alone = ready(single.check_one(request, Moment::Now, 1));
                assert_eq!(alone, as_list, "{}", policy.as_str());
            }
            assert_eq!(single.outages.get(), listed.outages.get());
        }
    }
}
