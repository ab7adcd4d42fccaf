//! Admin routes: `DELETE /v1/keys/{key}` and `POST /v1/rules/reload`. Both
//! need the bearer token when the server has one.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Serialize;
use tollgate_core::Store;
use tollgate_rules::{LoadOptions, RuleSet};

use crate::app::App;
use crate::decide::store;
use crate::error::ApiError;
use crate::extract::require_admin;
use crate::target::store_key;
use crate::wire::ReleasedBody;

/// `DELETE /v1/keys/{key}`: forgets an inline key (or Databox id) under
/// every limit.
pub(crate) async fn reset_key<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<ReleasedBody>, ApiError> {
    require_admin(&app, &headers)?;
    let key = store_key(&key, app.settings())?;
    let held = store(&app, app.store().reset(&key).await)?;
    Ok(Json(ReleasedBody { released: held > 0 }))
}

/// The answer of a reload.
#[derive(Serialize)]
pub(crate) struct Reloaded {
    reloaded: bool,
}

/// `POST /v1/rules/reload`: reloads the rules files now. A failure keeps
/// the previous rules and answers `400 invalid_rules` with file:line:reason.
pub(crate) async fn reload_rules<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
) -> Result<Json<Reloaded>, ApiError> {
    require_admin(&app, &headers)?;
    let Some(path) = app.rules_path().map(ToOwned::to_owned) else {
        return Err(ApiError::bad_request(
            "no_rules",
            "the server runs without --rules; there is nothing to reload",
        ));
    };
    let options = LoadOptions {
        merge_domains: app.settings().merge_domains,
    };
    let loaded = tokio::task::spawn_blocking(move || RuleSet::load_with(&path, options))
        .await
        .map_err(|e| {
            ApiError::bad_request("invalid_rules", format!("reload did not finish: {e}"))
        })?;
    app.apply_reload(loaded)
        .map_err(|e| ApiError::bad_request("invalid_rules", e.to_string()))?;
    Ok(Json(Reloaded { reloaded: true }))
}
