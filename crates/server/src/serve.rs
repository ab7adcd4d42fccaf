//! [`serve`]: runs the HTTP API on a listener until a shutdown signal, then
//! finishes the requests in flight.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tollgate_core::Store;
use tollgate_listener::{ConnectionSettings, Protocols};

use crate::app::{router, App};

/// Serves the HTTP API of `app` on `listener` until `shutdown` completes;
/// requests in flight when it does are answered before this returns.
///
/// Connections are held to `connections` (see `tollgate_listener`): a
/// request body the client stops sending answers `408 body_timeout`, and
/// connections are counted in `app`'s metrics under `listener="http"`.
///
/// Every rule's counters are sampled every ten seconds meanwhile, for the
/// dashboard's rates and sparklines.
///
/// The listener and the signal are passed in, so a test binds
/// `127.0.0.1:0`, spawns this, and talks to it over a real socket.
pub async fn serve<S: Store>(
    listener: TcpListener,
    app: App<S>,
    connections: ConnectionSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let observer = Arc::new(app.metrics().connections("http"));
    let sampled = app.clone();
    let sampler = tokio::spawn(crate::history::sampling(move |now_ms| {
        sampled.metrics().sample(now_ms);
    }));
    let router = router(app);
    let served = tollgate_listener::serve(
        listener,
        connections,
        Protocols::Http1And2,
        observer,
        move |_| (router.clone(), std::future::pending()),
        shutdown,
    )
    .await;
    sampler.abort();
    served
}
