//! Pacing through the tollgate service, so that many processes share one
//! external quota.
//!
//! - [`RemotePacer`] books slots with `POST /v1/reserve` and sleeps exactly
//!   the wait the service answers. Booking is atomic on the service, so
//!   concurrent workers in any number of processes never take the same
//!   slot, and nobody polls.
//! - [`DataboxPacer`] speaks the Databox pair: `GET /delay` says how long
//!   until the next call may go, `POST /increment` records a call after it
//!   was made. It is for deployments that count calls after the fact; two
//!   workers can both see "go now" between a `delay` and their `increment`,
//!   which is why [`RemotePacer`] is the default.
//!
//! The wait the service answers is rounded up to the millisecond and the
//! sleep starts when the answer arrives, so a call never goes before its
//! slot; it goes late by the network time. A provider that counts in an
//! exact window sees that lateness as jitter: configure the limit slightly
//! under the provider's (for example `100/10300ms` for a provider's 100 per
//! 10 s) by the lateness you expect. `docs/client.md` shows each mode.

mod databox;
mod error;
mod pacer;
mod quota;

pub use databox::DataboxPacer;
pub use error::RemoteError;
pub use pacer::RemotePacer;
pub use quota::{Descriptor, InlineLimit, Quota};

/// How long one call to the service may take unless configured.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The base URL without a trailing slash, refusing anything but
/// `http://`. (The service is reached over a private network or a local
/// sidecar; the client carries no TLS stack yet.)
fn base_url(server: &str) -> Result<String, RemoteError> {
    let trimmed = server.trim_end_matches('/');
    if !trimmed.starts_with("http://") || trimmed.len() <= "http://".len() {
        return Err(RemoteError::InvalidServer(server.to_owned()));
    }
    Ok(trimmed.to_owned())
}

fn http_client(timeout: std::time::Duration) -> Result<reqwest::Client, RemoteError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| RemoteError::Unreachable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            base_url("http://127.0.0.1:8080/").ok().as_deref(),
            Some("http://127.0.0.1:8080")
        );
        for bad in ["", "127.0.0.1:8080", "ftp://x", "http://", "https://h:1"] {
            assert!(
                matches!(base_url(bad), Err(RemoteError::InvalidServer(_))),
                "{bad}"
            );
        }
    }
}
