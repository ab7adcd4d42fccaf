//! `GET /healthz`, `GET /readyz`, `GET /metrics`, and the answer for paths
//! that name nothing.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use tollgate_core::Store;

use crate::app::App;
use crate::error::ApiError;

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the store answers; `503` with the error otherwise.
pub(crate) async fn readyz<S: Store>(State(app): State<App<S>>) -> impl IntoResponse {
    let store_errors = app.metrics().store_errors();
    match app.store().now().await {
        Ok(_) => (
            StatusCode::OK,
            Json(json!({"status": "ready", "store_errors": store_errors})),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({"status": "unavailable", "store_errors": store_errors, "error": e.to_string()}),
            ),
        ),
    }
}

/// `GET /metrics`: the Prometheus text exposition.
pub(crate) async fn metrics<S: Store>(State(app): State<App<S>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics().encode(),
    )
}

/// Any other path.
pub(crate) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}
