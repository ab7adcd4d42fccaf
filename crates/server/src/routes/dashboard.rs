//! `GET /dashboard`, `POST /dashboard/login`, `GET /v1/dashboard` and
//! `POST /v1/dashboard/peek` on the decision service's port: the state of
//! [`App`] handed to `dashboard`.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use tollgate_core::Store;

use crate::app::App;
use crate::dashboard::peek::PeekBody;
use crate::dashboard::{self, page, DashboardBody, Source};
use crate::error::ApiError;
use crate::extract::{decode_decision, read_body, require_admin};

fn source<S: Store>(app: &App<S>) -> Source<'_, S> {
    Source {
        store: app.store(),
        metrics: app.metrics(),
        rules: app.rules(),
        rules_path: app.rules_path(),
        settings: app.settings(),
        overrides: Some(app.overrides()),
    }
}

/// `GET /dashboard`.
pub(crate) async fn page<S: Store>(State(app): State<App<S>>, headers: HeaderMap) -> Response {
    page::page(app.settings().admin_token.as_deref(), &headers)
}

/// `POST /dashboard/login`.
pub(crate) async fn login<S: Store>(
    State(app): State<App<S>>,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    page::login(app.settings().admin_token.as_deref(), &bytes)
}

/// `GET /v1/dashboard`.
pub(crate) async fn data<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
) -> Result<Json<DashboardBody>, ApiError> {
    require_admin(&app, &headers)?;
    Ok(Json(dashboard::data(&source(&app)).await))
}

/// `POST /v1/dashboard/peek`.
pub(crate) async fn peek<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<PeekBody>, ApiError> {
    require_admin(&app, &headers)?;
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let request = decode_decision(&bytes)?;
    dashboard::peek::peek(&source(&app), &request)
        .await
        .map(Json)
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
    rate_limit: {name: per-user, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 3}
  - key: path
    value: /healthz
    rate_limit: {unlimited: true}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
";

    /// 1,000 s after the epoch: the store's clock, and `at_ms` 1,000,000.
    const T0_NS: u64 = 1_000_000_000_000;

    fn app(token: Option<&str>) -> App<LocalStore> {
        app_with(Settings {
            admin_token: token.map(ToOwned::to_owned),
            ..Settings::default()
        })
    }

    fn app_with(settings: Settings) -> App<LocalStore> {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0_NS));
        let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
        let rules = RuleSet::from_yaml(RULES, "rules.yaml").unwrap();
        App::new(store, rules, None, settings)
    }

    async fn call(app: &App<LocalStore>, request: Request<Body>) -> (StatusCode, Value) {
        let response = router(app.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn post(path: &str, body: &Value) -> Request<Body> {
        Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    fn user(name: &str) -> Value {
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": name}]}]})
    }

    #[tokio::test]
    async fn the_data_lists_every_rule_with_its_counts_and_limits_in_words() {
        let app = app(None);
        // A sample before any decision: the counts since are the series'
        // last point (the history's own tests cover its times).
        app.metrics().sample(1_000);
        for _ in 0..5 {
            call(&app, post("/v1/check", &user("mallory"))).await;
        }
        for tenant in ["acme", "globex"] {
            let tenant = json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": tenant}]}]});
            call(&app, post("/v1/check", &tenant)).await;
        }
        let (status, body) = call(
            &app,
            Request::get("/v1/dashboard").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let rules = body["rules"].as_array().unwrap();
        let ids: Vec<&str> = rules.iter().map(|r| r["rule"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            ["api.user", "api.path_/healthz", "api.tenant"],
            "{body}"
        );
        let per_user = &rules[0];
        assert_eq!(per_user["limits"], json!(["3 burst, 10/s, token bucket"]));
        assert_eq!(per_user["name"], "per-user");
        assert_eq!(per_user["source"], "rules.yaml:3");
        assert_eq!(
            per_user["counts"],
            json!({"allowed": 3, "rejected": 2, "shadow_rejected": 0, "near_limit": 1})
        );
        assert_eq!(per_user["allowed_series"], json!([3]), "{body}");
        assert_eq!(per_user["rejected_series"], json!([2]), "{body}");
        assert!(
            per_user["rates"]["allowed"].as_f64().unwrap() > 0.0,
            "{body}"
        );
        assert_eq!(rules[1]["limits"], json!(["unlimited"]));
        // Counted per value (one label per value in /metrics): the row adds
        // its values up.
        assert_eq!(rules[2]["per_value"], true);
        assert_eq!(rules[2]["counts"]["allowed"], 2, "{body}");
        assert_eq!(body["store"]["kind"], "memory");
        assert_eq!(body["store"]["status"], "ready");
        assert_eq!(
            body["rules_file"],
            json!({"path": null, "last_reload": null})
        );
        assert_eq!(body["latency"][0]["route"], "check");
        assert_eq!(body["latency"][0]["count"], 7);
    }

    #[tokio::test]
    async fn the_store_is_named_as_the_wiring_says() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0_NS));
        let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
        let metrics = crate::metrics::Metrics::new().with_store_kind("redis");
        let app = App::with_metrics(
            store,
            RuleSet::default(),
            None,
            Settings::default(),
            metrics,
        );
        let (_, body) = call(
            &app,
            Request::get("/v1/dashboard").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(body["store"]["kind"], "redis", "{body}");
    }

    #[tokio::test]
    async fn a_peek_shows_each_limit_and_counts_nothing() {
        let app = app(None);
        for _ in 0..4 {
            call(&app, post("/v1/check", &user("mallory"))).await;
        }
        let question = json!({
            "domain": "api",
            "descriptors": [
                {"entries": [{"key": "user", "value": "mallory"}]},
                {"entries": [{"key": "nothing", "value": "x"}]},
                {"entries": [{"key": "path", "value": "/healthz"}]},
            ],
        });
        for _ in 0..3 {
            let (status, body) = call(&app, post("/v1/dashboard/peek", &question)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["allowed"], false);
            let limits = body["limits"].as_array().unwrap();
            assert_eq!(limits.len(), 3, "{body}");
            assert_eq!(limits[0]["rule"], "api.user");
            assert_eq!(limits[0]["remaining"], 0);
            // One token every 100 ms.
            assert_eq!(limits[0]["retry_after_ms"], 100, "{body}");
            assert_eq!(limits[0]["reset_after_ms"], 300, "{body}");
            assert_eq!(limits[1]["matched"], false);
            assert_eq!(limits[2]["unlimited"], true);
        }
        let counted = app.metrics().rule_trends(0);
        assert_eq!(counted[0].counts.allowed + counted[0].counts.rejected, 4);
        // Inline, and a fresh key: it would pass.
        let inline = json!({"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}, "cost": 1});
        let (status, body) = call(&app, post("/v1/dashboard/peek", &inline)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["allowed"], true);
        assert_eq!(body["limits"][0]["descriptor"], Value::Null);
        assert_eq!(body["limits"][0]["retry_after_ms"], 0);
        assert_eq!(body["limits"][0]["remaining"], 1);
    }

    #[tokio::test]
    async fn a_peek_combines_verdicts_under_the_global_shadow_and_quota_modes() {
        let both = json!({
            "domain": "api",
            "descriptors": [
                {"entries": [{"key": "user", "value": "mallory"}]},
                {"entries": [{"key": "tenant", "value": "acme"}]},
            ],
        });
        let modes = [
            // (shadow, quota mode, allowed with mallory's bucket empty)
            (false, false, false),
            // One quota rule of two refusing does not refuse the request.
            (false, true, true),
            (true, false, true),
        ];
        for (shadow, quota_mode, allowed) in modes {
            let app = app_with(Settings {
                shadow,
                quota_mode,
                ..Settings::default()
            });
            for _ in 0..4 {
                call(&app, post("/v1/check", &user("mallory"))).await;
            }
            let (status, body) = call(&app, post("/v1/dashboard/peek", &both)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(
                body["allowed"], allowed,
                "shadow {shadow}, quota {quota_mode}: {body}"
            );
            for limit in body["limits"].as_array().unwrap() {
                assert_eq!(limit["quota"], quota_mode, "{body}");
                assert_eq!(limit["shadow"], shadow, "{body}");
            }
            assert_eq!(body["limits"][0]["remaining"], 0, "{body}");
            // Every quota rule refusing refuses the request.
            let (_, alone) = call(&app, post("/v1/dashboard/peek", &user("mallory"))).await;
            assert_eq!(
                alone["allowed"], shadow,
                "shadow {shadow}, quota {quota_mode}: {alone}"
            );
        }
    }

    #[tokio::test]
    async fn a_peek_on_a_store_that_is_down_is_a_503_counted_as_a_store_error() {
        let app = App::new(
            tollgate_testkit::DownStore::new("down"),
            RuleSet::default(),
            None,
            Settings::default(),
        );
        let inline = json!({"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}});
        let response = router(app.clone())
            .oneshot(post("/v1/dashboard/peek", &inline))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(app.metrics().store_errors(), 1);
    }

    #[tokio::test]
    async fn bad_peeks_are_refused_as_checks_are() {
        let app = app(None);
        let cases = [
            (
                json!({"domain": "nope", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}),
                "unknown_domain",
            ),
            (
                json!({"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}, "cost": 5}),
                "cost_too_large",
            ),
            (
                json!({"key": "k", "limit": {"algorithm": "nope", "rate": "1/s"}}),
                "unknown_algorithm",
            ),
            (json!({"key": "k"}), "invalid_request"),
            (
                json!({"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}, "lease": 1}),
                "invalid_request",
            ),
            (json!({"unknown": 1}), "malformed_json"),
        ];
        for (body, code) in cases {
            let (status, answer) = call(&app, post("/v1/dashboard/peek", &body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        }
        let big = "x".repeat(app.settings().max_body_bytes + 1);
        let request = Request::post("/v1/dashboard/peek")
            .body(Body::from(big))
            .unwrap();
        assert_eq!(call(&app, request).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn with_a_token_every_dashboard_route_needs_it() {
        let app = app(Some("s3cret"));
        let page = router(app.clone())
            .oneshot(Request::get("/dashboard").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
        let html = page.into_body().collect().await.unwrap().to_bytes();
        let html = String::from_utf8(html.to_vec()).unwrap();
        assert!(html.contains("<form id=\"login\"") && !html.contains("id=\"rules\""));
        let (status, _) = call(
            &app,
            Request::get("/v1/dashboard").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _) = call(&app, post("/v1/dashboard/peek", &user("a"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let cookie = format!("tollgate_admin={}", crate::extract::cookie_value("s3cret"));
        let request = Request::get("/v1/dashboard")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(&app, request).await.0, StatusCode::OK);
        let request = Request::get("/dashboard")
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(&app, request).await.0, StatusCode::OK);
    }
}
