//! Protocol upgrades (WebSocket, and any other `Connection: upgrade`
//! protocol): the request is forwarded with its `Upgrade` field, and when
//! the upstream answers `101 Switching Protocols` the two connections are
//! joined byte for byte until either side closes.
//!
//! The gateway does not speak the upgraded protocol; it copies bytes. A
//! joined pair lives in its own task: it outlasts the request that opened
//! it, and is not waited for at shutdown (it ends when the process does).

use http::{Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::body::ProxyBody;
use crate::hop_by_hop::{self, Upgrade};

/// The answer to an upgrade request: the upstream's `101` passed on, with
/// both connections joined once each has been handed over; or, if the
/// upstream declined, its answer as any other.
pub(crate) fn answer(mut response: Response<Incoming>, client: OnUpgrade) -> Response<ProxyBody> {
    let switching = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        let upstream = hyper::upgrade::on(&mut response);
        tokio::spawn(join(client, upstream));
    }
    let (mut parts, body) = response.into_parts();
    parts.version = Version::HTTP_11;
    hop_by_hop::strip(
        &mut parts.headers,
        if switching {
            Upgrade::Keep
        } else {
            Upgrade::Remove
        },
    );
    let body = if switching {
        ProxyBody::empty()
    } else {
        ProxyBody::upstream(body)
    };
    Response::from_parts(parts, body)
}

/// Copies bytes both ways between the client's and the upstream's
/// upgraded connections until both directions are closed.
async fn join(client: OnUpgrade, upstream: OnUpgrade) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::debug!(%error, "upgrade abandoned before both sides switched");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut upstream = TokioIo::new(upstream);
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((sent, received)) => {
            tracing::debug!(sent, received, "upgraded connection closed")
        }
        Err(error) => tracing::debug!(%error, "upgraded connection broken"),
    }
}
