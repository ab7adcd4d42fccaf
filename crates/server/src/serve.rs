//! [`serve`]: runs the HTTP API on a listener until a shutdown signal, then
//! finishes the requests in flight.

use std::future::Future;

use tokio::net::TcpListener;
use tollgate_core::Store;

use crate::app::{router, App};

/// Serves the HTTP API of `app` on `listener` until `shutdown` completes;
/// requests in flight when it does are answered before this returns.
///
/// The listener and the signal are passed in, so a test binds
/// `127.0.0.1:0`, spawns this, and talks to it over a real socket.
pub async fn serve<S: Store>(
    listener: TcpListener,
    app: App<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
}
