//! `GET /healthz`, `GET /readyz`, `GET /metrics`, and the answer for paths
//! that name nothing.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use tollgate_core::{Store, StoreStatus};

use crate::app::App;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: `200` when the store answers, or when it does not but a
/// failure policy answers instead (`"status": "degraded"`, so that a
/// policy meant to keep serving is not defeated by the load balancer);
/// `503` when requests would fail.
pub(crate) async fn readyz<S: Store>(State(app): State<App<S>>) -> impl IntoResponse {
    let status = app.store().status().await;
    readiness(status, app.metrics().store_errors(), app.store().engine())
}

/// The `/readyz` answer for a store in `status`, with `store_errors`
/// failed store operations so far and the engine deciding in the store
/// (Redis: `module` or `lua`), when it has several.
pub(crate) fn readiness(
    status: StoreStatus,
    store_errors: u64,
    engine: Option<&'static str>,
) -> impl IntoResponse {
    let (code, mut body) = match status {
        StoreStatus::Ready => (
            StatusCode::OK,
            json!({"status": "ready", "store_errors": store_errors}),
        ),
        StoreStatus::Degraded(e) => (
            StatusCode::OK,
            json!({"status": "degraded", "store_errors": store_errors, "error": e}),
        ),
        StoreStatus::Unavailable(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unavailable", "store_errors": store_errors, "error": e}),
        ),
    };
    if let Some(engine) = engine {
        body["engine"] = json!(engine);
    }
    (code, Json(body))
}

/// `GET /metrics`: the Prometheus text exposition.
pub(crate) async fn metrics<S: Store>(State(app): State<App<S>>) -> impl IntoResponse {
    app.metrics().set_engine(app.store().engine());
    exposition(app.metrics())
}

/// The `/metrics` answer: every metric in the Prometheus text format.
pub(crate) fn exposition(metrics: &Metrics) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.encode(),
    )
}

/// Any other path.
pub(crate) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}
