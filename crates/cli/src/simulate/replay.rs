//! Replaying requests through one limit with no clock but the trace's.

use serde::Serialize;
use tollgate_core::time::{nanos_to_ms_ceil, NANOS_PER_MS};
use tollgate_core::{Decision, Limit, LimitError};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

use super::trace::TraceRequest;

/// One output line: the decision for one trace request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecisionLine {
    /// The request's time.
    pub at_ms: u64,
    /// The request's key.
    pub key: String,
    /// Whether it was admitted.
    pub allowed: bool,
    /// The configured maximum.
    pub limit: u64,
    /// Unit requests that would still be admitted.
    pub remaining: u64,
    /// Wait before the same request would be admitted, rounded up to ms.
    pub retry_after_ms: u64,
    /// Time until the key is untouched again, rounded up to ms.
    pub reset_after_ms: u64,
    /// Shaping delay (leaky_bucket), rounded up to ms.
    pub delay_ms: u64,
}

impl DecisionLine {
    fn new(request: &TraceRequest, decision: &Decision) -> Self {
        let ms =
            |d: std::time::Duration| nanos_to_ms_ceil(tollgate_core::time::duration_to_nanos(d));
        DecisionLine {
            at_ms: request.at_ms,
            key: request.key.clone(),
            allowed: decision.allowed,
            limit: decision.limit,
            remaining: decision.remaining,
            retry_after_ms: ms(decision.retry_after),
            reset_after_ms: ms(decision.reset_after),
            delay_ms: ms(decision.delay),
        }
    }
}

/// One limit over an in-memory store large enough that nothing is evicted
/// for any trace that fits in memory, so a replay is deterministic.
pub struct Replay {
    limiter: Limiter,
}

/// The store's cap for replays: far above what a trace can fill in practice.
const REPLAY_MEMORY: usize = 64 << 30;

impl Replay {
    /// A replay of `limit` over a fresh store.
    pub fn new(limit: &Limit) -> Result<Self, LimitError> {
        let store = MemoryStore::new(MemoryConfig {
            max_bytes: REPLAY_MEMORY,
            ..MemoryConfig::default()
        });
        Ok(Replay {
            limiter: store.limiter(limit)?,
        })
    }

    /// Decides one request at its own time.
    pub fn decide(&self, request: &TraceRequest) -> Result<DecisionLine, LimitError> {
        let now = request.at_ms.saturating_mul(NANOS_PER_MS);
        let decision = self
            .limiter
            .check(request.key.as_bytes(), now, request.cost)?;
        Ok(DecisionLine::new(request, &decision))
    }
}
