//! Request decoding shared by the routes: a JSON body read under the size
//! limit, and the admin bearer-token check.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Query, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tollgate_core::Store;
use tollgate_listener::BodyTimeout;

use crate::app::App;
use crate::error::ApiError;

/// A JSON body decoded strictly: over the size limit is `413`, anything
/// that is not the expected JSON is `400 malformed_json` naming the problem.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<S: Store, T: DeserializeOwned> FromRequest<App<S>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App<S>) -> Result<Self, ApiError> {
        let limit = app.settings().max_body_bytes;
        let bytes = read_body(request.into_body(), limit).await?;
        decode(&bytes).map(JsonBody)
    }
}

/// Reads a body of at most `limit` bytes: `408` when the client stopped
/// sending it (the listener's body read timeout), `413` otherwise.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|error| match BodyTimeout::find(&error) {
            Some(timeout) => ApiError::body_timeout(timeout.timeout),
            None => ApiError::body_too_large(limit),
        })
}

/// Decodes JSON, naming what is wrong and where; strings may borrow from
/// `bytes`.
pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("malformed_json", format!("request body: {e}")))
}

/// A query string decoded into `T`, or `400 invalid_request` saying what
/// is wrong with it.
pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(query)| query).map_err(|e| {
        ApiError::bad_request(
            "invalid_request",
            format!("query string: {}", e.body_text()),
        )
    })
}

/// Refuses the request unless it carries the admin token (when one is set).
pub(crate) fn require_admin<S: Store>(app: &App<S>, headers: &HeaderMap) -> Result<(), ApiError> {
    require_token(app.settings().admin_token.as_deref(), headers)
}

/// Refuses the request unless it carries `token` as its bearer token (when
/// there is one).
pub(crate) fn require_token(token: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = token else {
        return Ok(());
    };
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// Compares without an early exit, so the time taken does not tell how much
/// of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret!", b"secret"));
    }
}
