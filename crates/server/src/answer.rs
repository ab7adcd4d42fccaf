//! [`Answer`]: a decision ready to send — the JSON body, the limits that
//! applied (for the headers) and whether it is a rejection. The one place
//! where a decision becomes `200` or `429`.

use std::cell::RefCell;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use tollgate_core::{Decision, Limit};

use crate::decide::with_inline_applied;
use crate::headers::{answer_headers, AppliedLimit};
use crate::wire::DecisionBody;

/// A decision, ready to be answered.
#[derive(Debug, Clone)]
pub struct Answer<B> {
    /// The JSON body.
    pub body: B,
    /// Every limit that applied, in order.
    pub applied: Applied,
    /// The most constrained decision, for the `X-RateLimit-*` headers.
    pub top: Option<Decision>,
    /// Answer `429`.
    pub rejected: bool,
    /// Send the rate-limit headers.
    pub headers: bool,
}

/// The limits that applied to an [`Answer`], for its headers.
#[derive(Debug, Clone)]
pub enum Applied {
    /// Every limit that applied, in order.
    Limits(Vec<AppliedLimit<'static>>),
    /// One inline limit, whose decision is the answer's `top`: its name
    /// and policy are the thread's kept ones
    /// ([`with_inline_applied`]), lent when the headers are written
    /// rather than copied into each answer.
    Inline(Limit),
}

/// The body of an [`Answer`], written as JSON.
pub trait AnswerBody {
    /// The JSON bytes of the body.
    fn to_json(&self) -> Result<Bytes, serde_json::Error>;
}

/// Bytes a thread's answer bodies are carved from, a block at a time.
const BLOCK: usize = 16 * 1024;

/// Room left in the block below which another is started before a body
/// is written: more than a decision without statuses takes, so the common
/// body is written once, in place. A longer body grows the block as it is
/// written, and a block grown past [`BLOCK`] is let go with its body.
const ROOM: usize = 512;

impl AnswerBody for DecisionBody {
    fn to_json(&self) -> Result<Bytes, serde_json::Error> {
        thread_local! {
            // Each worker thread writes its answers into `block` and splits
            // each off: no allocation and no copy per answer. The block is
            // taken back whole once the bodies carved from it are sent and
            // dropped, or another is started.
            static BLOCK_OF_BODIES: RefCell<BytesMut> = RefCell::new(BytesMut::new());
        }
        Ok(BLOCK_OF_BODIES.with(|block| {
            let Ok(mut block) = block.try_borrow_mut() else {
                let mut out = Vec::new();
                self.write_json(&mut out);
                return Bytes::from(out);
            };
            if block.capacity() < ROOM {
                block.reserve(BLOCK);
            }
            self.write_json(&mut *block);
            let body = block.split().freeze();
            if body.len() > BLOCK {
                // Grown past a block: not kept for the bodies after.
                *block = BytesMut::new();
            }
            body
        }))
    }
}

impl<B: AnswerBody> IntoResponse for Answer<B> {
    fn into_response(self) -> Response {
        let json = match self.body.to_json() {
            Ok(json) => json,
            // As axum's `Json` answers a body it cannot serialize.
            Err(error) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
            }
        };
        let status = if self.rejected {
            StatusCode::TOO_MANY_REQUESTS
        } else {
            StatusCode::OK
        };
        let length = json.len() as u64;
        let top = self.top.as_ref();
        let headers = match (&self.applied, top) {
            (Applied::Inline(limit), Some(decision)) if self.headers => {
                with_inline_applied(limit, *decision, |applied| {
                    answer_headers(std::slice::from_ref(applied), top, self.rejected, length)
                })
            }
            (Applied::Limits(applied), _) if self.headers => {
                answer_headers(applied, top, self.rejected, length)
            }
            // Without the rate-limit headers; an inline answer always has
            // its decision.
            _ => answer_headers(&[], None, false, length),
        };
        let mut response = Response::new(Body::from(json));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}
