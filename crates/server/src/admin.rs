//! [`admin_router`]: the gateway's admin port — `GET /healthz`,
//! `GET /readyz`, `GET /metrics`, `GET /v1/top`, the dashboard and, when
//! given a table, `/v1/overrides/{domain}`, answered exactly as the
//! decision service answers them (the override routes are the same
//! handlers). They need a port of their own because every path of the
//! gateway's main port belongs to the upstream.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tollgate_core::Store;
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::RuleSet;

use crate::dashboard::peek::PeekBody;
use crate::dashboard::{self, page, DashboardBody, Source};
use crate::error::ApiError;
use crate::extract::{decode_decision, read_body, require_token};
use crate::metrics::Metrics;
use crate::override_store::OverrideBackend;
use crate::routes::admin::{top_of, TopBody, TopQuery};
use crate::routes::{health, overrides};
use crate::settings::Settings;

/// What the admin port needs beside the store and the metrics.
pub struct AdminOptions {
    /// The token `GET /v1/top` and the dashboard need; open when `None`.
    pub token: Option<String>,
    /// The rules in force (swapped whole on each reload), for the
    /// dashboard.
    pub rules: Arc<ArcSwap<RuleSet>>,
    /// Where the rules are loaded from, if anywhere.
    pub rules_path: Option<PathBuf>,
    /// The global shadow mode the rules are enforced under, so that the
    /// dashboard's peek answers as the enforcement would.
    pub shadow: bool,
    /// The global quota mode, for the same reason.
    pub quota_mode: bool,
    /// The runtime overrides the port manages (`PUT`, `GET` and `DELETE
    /// /v1/overrides/{domain}`, behind the token) and the dashboard lists;
    /// `None`: no override routes.
    pub overrides: Option<Arc<OverrideTable>>,
    /// Where a change is written first when the overrides are shared
    /// (Redis), as the decision service does.
    pub override_backend: Option<Arc<dyn OverrideBackend>>,
}

impl AdminOptions {
    /// No rules, and `token`.
    pub fn new(token: Option<String>) -> AdminOptions {
        AdminOptions {
            token,
            rules: Arc::new(ArcSwap::from_pointee(RuleSet::default())),
            rules_path: None,
            shadow: false,
            quota_mode: false,
            overrides: None,
            override_backend: None,
        }
    }
}

/// What the admin routes read: the store (for readiness), the metrics, the
/// rules, and the token `GET /v1/top` and the dashboard need.
struct Admin<S> {
    store: Arc<S>,
    metrics: Arc<Metrics>,
    token: Option<Arc<str>>,
    rules: Arc<ArcSwap<RuleSet>>,
    rules_path: Option<Arc<PathBuf>>,
    /// Defaults, with the token: the peek validates requests by them.
    settings: Arc<Settings>,
    /// The runtime overrides (empty when the port was given none).
    overrides: Arc<OverrideTable>,
    /// Whether the port was given them.
    has_overrides: bool,
    override_backend: Option<Arc<dyn OverrideBackend>>,
}

impl<S> Clone for Admin<S> {
    fn clone(&self) -> Self {
        Admin {
            store: Arc::clone(&self.store),
            metrics: Arc::clone(&self.metrics),
            token: self.token.clone(),
            rules: Arc::clone(&self.rules),
            rules_path: self.rules_path.clone(),
            settings: Arc::clone(&self.settings),
            overrides: Arc::clone(&self.overrides),
            has_overrides: self.has_overrides,
            override_backend: self.override_backend.clone(),
        }
    }
}

impl<S: Store> Admin<S> {
    fn source(&self) -> Source<'_, S> {
        Source {
            store: &self.store,
            metrics: &self.metrics,
            rules: self.rules.load_full(),
            rules_path: self.rules_path.as_deref().map(PathBuf::as_path),
            settings: &self.settings,
            overrides: self.has_overrides.then_some(&*self.overrides),
        }
    }
}

impl<S: Store> overrides::Host for Admin<S> {
    fn admin_token(&self) -> Option<&str> {
        self.token.as_deref()
    }
    fn settings(&self) -> &Settings {
        &self.settings
    }
    fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }
    fn table(&self) -> &Arc<OverrideTable> {
        &self.overrides
    }
    fn backend(&self) -> Option<&Arc<dyn OverrideBackend>> {
        self.override_backend.as_ref()
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The admin routes over `store` and `metrics`:
///
/// - `GET /healthz`: `200` while the process answers;
/// - `GET /readyz`: `200` when `store` answers (or a failure policy
///   answers for it), `503` when decisions would fail;
/// - `GET /metrics`: the Prometheus text exposition of `metrics`;
/// - `GET /v1/top`: the keys a rule refused most lately (the decision
///   service's route), with the admin token when `options.token` is set
///   (the keys name users and addresses): `Authorization: Bearer <token>`
///   or the dashboard's login cookie;
/// - `GET /dashboard`, `POST /dashboard/login`, `GET /v1/dashboard` and
///   `POST /v1/dashboard/peek`: the live dashboard, behind the same token;
/// - with `options.overrides`, `PUT`, `GET` and `DELETE
///   /v1/overrides/{domain}`: the runtime overrides, behind the same
///   token, as the decision service serves them (written to
///   `options.override_backend` first when there is one).
///
/// Readiness does not depend on the upstream: a gateway whose upstream is
/// down still answers (`502`) and should stay in its load balancer.
pub fn admin_router<S: Store>(
    store: Arc<S>,
    metrics: Arc<Metrics>,
    options: AdminOptions,
) -> Router {
    let settings = Settings {
        admin_token: options.token.clone(),
        shadow: options.shadow,
        quota_mode: options.quota_mode,
        ..Settings::default()
    };
    let has_overrides = options.overrides.is_some();
    let mut router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .route("/v1/top", get(top::<S>))
        .route("/v1/dashboard", get(dashboard_data::<S>))
        .route("/v1/dashboard/peek", post(dashboard_peek::<S>))
        .route("/dashboard", get(dashboard_page::<S>))
        .route("/dashboard/login", post(dashboard_login::<S>));
    if has_overrides {
        router = router.route(
            "/v1/overrides/{domain}",
            get(overrides::list::<Admin<S>>)
                .put(overrides::put::<Admin<S>>)
                .delete(overrides::remove::<Admin<S>>),
        );
    }
    router.fallback(health::not_found).with_state(Admin {
        store,
        metrics,
        token: options.token.map(Arc::from),
        rules: options.rules,
        rules_path: options.rules_path.map(Arc::new),
        settings: Arc::new(settings),
        overrides: options.overrides.unwrap_or_default(),
        has_overrides,
        override_backend: options.override_backend,
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

async fn dashboard_page<S: Store>(State(admin): State<Admin<S>>, headers: HeaderMap) -> Response {
    page::page(admin.token.as_deref(), &headers)
}

async fn dashboard_login<S: Store>(
    State(admin): State<Admin<S>>,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, admin.settings.max_body_bytes).await?;
    page::login(admin.token.as_deref(), &bytes)
}

async fn dashboard_data<S: Store>(
    State(admin): State<Admin<S>>,
    headers: HeaderMap,
) -> Result<Json<DashboardBody>, ApiError> {
    require_token(admin.token.as_deref(), &headers)?;
    Ok(Json(dashboard::data(&admin.source()).await))
}

async fn dashboard_peek<S: Store>(
    State(admin): State<Admin<S>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<PeekBody>, ApiError> {
    require_token(admin.token.as_deref(), &headers)?;
    let bytes = read_body(body, admin.settings.max_body_bytes).await?;
    let request = decode_decision(&bytes)?;
    dashboard::peek::peek(&admin.source(), &request)
        .await
        .map(Json)
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
        let router = admin_router(store, metrics, AdminOptions::new(None));
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
            metrics.count_refusal("api", "api.user", b"rtg1|3:api4:user?|1:k");
        }
        let router = admin_router(store, metrics, AdminOptions::new(Some("s3cret".to_owned())));
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
            serde_json::json!([{
                "key": "tg1|3:api4:user?|1:k",
                "refused": 2,
                "error": 0,
                "descriptor": [{"key": "user", "value": "k"}],
            }])
        );
    }
}
