//! The Databox pair: `POST /increment` records a call already made,
//! `GET /delay` says when the next may go. Both work on a `stepped_window`
//! limit of `requests` per `interval` seconds under the key `id` — the same
//! key and limit as an inline `/v1/check` or `/v1/reserve` with that key, so
//! the two styles can be mixed.
//!
//! `timestamp` (when the call was made) is honoured as given when it is not
//! in the future; a future timestamp is clamped to now unless the server
//! trusts client time.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use tollgate_core::time::{nanos_to_ms_ceil, NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};

use crate::app::App;
use crate::decide::store;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::target::{duration, moment, store_key};
use crate::wire::{DelayBody, DelayQuery, IncrementBody, IncrementRequest};

/// `POST /increment`.
pub(crate) async fn increment<S: Store>(
    State(app): State<App<S>>,
    JsonBody(request): JsonBody<IncrementRequest>,
) -> Result<Json<IncrementBody>, ApiError> {
    let limit = databox_limit(request.interval, request.requests, request.step.as_deref())?;
    let key = store_key(&request.id, app.settings())?;
    let at = match request.timestamp {
        None => Moment::Now,
        Some(ms) => {
            let at = ms
                .checked_mul(NANOS_PER_MS)
                .filter(|&ns| ns < 1 << 62)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_request",
                        format!("timestamp {ms} is out of range"),
                    )
                })?;
            let now = store(&app, app.store().now().await)?;
            if at <= now || app.settings().trust_client_time {
                Moment::At(at)
            } else {
                Moment::At(now)
            }
        }
    };
    let count = store(
        &app,
        app.store()
            .record(
                LimitKey {
                    limit: &limit,
                    key: &key,
                },
                at,
                1,
            )
            .await,
    )?;
    Ok(Json(IncrementBody { count }))
}

/// `GET /delay`.
pub(crate) async fn delay<S: Store>(
    State(app): State<App<S>>,
    query: Result<Query<DelayQuery>, QueryRejection>,
) -> Result<Json<DelayBody>, ApiError> {
    let query = crate::extract::query(query)?;
    let limit = databox_limit(query.interval, query.requests, query.step.as_deref())?;
    let key = store_key(&query.id, app.settings())?;
    let at = moment(app.settings(), query.at_ms)?;
    let now = match at {
        Moment::At(t) => t,
        Moment::Now => store(&app, app.store().now().await)?,
    };
    let next = store(
        &app,
        app.store()
            .next_available(
                LimitKey {
                    limit: &limit,
                    key: &key,
                },
                Moment::At(now),
                1,
            )
            .await,
    )?;
    Ok(Json(DelayBody {
        next_at_ms: nanos_to_ms_ceil(next),
        delay_ms: nanos_to_ms_ceil(next.saturating_sub(now)),
    }))
}

fn databox_limit(interval: u64, requests: u64, step: Option<&str>) -> Result<Limit, ApiError> {
    let period = interval.checked_mul(NANOS_PER_SEC).ok_or_else(|| {
        ApiError::bad_request("invalid_rate", format!("interval {interval} s is too long"))
    })?;
    let rate = Rate::from_nanos(requests, period).map_err(|e| {
        ApiError::bad_request("invalid_rate", format!("{requests} per {interval} s: {e}"))
    })?;
    let mut limit = Limit::new(AlgorithmName::SteppedWindow, rate);
    limit.step = step.map(|s| duration("step", s)).transpose()?;
    limit.build()?;
    Ok(limit)
}
