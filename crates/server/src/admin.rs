//! [`admin_router`]: the gateway's admin port — `GET /healthz`,
//! `GET /readyz`, `GET /metrics` and `GET /v1/top`, answered exactly as the
//! decision service answers them. They need a port of their own because
//! every path of the gateway's main port belongs to the upstream.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use tollgate_core::Store;

use crate::error::ApiError;
use crate::extract::require_token;
use crate::metrics::Metrics;
use crate::routes::admin::{top_of, TopBody, TopQuery};
use crate::routes::health;

/// What the admin routes read: the store (for readiness), the metrics, and
/// the token `GET /v1/top` needs.
struct Admin<S> {
    store: Arc<S>,
    metrics: Arc<Metrics>,
    token: Option<Arc<str>>,
}

impl<S> Clone for Admin<S> {
    fn clone(&self) -> Self {
        Admin {
            store: Arc::clone(&self.store),
            metrics: Arc::clone(&self.metrics),
            token: self.token.clone(),
        }
    }
}

/// The admin routes over `store` and `metrics`:
///
/// - `GET /healthz`: `200` while the process answers;
/// - `GET /readyz`: `200` when `store` answers (or a failure policy
///   answers for it), `503` when decisions would fail;
/// - `GET /metrics`: the Prometheus text exposition of `metrics`;
/// - `GET /v1/top`: the keys a rule refused most lately (the decision
///   service's route), with `Authorization: Bearer <token>` when `token`
///   is set (the keys name users and addresses).
///
/// Readiness does not depend on the upstream: a gateway whose upstream is
/// down still answers (`502`) and should stay in its load balancer.
pub fn admin_router<S: Store>(
    store: Arc<S>,
    metrics: Arc<Metrics>,
    token: Option<String>,
) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .route("/v1/top", get(top::<S>))
        .fallback(health::not_found)
        .with_state(Admin {
            store,
            metrics,
            token: token.map(Arc::from),
        })
}

async fn top<S: Store>(
    State(admin): State<Admin<S>>,
    headers: HeaderMap,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TopBody>, ApiError> {
    require_token(admin.token.as_deref(), &headers)?;
    top_of(&admin.metrics, query)
}

async fn readyz<S: Store>(State(admin): State<Admin<S>>) -> impl IntoResponse {
    let status = admin.store.status().await;
    health::readiness(status, admin.metrics.store_errors(), admin.store.engine())
}

async fn metrics_text<S: Store>(State(admin): State<Admin<S>>) -> impl IntoResponse {
    admin.metrics.set_engine(admin.store.engine());
    health::exposition(&admin.metrics)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
    use tower::ServiceExt;

    use super::*;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_are_served_and_nothing_else() {
        let store = Arc::new(LocalStore::system(
            MemoryStore::new(MemoryConfig::default()),
        ));
        let metrics = Arc::new(Metrics::new());
        metrics.set_memory_used(1234);
        metrics.set_memory_unstored(7);
        metrics.set_memory_unstored(5);
        let router = admin_router(store, metrics, None);
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        let (status, body) = get(&router, "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("\"ready\""), "{body}");
        let (status, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("tollgate_memory_store_used_bytes 1234"),
            "{body}"
        );
        assert!(
            body.contains("tollgate_memory_store_unstored_total 7\n"),
            "{body}"
        );
        assert_eq!(get(&router, "/v1/check").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn top_offenders_are_served_with_the_token_only() {
        let store = Arc::new(LocalStore::system(
            MemoryStore::new(MemoryConfig::default()),
        ));
        let metrics = Arc::new(Metrics::new());
        for _ in 0..2 {
            metrics.count_refusal("api", "api.user", b"rtg1|k");
        }
        let router = admin_router(store, metrics, Some("s3cret".to_owned()));
        let path = "/v1/top?domain=api&rule=api.user";
        assert_eq!(get(&router, path).await.0, StatusCode::UNAUTHORIZED);
        let request = Request::get(path)
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["keys"],
            serde_json::json!([{"key": "tg1|k", "refused": 2, "error": 0}])
        );
    }
}
