//! Admin routes: `DELETE /v1/keys/{key}`, `POST /v1/rules/reload` and
//! `GET /v1/top`. All need the bearer token when the server has one (the
//! keys a rule refused name users and addresses).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use tollgate_core::Store;
use tollgate_rules::{LoadOptions, RuleSet};

use crate::app::App;
use crate::decide::store;
use crate::error::ApiError;
use crate::extract::require_admin;
use crate::metrics::Metrics;
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

/// The query of `GET /v1/top`.
#[derive(Deserialize)]
pub(crate) struct TopQuery {
    /// The rule's domain (`""` for inline limits).
    domain: String,
    /// The rule's path (its metrics label), or `inline`.
    rule: String,
    /// How many keys to list (default [`TOP_DEFAULT`], at most
    /// [`TOP_MAX`]).
    #[serde(default)]
    limit: Option<u64>,
}

/// Keys listed when the query does not say.
const TOP_DEFAULT: u64 = 10;

/// The most keys one answer lists.
const TOP_MAX: u64 = 100;

/// The longest domain or rule name the query may carry, in characters.
const TOP_NAME_MAX_CHARS: usize = 256;

/// The answer of `GET /v1/top`.
#[derive(Serialize)]
pub(crate) struct TopBody {
    domain: String,
    rule: String,
    /// How far back the counts go.
    window_seconds: u64,
    /// Most refused first.
    keys: Vec<TopKey>,
}

/// One key of [`TopBody`].
#[derive(Serialize)]
struct TopKey {
    /// As `DELETE /v1/keys/{key}` takes it (bytes that are not UTF-8
    /// replaced).
    key: String,
    /// Refusals counted for the key: never fewer than the true number.
    refused: u64,
    /// How many of `refused` may have been other keys' (0: exact).
    error: u64,
    /// What a rules key names, for people: the request's descriptor
    /// entries (`*` for a wildcard level whose values share a counter);
    /// `None` for an inline key, which is `key` itself.
    descriptor: Option<Vec<TopEntry>>,
}

/// One entry of [`TopKey::descriptor`].
#[derive(Serialize)]
struct TopEntry {
    key: String,
    value: String,
}

/// `GET /v1/top?domain=…&rule=…&limit=…`: the keys a rule refused most
/// over the last five minutes (enforced or in shadow mode), from the
/// rule's bounded summary (`top`).
pub(crate) async fn top_refused<S: Store>(
    State(app): State<App<S>>,
    headers: HeaderMap,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TopBody>, ApiError> {
    require_admin(&app, &headers)?;
    top_of(app.metrics(), query)
}

/// The answer of `GET /v1/top` from `metrics`, for the decision service
/// and the gateway's admin port alike.
pub(crate) fn top_of(
    metrics: &Metrics,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TopBody>, ApiError> {
    let query = crate::extract::query(query)?;
    if query.rule.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "rule must not be empty",
        ));
    }
    for (field, value) in [("domain", &query.domain), ("rule", &query.rule)] {
        if value.chars().count() > TOP_NAME_MAX_CHARS {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("{field} is longer than {TOP_NAME_MAX_CHARS} characters"),
            ));
        }
    }
    let limit = query.limit.unwrap_or(TOP_DEFAULT);
    if !(1..=TOP_MAX).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("limit {limit} is not between 1 and {TOP_MAX}"),
        ));
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // At most TOP_MAX, so it fits.
    let n = usize::try_from(limit).unwrap_or(usize::MAX);
    let keys = metrics
        .top_refused(&query.domain, &query.rule, n, now_ms)
        .into_iter()
        .map(|e| TopKey {
            descriptor: tollgate_rules::parse_counter_key(&e.key).map(|parts| {
                parts
                    .entries
                    .into_iter()
                    .map(|(key, value)| TopEntry { key, value })
                    .collect()
            }),
            key: String::from_utf8_lossy(&e.key).into_owned(),
            refused: e.count,
            error: e.error,
        })
        .collect();
    Ok(Json(TopBody {
        domain: query.domain,
        rule: query.rule,
        window_seconds: crate::top::WINDOW_MS / 1000,
        keys,
    }))
}
