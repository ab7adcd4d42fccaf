//! [`ProxyBody`]: the body of every answer the proxy gives — the
//! upstream's body passed through frame by frame, or a small body the
//! gateway wrote itself (an error's problem details).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The body of a [`Proxy`](super::Proxy) answer.
///
/// An upstream body is never collected: each frame goes to the client as
/// soon as the upstream sends it, and the next is read only when the
/// client's connection has taken it, so memory stays flat however large
/// the body. Its length and end are passed on too (`size_hint`,
/// `is_end_stream`), so a `Content-Length` answer stays one.
#[derive(Debug)]
pub struct ProxyBody {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Upstream(Incoming),
    Local(Full<Bytes>),
}

impl ProxyBody {
    /// The upstream's body, passed through.
    pub fn upstream(body: Incoming) -> ProxyBody {
        ProxyBody {
            kind: Kind::Upstream(body),
        }
    }

    /// A body the gateway wrote.
    pub fn local(bytes: impl Into<Bytes>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Local(Full::new(bytes.into())),
        }
    }

    /// No body.
    pub fn empty() -> ProxyBody {
        ProxyBody::local(Bytes::new())
    }
}

impl From<Incoming> for ProxyBody {
    fn from(body: Incoming) -> ProxyBody {
        ProxyBody::upstream(body)
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    /// The upstream connection's error (reset, or closed mid-body); a local
    /// body cannot fail.
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        // Both kinds are Unpin, so no pin projection is needed.
        match &mut self.kind {
            Kind::Upstream(body) => Pin::new(body).poll_frame(cx),
            Kind::Local(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never: Infallible| match never {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream(body) => body.is_end_stream(),
            Kind::Local(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream(body) => body.size_hint(),
            Kind::Local(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_local_body_has_its_length_and_bytes() {
        let body = ProxyBody::local("{}");
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        assert_eq!(body.collect().await.unwrap().to_bytes(), "{}");
        assert!(ProxyBody::empty().is_end_stream());
    }
}
