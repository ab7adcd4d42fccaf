//! `POST /v1/check`, `POST /v1/reserve`, `POST /v1/release` and
//! `POST /v1/settle`.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tollgate_core::{Moment, Store};

use crate::answer::Answer;
use crate::app::App;
use crate::decide;
use crate::error::ApiError;
use crate::extract::{decode, decode_decision, read_body};
use crate::target::{cost, moment, Target};
use crate::tickets::TicketId;
use crate::wire::{DecisionBody, ReleasedBody, SettleBody, SettleRequest};

/// `POST /v1/check`. Answers with the response itself, made here as
/// soon as the decision is: the answer is not handed up through the
/// router's futures first (it is larger than the response).
pub(crate) async fn check<S: Store>(State(app): State<App<S>>, body: Body) -> Response {
    let limit = app.settings().max_body_bytes;
    let read = read_body(body, limit).await;
    let check = match read.and_then(|bytes| CheckRequest::of(&app, bytes)) {
        Ok(check) => check,
        Err(error) => return error.into_response(),
    };
    let answer = if check.settle {
        // Boxed: its future holds a ticket's place and the rules path
        // besides, and the common check's future (boxed by the router
        // and copied on every request) need not be that large.
        Box::pin(decide::check_to_settle(
            &app,
            &check.target,
            check.at,
            check.cost,
        ))
        .await
    } else {
        decide::check(&app, &check.target, check.at, check.cost).await
    };
    app.metrics()
        .observe_latency("check", check.started.elapsed());
    answer.into_response()
}

/// What `/v1/check` decides, read from its body: the body and the decoded
/// request, which borrows it, are dropped before the decision is awaited,
/// so the handler's future does not hold them.
struct CheckRequest {
    target: Target,
    at: Moment,
    cost: u64,
    settle: bool,
    started: Instant,
}

impl CheckRequest {
    fn of<S: Store>(app: &App<S>, bytes: Bytes) -> Result<CheckRequest, ApiError> {
        let request = decode_decision(&bytes)?;
        let started = Instant::now();
        refuse_field("max_wait_ms", request.max_wait_ms.is_some(), "/v1/reserve")?;
        refuse_field("lease", request.lease.is_some(), "/v1/release")?;
        let target = Target::of(&request, app.settings())?;
        let at = moment(app.settings(), request.at_ms)?;
        Ok(CheckRequest {
            target,
            at,
            cost: cost(request.cost),
            settle: request.settle == Some(true),
            started,
        })
    }
}

/// `POST /v1/settle`.
pub(crate) async fn settle<S: Store>(
    State(app): State<App<S>>,
    body: Body,
) -> Result<Json<SettleBody>, ApiError> {
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let request: SettleRequest = decode(&bytes)?;
    let started = Instant::now();
    let Some(id) = TicketId::parse(&request.ticket) else {
        let shown: String = request.ticket.chars().take(64).collect();
        return Err(ApiError::bad_request(
            "invalid_ticket",
            format!("ticket {shown:?} is not a ticket: a ticket is 32 hex digits"),
        ));
    };
    if request.cost > MAX_SETTLE_COST {
        return Err(ApiError::bad_request(
            "cost_too_large",
            format!(
                "cost {} is over the largest a settle takes, {MAX_SETTLE_COST}",
                request.cost
            ),
        ));
    }
    let at = moment(app.settings(), request.at_ms)?;
    let settled = decide::settle(&app, id, at, request.cost).await;
    app.metrics().observe_latency("settle", started.elapsed());
    settled.map(Json)
}

/// The largest actual cost `/v1/settle` takes: 2^53 − 1, the largest
/// integer every JSON reader holds exactly. A debt that size is never paid
/// back anyway; a larger number is a client's mistake.
pub(crate) const MAX_SETTLE_COST: u64 = (1 << 53) - 1;

/// `POST /v1/reserve`.
pub(crate) async fn reserve<S: Store>(
    State(app): State<App<S>>,
    body: Body,
) -> Result<Answer<DecisionBody>, ApiError> {
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let request = decode_decision(&bytes)?;
    let started = Instant::now();
    refuse_field("lease", request.lease.is_some(), "/v1/release")?;
    refuse_field("settle", request.settle.is_some(), "/v1/check")?;
    let target = Target::of(&request, app.settings())?;
    let at = moment(app.settings(), request.at_ms)?;
    let max_wait = request.max_wait_ms.map(Duration::from_millis);
    let answer = decide::reserve(&app, &target, at, cost(request.cost), max_wait).await;
    app.metrics().observe_latency("reserve", started.elapsed());
    answer
}

/// `POST /v1/release`.
pub(crate) async fn release<S: Store>(
    State(app): State<App<S>>,
    body: Body,
) -> Result<Json<ReleasedBody>, ApiError> {
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let request = decode_decision(&bytes)?;
    for (field, given) in [
        ("cost", request.cost.is_some()),
        ("at_ms", request.at_ms.is_some()),
        ("max_wait_ms", request.max_wait_ms.is_some()),
        ("settle", request.settle.is_some()),
    ] {
        refuse_field(field, given, "/v1/check")?;
    }
    let Some(lease) = request.lease else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "\"lease\" is required: the lease a concurrency check handed out",
        ));
    };
    let target = Target::of(&request, app.settings())?;
    decide::release(&app, &target, lease).await.map(Json)
}

fn refuse_field(field: &str, given: bool, belongs_to: &str) -> Result<(), ApiError> {
    if given {
        Err(ApiError::bad_request(
            "invalid_request",
            format!("field \"{field}\" belongs to {belongs_to}, not to this route"),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use serde_json::{json, Value};
    use tollgate_core::time::{Clock, ManualClock};
    use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
    use tollgate_rules::RuleSet;
    use tower::ServiceExt;

    use crate::app::router;
    use crate::settings::Settings;

    use super::*;

    const RULES: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: second, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
";

    fn app_of(headers: bool) -> App<LocalStore> {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_000_000_000_000));
        let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
        let rules = RuleSet::from_yaml(RULES, "rules.yaml").unwrap();
        let settings = Settings {
            headers,
            ..Settings::default()
        };
        App::new(store, rules, None, settings)
    }

    /// The status, the headers' names in the order they are sent, and
    /// whether `content-length` is the body's.
    async fn check(app: &App<LocalStore>, body: &Value) -> (StatusCode, Vec<String>) {
        let request = Request::post("/v1/check")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router(app.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let names = response
            .headers()
            .iter()
            .map(|(name, _)| name.as_str().to_owned())
            .collect();
        let length = response.headers()["content-length"].clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(length, bytes.len().to_string().as_str());
        (status, names)
    }

    #[tokio::test]
    async fn answers_carry_their_headers_in_the_order_they_always_had() {
        let trio = [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ];
        let rate_limit = ["ratelimit-policy", "ratelimit"];
        let admitted: Vec<&str> = ["content-type"]
            .into_iter()
            .chain(rate_limit)
            .chain(trio)
            .chain(["content-length"])
            .collect();
        let rejected: Vec<&str> = ["content-type"]
            .into_iter()
            .chain(rate_limit)
            .chain(trio)
            .chain(["retry-after", "content-length"])
            .collect();
        let inline = json!({"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}});
        let rules = json!({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": "u"}]},
            {"entries": [{"key": "tenant", "value": "t"}]},
        ]});
        let unmatched = json!({"domain": "api", "descriptors": [
            {"entries": [{"key": "nothing"}]},
        ]});
        let app = app_of(true);
        for body in [&inline, &rules] {
            for (status, names) in [
                (StatusCode::OK, &admitted),
                (StatusCode::TOO_MANY_REQUESTS, &rejected),
            ] {
                let (answered, sent) = check(&app, body).await;
                assert_eq!(answered, status, "{body}");
                assert_eq!(&sent, names, "{body}");
            }
        }
        let plain = vec!["content-type", "content-length"];
        let (answered, sent) = check(&app, &unmatched).await;
        assert_eq!(answered, StatusCode::OK);
        assert_eq!(sent, plain);
        let without = app_of(false);
        for body in [&inline, &inline, &rules] {
            let (_, sent) = check(&without, body).await;
            assert_eq!(sent, plain, "{body}");
        }
    }
}
