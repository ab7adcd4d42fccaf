//! [`Head`]: what a decision reads of a request (method, URI, headers,
//! extensions), borrowed from the whole request or from its parts.
//!
//! A decision made in the service's `call` reads the request where it is:
//! splitting it into parts and putting it back together moved its ~300
//! bytes twice per request.

use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri};

/// The head of a request, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head<'a> {
    pub(crate) method: &'a Method,
    pub(crate) uri: &'a Uri,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) extensions: &'a Extensions,
}

impl<'a> Head<'a> {
    /// The head of a whole request.
    pub(crate) fn of<B>(request: &'a Request<B>) -> Head<'a> {
        Head {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }

    /// The head of a request split into its parts.
    pub(crate) fn of_parts(parts: &'a Parts) -> Head<'a> {
        Head {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}
