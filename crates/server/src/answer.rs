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
use crate::wire::{DecisionBody, DecisionFields};

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
            static LAST_BODY: RefCell<KeptBody> = const {
                RefCell::new(KeptBody { last: None, bytes: None })
            };
        }
        let plain = self.statuses.is_none() && self.ticket.is_none();
        if plain {
            let kept = LAST_BODY.with(|kept| kept.try_borrow().ok()?.kept(self));
            if let Some(bytes) = kept {
                return Ok(bytes);
            }
        }
        let body = BLOCK_OF_BODIES.with(|block| {
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
        });
        if plain {
            LAST_BODY.with(|kept| {
                if let Ok(mut kept) = kept.try_borrow_mut() {
                    kept.saw(self, &body);
                }
            });
        }
        Ok(body)
    }
}

/// The body of the last answers of a thread without statuses or a ticket
/// (every inline check's), kept once two answers in a row were the same:
/// a body that repeats, as those of keys seen once do, is shared rather
/// than written.
struct KeptBody {
    /// What the last such body was written from: its fields, `wait_ms`
    /// and `shadow_rejected`.
    last: Option<(DecisionFields, Option<u64>, bool)>,
    /// The bytes of `last`, once it came twice; bytes of their own, not
    /// the thread's block.
    bytes: Option<Bytes>,
}

impl KeptBody {
    /// Whether `body` is written from what the last one was.
    fn repeats(&self, body: &DecisionBody) -> bool {
        self.last
            .as_ref()
            .is_some_and(|(fields, wait_ms, shadow_rejected)| {
                *fields == body.fields
                    && *wait_ms == body.wait_ms
                    && *shadow_rejected == body.shadow_rejected
            })
    }

    /// The kept bytes, if they are `body`'s.
    fn kept(&self, body: &DecisionBody) -> Option<Bytes> {
        if self.repeats(body) {
            self.bytes.clone()
        } else {
            None
        }
    }

    /// Notes `body`, written as `bytes`: kept if it came twice in a row.
    fn saw(&mut self, body: &DecisionBody, bytes: &Bytes) {
        if self.repeats(body) {
            self.bytes = Some(Bytes::copy_from_slice(bytes));
        } else {
            self.last = Some((body.fields.clone(), body.wait_ms, body.shadow_rejected));
            self.bytes = None;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::StatusBody;

    fn body(remaining: u64, reset_after_ms: u64) -> DecisionBody {
        DecisionBody {
            fields: DecisionFields {
                allowed: remaining > 0,
                limit: Some(10),
                remaining: Some(remaining),
                retry_after_ms: 0,
                reset_after_ms,
                delay_ms: 0,
                lease: None,
                degraded: false,
                sync: None,
            },
            wait_ms: None,
            statuses: None,
            shadow_rejected: false,
            ticket: None,
        }
    }

    #[test]
    fn repeated_bodies_are_the_bodies_written_fresh() {
        let mut with_status = body(9, 100);
        with_status.statuses = Some(vec![StatusBody {
            name: Some("per-user".to_owned()),
            fields: body(9, 100).fields,
            shadow: false,
            unlimited: false,
        }]);
        let mut with_ticket = body(9, 100);
        with_ticket.ticket = Some("0".repeat(32));
        let mut waiting = body(9, 100);
        waiting.wait_ms = Some(5);
        let mut shadow = body(9, 100);
        shadow.shadow_rejected = true;
        // Each repeated after a change, and met again after others; the
        // bodies with statuses or a ticket never kept, the others' fields
        // each different from the last's in one way.
        let bodies = [
            body(9, 100),
            body(9, 100),
            body(9, 100),
            body(9, 100),
            body(8, 100),
            body(8, 100),
            body(8, 100),
            body(8, 200),
            body(9, 100),
            body(9, 100),
            with_status.clone(),
            with_status,
            body(9, 100),
            with_ticket.clone(),
            with_ticket,
            waiting.clone(),
            waiting,
            shadow.clone(),
            shadow,
            body(9, 100),
            body(0, 100),
            body(0, 100),
            body(0, 100),
        ];
        for body in bodies {
            let json = body.to_json().unwrap();
            assert_eq!(json, serde_json::to_string(&body).unwrap().as_bytes());
        }
    }
}
