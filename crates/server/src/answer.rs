//! [`Answer`]: a decision ready to send — the JSON body, the limits that
//! applied (for the headers) and whether it is a rejection. The one place
//! where a decision becomes `200` or `429`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tollgate_core::Decision;

use crate::headers::{add_rate_limit_headers, AppliedLimit};

/// A decision, ready to be answered.
#[derive(Debug, Clone)]
pub struct Answer<B> {
    /// The JSON body.
    pub body: B,
    /// Every limit that applied, in order.
    pub applied: Vec<AppliedLimit<'static>>,
    /// The most constrained decision, for the `X-RateLimit-*` headers.
    pub top: Option<Decision>,
    /// Answer `429`.
    pub rejected: bool,
    /// Send the rate-limit headers.
    pub headers: bool,
}

impl<B: Serialize> IntoResponse for Answer<B> {
    fn into_response(self) -> Response {
        let status = if self.rejected {
            StatusCode::TOO_MANY_REQUESTS
        } else {
            StatusCode::OK
        };
        let mut response = Json(self.body).into_response();
        *response.status_mut() = status;
        if self.headers {
            add_rate_limit_headers(
                response.headers_mut(),
                &self.applied,
                self.top.as_ref(),
                self.rejected,
            );
        }
        response
    }
}
