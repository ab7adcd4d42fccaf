//! [`ReactiveClient`]: a `reqwest` client whose calls go through a
//! [`ReactiveLimiter`].

use std::sync::Arc;

use super::ReactiveLimiter;
use crate::clock::{RealClock, WaitClock};

/// Sends requests with `reqwest`, each waiting for its key's turn first and
/// teaching the limiter with its answer. Calls are keyed by the URL's host
/// and port unless given a key; clones share the limiter.
#[derive(Debug)]
pub struct ReactiveClient<C: WaitClock = RealClock> {
    http: reqwest::Client,
    limiter: Arc<ReactiveLimiter<C>>,
}

impl<C: WaitClock> Clone for ReactiveClient<C> {
    fn clone(&self) -> Self {
        ReactiveClient {
            http: self.http.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl ReactiveClient<RealClock> {
    /// `http` paced by a new limiter with the default settings.
    pub fn new(http: reqwest::Client) -> Self {
        ReactiveClient::with_limiter(http, Arc::new(ReactiveLimiter::new()))
    }
}

impl<C: WaitClock> ReactiveClient<C> {
    /// `http` paced by `limiter` (which other clients may share).
    pub fn with_limiter(http: reqwest::Client, limiter: Arc<ReactiveLimiter<C>>) -> Self {
        ReactiveClient { http, limiter }
    }

    /// The limiter.
    pub fn limiter(&self) -> &ReactiveLimiter<C> {
        &self.limiter
    }

    /// The underlying client, to build requests with.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends `request` when its host's turn comes.
    pub async fn execute(&self, request: reqwest::Request) -> reqwest::Result<reqwest::Response> {
        let url = request.url();
        let key = format!(
            "{}:{}",
            url.host_str().unwrap_or(""),
            url.port_or_known_default().unwrap_or(0)
        );
        self.execute_keyed(&key, request).await
    }

    /// Sends `request` when `key`'s turn comes (a key per host and token,
    /// for instance).
    pub async fn execute_keyed(
        &self,
        key: &str,
        request: reqwest::Request,
    ) -> reqwest::Result<reqwest::Response> {
        let permit = self.limiter.until_ready(key).await;
        let response = self.http.execute(request).await?;
        permit.observe(response.status().as_u16(), response.headers());
        Ok(response)
    }
}
