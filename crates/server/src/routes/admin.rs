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
use crate::target::{store_key, RULES_KEY_PREFIX};
use crate::wire::ReleasedBody;

/// `DELETE /v1/keys/{key}`: forgets an inline key (or Databox id) under
/// every limit, and a rules counter key (`tg1|…`) as given.
pub(crate) async fn reset_key<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<ReleasedBody>, ApiError> {
    require_admin(&app, &headers)?;
    let inline = store_key(&key, app.settings())?;
    let mut held = store(&app, app.store().reset(&inline).await)?;
    // A rules counter key (docs/rules.md, "Counters") is the descriptor's
    // store key itself: reset too, so that an operator can lift a rule's
    // ban (or clear its counts) for one descriptor.
    if key.starts_with(RULE_KEY_TAG) {
        let mut rule_key = Vec::with_capacity(key.len() + 1);
        rule_key.push(RULES_KEY_PREFIX);
        rule_key.extend_from_slice(key.as_bytes());
        held += store(&app, app.store().reset(&rule_key).await)?;
    }
    Ok(Json(ReleasedBody { released: held > 0 }))
}

/// How every rules counter key starts (tollgate-rules `key_prefix`).
const RULE_KEY_TAG: &str = "tg1|";

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
