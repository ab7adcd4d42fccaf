//! [`ApiError`]: the one place where a refusal of bad input or a store
//! failure becomes an HTTP status and the `{"error": {"code", "message"}}`
//! body. Handlers return `ApiError`s; they never pick status codes of their
//! own.

use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::time::Duration;

use tollgate_core::{LimitError, StoreError};

use crate::tickets::{Full, Refusal, TicketId};

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable snake_case code for programs.
    pub code: &'static str,
    /// One line for people, naming the bad value.
    pub message: String,
}

impl ApiError {
    /// A `400` with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }

    /// A `401` for admin routes.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "this route needs the admin bearer token".into(),
        }
    }

    /// A `404` for a path that names nothing.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
        }
    }

    /// A `413` for a body over the size limit.
    pub fn body_too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "body_too_large",
            message: format!("request body is over the {limit}-byte limit"),
        }
    }
}

impl ApiError {
    /// A `408` for a request body the client stopped sending for
    /// `timeout` (the listener's body read timeout); the connection is
    /// closed after it.
    pub fn body_timeout(timeout: std::time::Duration) -> ApiError {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "body_timeout",
            message: format!(
                "the request body stopped coming: nothing arrived for {} ms",
                timeout.as_millis()
            ),
        }
    }
}

impl ApiError {
    /// A `503` for a check with `"settle": true` while the ticket table
    /// is full: nothing was counted.
    pub fn tickets_full(full: Full, ttl: Duration) -> ApiError {
        let message = match full {
            Full::Table(wait) => format!(
                "the settle ticket table is full (tickets last {ttl:?}); the first place frees up in {} ms; nothing was counted",
                wait.as_millis()
            ),
            Full::Random => "no random bytes for a settle ticket; nothing was counted".to_owned(),
        };
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "tickets_full",
            message,
        }
    }

    /// A `404` for a ticket unknown or expired, a `409` for one settled
    /// already; either way nothing changed.
    pub fn ticket_refused(refusal: Refusal, id: TicketId, ttl: Duration) -> ApiError {
        match refusal {
            Refusal::Unknown => ApiError {
                status: StatusCode::NOT_FOUND,
                code: "unknown_ticket",
                message: format!(
                    "ticket {id} is unknown or has expired (tickets last {ttl:?}; an expired ticket's estimate stands)"
                ),
            },
            Refusal::Settled => ApiError {
                status: StatusCode::CONFLICT,
                code: "ticket_settled",
                message: format!("ticket {id} is settled already; a ticket is settled once"),
            },
        }
    }
}

impl From<LimitError> for ApiError {
    fn from(error: LimitError) -> ApiError {
        let code = match &error {
            LimitError::UnknownAlgorithm { .. } => "unknown_algorithm",
            LimitError::Rate(_) => "invalid_rate",
            LimitError::CostTooLarge { .. } => "cost_too_large",
            LimitError::ReservationUnsupported => "reservation_unsupported",
            LimitError::Burst { .. }
            | LimitError::Step { .. }
            | LimitError::Storage { .. }
            | LimitError::LeaseTtl { .. }
            | LimitError::Ban { .. }
            | LimitError::Option { .. }
            | LimitError::Calendar(_)
            | LimitError::NotOnStore { .. }
            | LimitError::SyncAsync { .. }
            | LimitError::UnknownSyncMode { .. } => "invalid_limit",
        };
        ApiError::bad_request(code, error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::Limit(e) => ApiError::from(e),
            // Not an outage: this store will never do it.
            StoreError::Unsupported(_) => ApiError {
                status: StatusCode::NOT_IMPLEMENTED,
                code: "unsupported",
                message: error.to_string(),
            },
            outage => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "store_unavailable",
                message: outage.to_string(),
            },
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still come: the connection cannot
            // carry another request.
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_errors_are_bad_requests_with_their_own_codes() {
        let e = ApiError::from(LimitError::CostTooLarge {
            cost: 11,
            capacity: 10,
        });
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.code, "cost_too_large");
        assert!(e.message.contains("11"));
    }

    #[test]
    fn unsupported_operations_are_not_implemented() {
        let e = ApiError::from(StoreError::Unsupported("settle"));
        assert_eq!(e.status, StatusCode::NOT_IMPLEMENTED);
        assert_eq!(e.code, "unsupported");
        assert_eq!(e.message, "this store does not support settle");
    }

    #[test]
    fn store_outages_are_service_unavailable() {
        let e = ApiError::from(StoreError::Unavailable("connection refused".into()));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code, "store_unavailable");
    }
}
