//! Request decoding shared by the routes: a JSON body read under the size
//! limit, and the admin token check (a bearer token, or the dashboard's
//! login cookie).

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Query, Request};
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::HeaderMap;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tollgate_core::Store;
use tollgate_listener::BodyTimeout;

use crate::app::App;
use crate::error::ApiError;
use crate::wire::DecisionRequest;

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
///
/// What `axum::body::to_bytes` does, without its list of chunks: a
/// decision's body nearly always arrives as one frame, which is returned
/// as it is (no copy, no allocation), and once the body says it has ended
/// (its `Content-Length` read) it is not polled again for the end. A body
/// of several frames is copied into one buffer; trailers are ignored, as
/// `to_bytes` ignores them.
pub(crate) async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| match BodyTimeout::find(&error) {
            Some(timeout) => ApiError::body_timeout(timeout.timeout),
            None => ApiError::body_too_large(limit),
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read = read.saturating_add(data.len());
        if read > limit {
            return Err(ApiError::body_too_large(limit));
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    joined.reserve(held.len() + data.len());
                    joined.extend_from_slice(&held);
                }
                joined.extend_from_slice(&data);
            }
        }
        if body.is_end_stream() {
            break;
        }
    }
    Ok(match first {
        Some(data) => data,
        None => Bytes::from(joined),
    })
}

/// Decodes the body of a decision route: a plain one without serde
/// ([`scan`](crate::scan)), any other as [`decode`] does, with its errors.
pub(crate) fn decode_decision(bytes: &[u8]) -> Result<DecisionRequest<'_>, ApiError> {
    match crate::scan::decision_request(bytes) {
        Some(request) => Ok(request),
        None => decode(bytes),
    }
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

/// Refuses the request unless it carries `token` (when there is one): as
/// its bearer token, or in the dashboard's login cookie
/// ([`ADMIN_COOKIE`]).
pub(crate) fn require_token(token: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    if has_token(token, headers) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// Whether the request carries `token` (always, when there is none).
pub(crate) fn has_token(token: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(token) = token else {
        return true;
    };
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(presented) = bearer {
        return constant_time_eq(presented.as_bytes(), token.as_bytes());
    }
    let expected = cookie_value(token);
    let mut found = false;
    for cookie in cookies(headers, ADMIN_COOKIE) {
        // Every cookie of that name is compared, so the time taken does
        // not tell which matched.
        found |= constant_time_eq(cookie.as_bytes(), expected.as_bytes());
    }
    found
}

/// The dashboard's login cookie: the admin token, hex-encoded (a token may
/// hold bytes a cookie value cannot).
pub(crate) const ADMIN_COOKIE: &str = "tollgate_admin";

/// The value of [`ADMIN_COOKIE`] for `token`.
pub(crate) fn cookie_value(token: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(token.len() * 2);
    for byte in token.bytes() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

/// The values of the cookies named `name` in the request's `Cookie`
/// headers.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// Compares without an early exit, so the time taken does not tell how much
/// of a guess was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_token_comes_as_a_bearer_token_or_the_login_cookie() {
        let token = Some("s3 cret;");
        assert!(has_token(None, &headers(&[])));
        assert!(!has_token(token, &headers(&[])));
        assert!(has_token(
            token,
            &headers(&[("authorization", "Bearer s3 cret;")])
        ));
        assert!(!has_token(
            token,
            &headers(&[("authorization", "Bearer s3")])
        ));
        let cookie = format!("a=b; {ADMIN_COOKIE}={}", cookie_value("s3 cret;"));
        assert_eq!(cookie_value("s3 cret;"), "733320637265743b");
        assert!(has_token(token, &headers(&[("cookie", &cookie)])));
        assert!(has_token(
            token,
            &headers(&[("cookie", "x=1"), ("cookie", &cookie)])
        ));
        assert!(!has_token(
            token,
            &headers(&[("cookie", "tollgate_admin=733320")])
        ));
        // The raw token is not the cookie's value.
        assert!(!has_token(
            token,
            &headers(&[("cookie", "tollgate_admin=s3 cret;")])
        ));
        assert!(require_token(token, &headers(&[])).is_err());
    }

    /// A body that hands out `frames` one by one, each when first polled.
    struct Frames(std::collections::VecDeque<&'static [u8]>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            let frame = self.0.pop_front().map(|data| {
                if data == b"trailers" {
                    Ok(http_body::Frame::trailers(HeaderMap::new()))
                } else {
                    Ok(http_body::Frame::data(Bytes::from_static(data)))
                }
            });
            std::task::Poll::Ready(frame)
        }
    }

    fn frames(frames: &[&'static [u8]]) -> Body {
        Body::new(Frames(frames.iter().copied().collect()))
    }

    #[tokio::test]
    async fn a_body_is_read_whole_from_any_number_of_frames_under_the_limit() {
        let one = read_body(Body::from("{\"key\":1}"), 64).await.unwrap();
        assert_eq!(&one[..], b"{\"key\":1}");
        let read = |parts: &[&'static [u8]], limit| read_body(frames(parts), limit);
        assert_eq!(&read(&[], 4).await.unwrap()[..], b"");
        assert_eq!(
            &read(&[b"", b"ab", b"", b"c"], 4).await.unwrap()[..],
            b"abc"
        );
        assert_eq!(&read(&[b"ab", b"", b"cd"], 4).await.unwrap()[..], b"abcd");
        assert_eq!(
            &read(&[b"a", b"b", b"trailers"], 4).await.unwrap()[..],
            b"ab"
        );
        for parts in [&[b"abcde" as &[u8]][..], &[b"ab", b"cd", b"e"]] {
            let error = read(parts, 4).await.unwrap_err();
            assert_eq!(error, ApiError::body_too_large(4));
        }
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret!", b"secret"));
    }
}
