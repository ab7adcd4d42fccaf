//! Runtime overrides: `PUT`, `GET` and `DELETE /v1/overrides/{domain}`, a
//! limit for one exact descriptor of a domain that takes precedence over
//! the rules files. All need the admin token (bearer or the dashboard's
//! login cookie).
//!
//! The table itself, and its rules, are `tollgate_rules::overrides`; this
//! module decodes and validates the requests (nothing changes on bad
//! input) and turns the table into JSON. A page of the listing ends with
//! a cursor, the hex form of its last override's key: the next page
//! starts after it, in key order, so overrides put or removed between two
//! pages never make another one appear twice or go missing.
//!
//! The same handlers serve the decision service ([`App`]) and the
//! gateway's admin port: each is generic over the [`Host`] that holds the
//! table.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tollgate_core::{Store, StoreError};
use tollgate_rules::overrides::{entries_key, parse_entries, Override, OverrideTable};
use tollgate_rules::RuleSet;

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{decode, read_body, require_token};
use crate::metrics::Metrics;
use crate::override_store::OverrideBackend;
use crate::settings::Settings;
use crate::target::entries_of;
use crate::wire::EntrySpec;

/// What the override routes read from the server that serves them.
pub(crate) trait Host: Clone + Send + Sync + 'static {
    /// The admin token the routes need; open when `None`.
    fn admin_token(&self) -> Option<&str>;
    /// The limits requests are decoded under.
    fn settings(&self) -> &Settings;
    /// The rules in force: the domains overrides may be put in.
    fn rules(&self) -> Arc<RuleSet>;
    /// The overrides in force.
    fn table(&self) -> &Arc<OverrideTable>;
    /// Where the overrides are shared, if anywhere.
    fn backend(&self) -> Option<&Arc<dyn OverrideBackend>>;
    /// Where a store outage is counted.
    fn metrics(&self) -> &Metrics;
}

impl<S: Store> Host for App<S> {
    fn admin_token(&self) -> Option<&str> {
        App::settings(self).admin_token.as_deref()
    }
    fn settings(&self) -> &Settings {
        App::settings(self)
    }
    fn rules(&self) -> Arc<RuleSet> {
        App::rules(self)
    }
    fn table(&self) -> &Arc<OverrideTable> {
        self.overrides()
    }
    fn backend(&self) -> Option<&Arc<dyn OverrideBackend>> {
        self.override_backend()
    }
    fn metrics(&self) -> &Metrics {
        App::metrics(self)
    }
}

/// Overrides one page lists when the query does not say.
const PAGE_DEFAULT: usize = 100;

/// The most overrides one page lists.
pub(crate) const PAGE_MAX: usize = 1_000;

/// The body of `PUT /v1/overrides/{domain}`: the exact descriptor and its
/// limit, with the fields of a rules file's descriptor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutBody<'a> {
    /// The descriptor's entries, outermost first.
    #[serde(borrow)]
    entries: Vec<EntrySpec<'a>>,
    /// One limit, as a rules file's `rate_limit`.
    #[serde(default)]
    rate_limit: Option<Value>,
    /// Several limits, as a rules file's `rate_limits`.
    #[serde(default)]
    rate_limits: Option<Value>,
    /// As a rules file's descriptor `shadow_mode`.
    #[serde(default)]
    shadow_mode: Option<Value>,
    /// As a rules file's descriptor `quota_mode`.
    #[serde(default)]
    quota_mode: Option<Value>,
}

/// The body of `DELETE /v1/overrides/{domain}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteBody<'a> {
    /// The descriptor's entries, outermost first.
    #[serde(borrow)]
    entries: Vec<EntrySpec<'a>>,
}

/// The query of `GET /v1/overrides/{domain}`; any other parameter is
/// refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// How many overrides to list (default [`PAGE_DEFAULT`], at most
    /// [`PAGE_MAX`]).
    #[serde(default)]
    limit: Option<u64>,
    /// The previous page's `next_cursor`.
    #[serde(default)]
    cursor: Option<String>,
}

/// The answer of `PUT`.
#[derive(Debug, Serialize)]
pub(crate) struct PutAnswer {
    domain: String,
    /// Whether an override of this descriptor was replaced (`200`);
    /// `false` for a new one (`201`).
    replaced: bool,
    #[serde(rename = "override")]
    put: Value,
}

/// The answer of `DELETE`.
#[derive(Debug, Serialize)]
pub(crate) struct DeleteAnswer {
    /// Whether there was an override to remove.
    removed: bool,
}

/// The answer of `GET`: one page.
#[derive(Debug, Serialize)]
pub(crate) struct ListAnswer {
    domain: String,
    /// The domain's overrides in all.
    count: usize,
    /// This page's, in key order.
    pub(crate) overrides: Vec<Value>,
    /// Where the next page starts; null on the last page.
    next_cursor: Option<String>,
}

/// `PUT /v1/overrides/{domain}`: sets the limit of one exact descriptor.
pub(crate) async fn put<H: Host>(
    State(app): State<H>,
    headers: HeaderMap,
    Path(domain): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<PutAnswer>), ApiError> {
    require_token(app.admin_token(), &headers)?;
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let body: PutBody<'_> = decode(&bytes)?;
    known_domain(&app, &domain, false)?;
    let entries = entries_of(0, &body.entries, app.settings())?;
    let mut spec = Map::new();
    for (field, value) in [
        ("rate_limit", body.rate_limit),
        ("rate_limits", body.rate_limits),
        ("shadow_mode", body.shadow_mode),
        ("quota_mode", body.quota_mode),
    ] {
        if let Some(mut value) = value.filter(|v| !v.is_null()) {
            printable(field, &value)?;
            whole_numbers(&mut value);
            spec.insert(field.to_string(), value);
        }
    }
    // The limit's canonical text (sorted keys): what is kept and listed,
    // and what makes overrides with the same limit share one rule.
    let text = Value::Object(spec).to_string();
    let invalid =
        |e: tollgate_rules::RulesError| ApiError::bad_request("invalid_override", e.to_string());
    OverrideTable::validate(&domain, &text).map_err(invalid)?;
    // On a shared store, whether it replaced one is the store's answer:
    // this instance's own copy may already hold the change, from the
    // message the put published.
    let shared_replaced = match app.backend() {
        Some(backend) => {
            let key = entries_key(&entries);
            Some(shared(&app, backend.put(&domain, &key, &text).await)?)
        }
        None => None,
    };
    let replaced_here = app.table().put(&domain, &entries, &text).map_err(invalid)?;
    let replaced = shared_replaced.unwrap_or(replaced_here);
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let put = override_json(&entries, &text);
    Ok((
        status,
        Json(PutAnswer {
            domain,
            replaced,
            put,
        }),
    ))
}

/// `DELETE /v1/overrides/{domain}`: removes the override of one exact
/// descriptor, if it has one.
pub(crate) async fn remove<H: Host>(
    State(app): State<H>,
    headers: HeaderMap,
    Path(domain): Path<String>,
    body: Body,
) -> Result<Json<DeleteAnswer>, ApiError> {
    require_token(app.admin_token(), &headers)?;
    let bytes = read_body(body, app.settings().max_body_bytes).await?;
    let body: DeleteBody<'_> = decode(&bytes)?;
    known_domain(&app, &domain, true)?;
    let entries = entries_of(0, &body.entries, app.settings())?;
    let mut removed = false;
    if let Some(backend) = app.backend() {
        let key = entries_key(&entries);
        removed = shared(&app, backend.remove(&domain, &key).await)?;
    }
    removed |= app.table().remove(&domain, &entries);
    Ok(Json(DeleteAnswer { removed }))
}

/// `GET /v1/overrides/{domain}?limit=…&cursor=…`: one page of the
/// domain's overrides, in key order.
pub(crate) async fn list<H: Host>(
    State(app): State<H>,
    headers: HeaderMap,
    Path(domain): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListAnswer>, ApiError> {
    require_token(app.admin_token(), &headers)?;
    let query = crate::extract::query(query)?;
    known_domain(&app, &domain, true)?;
    let limit = query.limit.unwrap_or(PAGE_DEFAULT as u64);
    if !(1..=PAGE_MAX as u64).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("limit {limit} is not between 1 and {PAGE_MAX}"),
        ));
    }
    let after = match query.cursor.as_deref() {
        None | Some("") => None,
        Some(cursor) => Some(decode_cursor(cursor)?),
    };
    // At most PAGE_MAX, so it fits.
    let limit = usize::try_from(limit).unwrap_or(PAGE_MAX);
    Ok(Json(page_of(app.table(), &domain, after.as_deref(), limit)))
}

/// One page of `domain`'s overrides in `table`.
pub(crate) fn page_of(
    table: &OverrideTable,
    domain: &str,
    after: Option<&[u8]>,
    limit: usize,
) -> ListAnswer {
    let (page, more) = table.page(domain, after, limit);
    let next_cursor = page
        .last()
        .filter(|_| more)
        .map(|last| encode_cursor(&last.key));
    ListAnswer {
        domain: domain.to_string(),
        count: table.count(domain),
        overrides: page.iter().map(listed).collect(),
        next_cursor,
    }
}

/// Refuses control characters (and the non-characters U+FFFE, U+FFFF)
/// anywhere in a limit's text: no field of a limit means anything with
/// them, and the limit is read back as YAML, which does not allow them.
fn printable(field: &str, value: &Value) -> Result<(), ApiError> {
    let bad = |c: char| c.is_control() || c == '\u{fffe}' || c == '\u{ffff}';
    let ok = match value {
        Value::String(text) => !text.contains(bad),
        Value::Array(items) => return items.iter().try_for_each(|v| printable(field, v)),
        Value::Object(fields) => {
            if fields.keys().any(|k| k.contains(bad)) {
                false
            } else {
                return fields.values().try_for_each(|v| printable(field, v));
            }
        }
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_override",
            format!("{field}: a text holds a control character"),
        ))
    }
}

/// Writes integral floats as integers, everywhere in `value`: JSON Schema
/// and the other routes read `20.0` and `2e1` as the integer 20 (below
/// 2^53), and so does an override's limit.
fn whole_numbers(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        Value::Number(n) if !n.is_u64() && !n.is_i64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < EXACT) {
                // Exact below 2^53, so the cast loses nothing.
                #[allow(clippy::cast_possible_truncation)]
                let whole = f as i64;
                *value = Value::from(whole);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// An override as JSON: its entries and its limit's fields, the shape
/// `PUT` takes.
fn listed(o: &Override) -> Value {
    override_json(&o.entries, o.spec.text())
}

fn override_json(entries: &[(String, String)], text: &str) -> Value {
    let mut out = Map::new();
    let entries = entries
        .iter()
        .map(|(key, value)| serde_json::json!({"key": key, "value": value}))
        .collect();
    out.insert("entries".into(), Value::Array(entries));
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => out.extend(fields),
        // Set through the library in YAML: shown as given.
        _ => {
            out.insert("text".into(), Value::String(text.to_string()));
        }
    }
    Value::Object(out)
}

/// Refuses a domain the rules do not define, unless (`with_overrides`)
/// it still has overrides (its rules were reloaded away): those can be
/// listed and removed, not added to.
fn known_domain<H: Host>(app: &H, domain: &str, with_overrides: bool) -> Result<(), ApiError> {
    if app.rules().domain(domain).is_some() || (with_overrides && app.table().count(domain) > 0) {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "unknown_domain",
        format!("unknown domain {:?}: no rules file defines it", cut(domain)),
    ))
}

/// A shared backend's answer, a store outage counted (as a decision's is).
fn shared<H: Host, T>(app: &H, result: Result<T, StoreError>) -> Result<T, ApiError> {
    result.map_err(|e| {
        if e.is_outage() {
            app.metrics().store_error();
            tracing::warn!(error = %e, "store operation failed");
        }
        ApiError::from(e)
    })
}

/// At most 256 characters of `text`, for a message.
fn cut(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(256) {
        Some((at, _)) => Cow::Owned(format!("{}…", &text[..at])),
        None => Cow::Borrowed(text),
    }
}

fn encode_cursor(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(cursor: &str) -> Result<Vec<u8>, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "cursor {:?} is not a next_cursor this route gave",
                cut(cursor)
            ),
        )
    };
    if !cursor.len().is_multiple_of(2) || cursor.len() > 2 * 64 * 1024 {
        return Err(bad());
    }
    let key = (0..cursor.len())
        .step_by(2)
        .map(|i| {
            cursor
                .get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    parse_entries(&key).ok_or_else(bad)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_floats_become_integers() {
        let mut v = serde_json::json!({"a": [20.0, 2e1, 1.5, -3.0, 1e300], "b": {"c": 7}});
        whole_numbers(&mut v);
        assert_eq!(v.to_string(), r#"{"a":[20,20,1.5,-3,1e+300],"b":{"c":7}}"#);
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        let key = tollgate_rules::overrides::entries_key(&[("user", "é")]);
        assert_eq!(decode_cursor(&encode_cursor(&key)).unwrap(), key);
        for bad in ["0", "zz", "00", "é1", "3a"] {
            assert_eq!(decode_cursor(bad).unwrap_err().code, "invalid_request");
        }
    }
}
