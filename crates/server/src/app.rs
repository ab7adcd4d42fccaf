//! [`App`]: the state every route shares — the store, the rules in force,
//! the metrics and the settings — and [`router`], which maps paths to
//! routes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::routing::{delete, get, post};
use axum::Router;
use tollgate_core::Store;
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::{RuleSet, RulesError};

use crate::metrics::Metrics;
use crate::override_store::OverrideBackend;
use crate::routes;
use crate::settings::Settings;
use crate::tickets::Tickets;

/// The decision service's shared state. Cheap to clone.
pub struct App<S> {
    inner: Arc<Shared<S>>,
}

impl<S> Clone for App<S> {
    fn clone(&self) -> Self {
        App {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Shared<S> {
    store: S,
    rules: ArcSwap<RuleSet>,
    rules_path: Option<PathBuf>,
    metrics: Metrics,
    settings: Settings,
    overrides: Arc<OverrideTable>,
    override_backend: Option<Arc<dyn OverrideBackend>>,
    tickets: Tickets,
}

impl<S: Store> App<S> {
    /// The service over `store`, deciding by `rules`.
    ///
    /// `rules_path` is where the rules came from, for reloads; `None` when
    /// the service runs without rules files.
    pub fn new(
        store: S,
        rules: RuleSet,
        rules_path: Option<PathBuf>,
        settings: Settings,
    ) -> App<S> {
        App::with_metrics(store, rules, rules_path, settings, Metrics::new())
    }

    /// [`App::new`] with metrics made beforehand (so a store wrapper can
    /// count into them).
    pub fn with_metrics(
        store: S,
        rules: RuleSet,
        rules_path: Option<PathBuf>,
        settings: Settings,
        metrics: Metrics,
    ) -> App<S> {
        App::with_overrides(
            store,
            rules,
            rules_path,
            settings,
            metrics,
            Arc::new(OverrideTable::new()),
            None,
        )
    }

    /// [`App::with_metrics`] with runtime overrides already loaded (from a
    /// snapshot, or kept in step with a shared store by the caller), and
    /// the `backend` that shares them, if any: a change is written there
    /// before it is put in `overrides`.
    pub fn with_overrides(
        store: S,
        rules: RuleSet,
        rules_path: Option<PathBuf>,
        settings: Settings,
        metrics: Metrics,
        overrides: Arc<OverrideTable>,
        backend: Option<Arc<dyn OverrideBackend>>,
    ) -> App<S> {
        let tickets = Tickets::new(settings.ticket_capacity, settings.ticket_ttl);
        App {
            inner: Arc::new(Shared {
                tickets,
                store,
                rules: ArcSwap::from_pointee(rules),
                rules_path,
                metrics,
                settings,
                overrides,
                override_backend: backend,
            }),
        }
    }

    /// The runtime overrides in force (`/v1/overrides/{domain}`).
    pub fn overrides(&self) -> &Arc<OverrideTable> {
        &self.inner.overrides
    }

    /// Where the overrides are shared, if anywhere.
    pub fn override_backend(&self) -> Option<&Arc<dyn OverrideBackend>> {
        self.inner.override_backend.as_ref()
    }

    /// The settle tickets handed out and not yet expired.
    pub fn tickets(&self) -> &Tickets {
        &self.inner.tickets
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The rules in force now.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.inner.rules.load_full()
    }

    /// Where the rules are loaded from, if anywhere.
    pub fn rules_path(&self) -> Option<&Path> {
        self.inner.rules_path.as_deref()
    }

    /// Puts a reload's outcome in force: new rules for every request that
    /// starts from now on, or, when loading failed, the previous rules kept
    /// and the failure logged with its file:line:reason. Either way the
    /// reload is counted.
    pub fn apply_reload(&self, loaded: Result<RuleSet, RulesError>) -> Result<(), RulesError> {
        crate::reload::apply_reload(&self.inner.rules, &self.inner.metrics, loaded)
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }
}

/// Every route of the HTTP API (SPEC §5) over `app`.
pub fn router<S: Store>(app: App<S>) -> Router {
    Router::new()
        .route("/v1/check", post(routes::decision::check::<S>))
        .route("/v1/reserve", post(routes::decision::reserve::<S>))
        .route("/v1/release", post(routes::decision::release::<S>))
        .route("/v1/settle", post(routes::decision::settle::<S>))
        .route("/v1/keys/{key}", delete(routes::admin::reset_key::<S>))
        .route("/v1/rules/reload", post(routes::admin::reload_rules::<S>))
        .route("/v1/top", get(routes::admin::top_refused::<S>))
        .route(
            "/v1/overrides/{domain}",
            get(routes::overrides::list::<App<S>>)
                .put(routes::overrides::put::<App<S>>)
                .delete(routes::overrides::remove::<App<S>>),
        )
        .route("/v1/dashboard", get(routes::dashboard::data::<S>))
        .route("/v1/dashboard/peek", post(routes::dashboard::peek::<S>))
        .route("/dashboard", get(routes::dashboard::page::<S>))
        .route("/dashboard/login", post(routes::dashboard::login::<S>))
        .route("/json", post(routes::envoy_json::should_rate_limit::<S>))
        .route("/increment", post(routes::databox::increment::<S>))
        .route("/delay", get(routes::databox::delay::<S>))
        .route("/healthz", get(routes::health::healthz))
        .route("/readyz", get(routes::health::readyz::<S>))
        .route("/metrics", get(routes::health::metrics::<S>))
        .fallback(routes::health::not_found)
        .with_state(app)
}

/// The routes [`router`] serves, as `(method, path)` pairs in OpenAPI path
/// syntax (the OpenAPI test compares them with `docs/openapi.yaml`).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/check"),
    ("post", "/v1/reserve"),
    ("post", "/v1/release"),
    ("post", "/v1/settle"),
    ("delete", "/v1/keys/{key}"),
    ("post", "/v1/rules/reload"),
    ("get", "/v1/top"),
    ("get", "/v1/overrides/{domain}"),
    ("put", "/v1/overrides/{domain}"),
    ("delete", "/v1/overrides/{domain}"),
    ("get", "/v1/dashboard"),
    ("post", "/v1/dashboard/peek"),
    ("get", "/dashboard"),
    ("post", "/dashboard/login"),
    ("post", "/json"),
    ("post", "/increment"),
    ("get", "/delay"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];
