//! The shutdown signal of the long-running subcommands: SIGINT or SIGTERM.
//!
//! [`Shutdown::install`] puts the handlers in place at once, and the
//! servers call it before they announce their addresses: a signal sent as
//! soon as an address is known is caught and starts a graceful shutdown.
//! (Registered lazily, on the first poll of a spawned task, a signal that
//! came first met the default action and ended the process where it
//! stood.)

use std::io;

/// Installed SIGINT and SIGTERM handlers.
#[derive(Debug)]
pub struct Shutdown {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Shutdown {
    /// Installs the handlers (on the current tokio runtime).
    pub fn install() -> io::Result<Shutdown> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Shutdown {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Shutdown {})
        }
    }

    /// Completes on the first SIGINT or SIGTERM since [`install`](Self::install).
    pub async fn received(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown signal received; finishing requests in flight");
    }
}
