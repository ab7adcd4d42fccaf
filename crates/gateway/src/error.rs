//! [`ProxyError`]: everything that keeps a request from reaching the
//! upstream or its answer from coming back, and the one place each becomes
//! a status and an RFC 9457 `application/problem+json` body.
//!
//! | cause | status |
//! |---|---|
//! | the upstream refuses or drops the connection, or breaks off before its answer's headers | `502 Bad Gateway` |
//! | no answer's headers within the upstream timeout | `504 Gateway Timeout` |
//! | a request target that cannot be put on the upstream | `400 Bad Request` |
//! | `CONNECT` (the gateway is no forward proxy) | `405 Method Not Allowed` |
//! | the client stopped sending the request body for the body read timeout | `408 Request Timeout` (and the connection closes) |
//!
//! The `detail` names the upstream and the cause, so a client (and the
//! person reading its logs) can tell a gateway problem from an upstream
//! answer.

use std::error::Error as StdError;
use std::time::Duration;

use http::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde::Serialize;
use tollgate_listener::BodyTimeout;

use crate::body::ProxyBody;
use crate::upstream::{InvalidTarget, Upstream};

/// Why a request was answered by the gateway instead of the upstream.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No connection to the upstream could be made (refused, unreachable,
    /// name not resolved).
    #[error("cannot connect to the upstream {upstream}: {cause}")]
    Connect {
        /// The upstream, as configured.
        upstream: String,
        /// The connector's reason.
        cause: String,
    },
    /// The upstream took the request but broke off (reset, closed) before
    /// the headers of its answer.
    #[error("the upstream {upstream} failed before answering: {cause}")]
    Upstream {
        /// The upstream, as configured.
        upstream: String,
        /// hyper's reason.
        cause: String,
    },
    /// The upstream sent no answer's headers in time.
    #[error("the upstream {upstream} did not answer within {}", seconds(*.timeout))]
    Timeout {
        /// The upstream, as configured.
        upstream: String,
        /// The upstream timeout.
        timeout: Duration,
    },
    /// The request's target cannot be put on the upstream.
    #[error(transparent)]
    Target(#[from] InvalidTarget),
    /// A `CONNECT` request: tunnels to arbitrary hosts are not offered.
    #[error("CONNECT is not forwarded: this gateway forwards requests to one upstream")]
    ConnectMethod,
    /// The client stopped sending the request body before the upstream
    /// answered (the listener's body read timeout).
    #[error("the request body stopped coming: nothing arrived for {}", seconds(*.timeout))]
    BodyTimeout {
        /// The body read timeout.
        timeout: Duration,
    },
}

/// An RFC 9457 problem details object.
#[derive(Debug, Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: &'a str,
}

impl ProxyError {
    /// The error of a failed upstream call: connecting, or exchanging.
    pub(crate) fn from_client(
        upstream: &Upstream,
        error: &hyper_util::client::legacy::Error,
    ) -> ProxyError {
        if let Some(timeout) = BodyTimeout::find(error) {
            return ProxyError::BodyTimeout {
                timeout: timeout.timeout,
            };
        }
        if error.is_connect() {
            ProxyError::Connect {
                upstream: upstream.to_string(),
                cause: causes(error),
            }
        } else {
            ProxyError::Upstream {
                upstream: upstream.to_string(),
                cause: causes(error),
            }
        }
    }

    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Connect { .. } | ProxyError::Upstream { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Target(_) => StatusCode::BAD_REQUEST,
            ProxyError::ConnectMethod => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
        }
    }

    /// The answer: the status, and problem details whose `detail` is this
    /// error's message.
    pub fn into_response(self) -> Response<ProxyBody> {
        let status = self.status();
        let detail = self.to_string();
        let problem = Problem {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            detail: &detail,
        };
        // Serialising strings and a number into a Vec cannot fail.
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = Response::new(ProxyBody::local(body));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let ProxyError::BodyTimeout { .. } = self {
            // The rest of the body may still come: the connection cannot
            // carry another request.
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        if let ProxyError::ConnectMethod = self {
            // RFC 9110 §15.5.6: a 405 lists the methods that are allowed.
            response.headers_mut().insert(
                ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"),
            );
        }
        response
    }
}

/// The chain of reasons under `error`, most general first, without the
/// client's own "client error (…)" wrapper.
/// `error`'s causes, outermost first, `: `-separated; the error itself
/// when it has none.
pub(crate) fn causes(error: &(dyn StdError + 'static)) -> String {
    let mut text = String::new();
    let mut next = error.source();
    while let Some(cause) = next {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    if text.is_empty() {
        text = error.to_string();
    }
    text
}

/// `30s`, `1.5s`, `250ms`.
fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 && duration.as_secs() > 0 {
        format!("{}s", duration.as_secs())
    } else if duration.as_secs() == 0 {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use serde_json::Value;

    use super::*;

    async fn answer(error: ProxyError) -> (StatusCode, String, Value) {
        let response = error.into_response();
        let status = response.status();
        let content_type = response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_timeout_is_a_504_problem_naming_the_upstream() {
        let (status, content_type, body) = answer(ProxyError::Timeout {
            upstream: "http://127.0.0.1:9".into(),
            timeout: Duration::from_millis(250),
        })
        .await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["type"], "about:blank");
        assert_eq!(body["title"], "Gateway Timeout");
        assert_eq!(body["status"], 504);
        assert_eq!(
            body["detail"],
            "the upstream http://127.0.0.1:9 did not answer within 250ms"
        );
    }

    #[tokio::test]
    async fn each_error_has_its_status() {
        let connect = ProxyError::Connect {
            upstream: "http://up".into(),
            cause: "tcp connect error: Connection refused".into(),
        };
        let (status, _, body) = answer(connect).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(body["title"], "Bad Gateway");
        assert!(body["detail"]
            .as_str()
            .unwrap()
            .contains("http://up: tcp connect error"));
        let target = ProxyError::Target(InvalidTarget("*".into()));
        assert_eq!(target.status(), StatusCode::BAD_REQUEST);
        let timeout = ProxyError::BodyTimeout {
            timeout: Duration::from_millis(200),
        };
        let (status, _, body) = answer(timeout).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(
            body["detail"],
            "the request body stopped coming: nothing arrived for 200ms"
        );
        let response = ProxyError::ConnectMethod.into_response();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(response.headers().contains_key(ALLOW));
    }

    #[test]
    fn durations_read_as_written() {
        assert_eq!(seconds(Duration::from_secs(30)), "30s");
        assert_eq!(seconds(Duration::from_millis(250)), "250ms");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5s");
    }
}
