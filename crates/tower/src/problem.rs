//! RFC 9457 problem details (`application/problem+json`) for the answers
//! the middleware gives itself: `429 Too Many Requests` when a limit
//! rejects, a route's `on_missing` status when a request lacks a value its
//! limit is keyed by, and `503 Service Unavailable` when the store cannot
//! be asked
//! under `fail_closed`. The one place these statuses and bodies are made.
//!
//! The 503 names no store, address or error text: the answer goes to the
//! client, and the cause is the operator's business (the middleware's
//! observer hears it).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde::Serialize;
use tollgate_core::time::{duration_to_nanos, nanos_to_ms_ceil};

use crate::headers::retry_after_secs;

/// `application/problem+json`.
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// A problem details object with tollgate's extension members.
#[derive(Debug, Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

/// A `429` whose body names `policy` (the rule's name) and the wait.
///
/// ```
/// use std::time::Duration;
///
/// let response = tollgate_tower::problem::too_many_requests("per_ip", Duration::from_millis(1500));
/// assert_eq!(response.status(), 429);
/// let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(body["title"], "Too Many Requests");
/// assert_eq!(body["policy"], "per_ip");
/// assert_eq!(body["retry_after_ms"], 1500);
/// assert_eq!(body["detail"], "Rate limit \"per_ip\" exceeded; retry in 2 seconds.");
/// ```
pub fn too_many_requests(policy: &str, retry_after: Duration) -> Response<Bytes> {
    let secs = retry_after_secs(retry_after);
    let unit = if secs == 1 { "second" } else { "seconds" };
    let detail = format!("Rate limit {policy:?} exceeded; retry in {secs} {unit}.");
    respond(&Problem {
        kind: "about:blank",
        title: "Too Many Requests",
        status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
        detail: &detail,
        policy: Some(policy),
        retry_after_ms: Some(nanos_to_ms_ceil(duration_to_nanos(retry_after)).max(1)),
    })
}

/// The answer of a route with `on_missing: deny` to a request from which
/// one of its descriptors cannot be built: `status` (429 unless the route
/// says otherwise), naming the route (its name) as the policy.
///
/// ```
/// let response = tollgate_tower::problem::key_missing(429, Some("api"));
/// assert_eq!(response.status(), 429);
/// let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(body["title"], "Too Many Requests");
/// assert_eq!(body["policy"], "api");
/// assert!(body.get("retry_after_ms").is_none());
/// ```
pub fn key_missing(status: u16, route: Option<&str>) -> Response<Bytes> {
    let title = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Request Refused");
    respond(&Problem {
        kind: "about:blank",
        title,
        status,
        detail: "The request lacks a value its rate limit is keyed by (a header, the client address); it was not forwarded.",
        policy: route,
        retry_after_ms: None,
    })
}

/// A `503`: the store that keeps the limits could not be asked.
pub fn store_unavailable() -> Response<Bytes> {
    respond(&Problem {
        kind: "about:blank",
        title: "Service Unavailable",
        status: StatusCode::SERVICE_UNAVAILABLE.as_u16(),
        detail: "The rate limit store is unavailable; the request was not forwarded.",
        policy: None,
        retry_after_ms: None,
    })
}

fn respond(problem: &Problem<'_>) -> Response<Bytes> {
    // Serialising strings and integers into a Vec cannot fail.
    let body = serde_json::to_vec(problem).unwrap_or_default();
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() =
        StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(CONTENT_TYPE, PROBLEM_JSON);
    response
}
