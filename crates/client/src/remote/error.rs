//! What can go wrong talking to the service.

use std::time::Duration;

/// A failed remote pacing call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The server URL is not `http://host:port`.
    #[error("invalid tollgate server URL {0:?}: expected http://host:port")]
    InvalidServer(String),
    /// The service did not answer (connection refused, timeout, …).
    #[error("the tollgate service did not answer: {0}")]
    Unreachable(String),
    /// No slot within the pacer's `max_wait`: nothing was booked.
    #[error("no slot within the longest acceptable wait; try again in {retry_after:?}")]
    TooLong {
        /// How long until the same request would find a slot within
        /// `max_wait`.
        retry_after: Duration,
    },
    /// The service refused the request (bad limit, unknown domain, store
    /// unavailable, …).
    #[error("the tollgate service answered {status} {code}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error code of the body (`invalid_limit`, `store_unavailable`, …).
        code: String,
        /// The service's message.
        message: String,
    },
    /// The answer was not what the API documents.
    #[error("unexpected answer from the tollgate service: {0}")]
    BadAnswer(String),
}

/// The error of a non-2xx, non-429 answer.
pub(crate) fn refused(status: u16, body: &[u8]) -> RemoteError {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(serde::Deserialize)]
    struct Detail {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(Body { error }) => RemoteError::Refused {
            status,
            code: error.code,
            message: error.message,
        },
        Err(_) => RemoteError::Refused {
            status,
            code: "unknown".to_owned(),
            message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        },
    }
}
