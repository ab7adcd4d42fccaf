//! [`ReactiveLayer`]: the reactive limiter as a `tower` layer, for hyper
//! clients and anything else that is a `Service<http::Request<B>>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt};

use super::ReactiveLimiter;
use crate::clock::{RealClock, WaitClock};

/// Wraps a client service so each request waits for its key's turn and
/// each answer teaches the limiter. Requests are keyed by the URI's host
/// and port (`host:port`, the port the scheme implies when absent).
#[derive(Debug)]
pub struct ReactiveLayer<C: WaitClock = RealClock> {
    limiter: Arc<ReactiveLimiter<C>>,
}

impl<C: WaitClock> Clone for ReactiveLayer<C> {
    fn clone(&self) -> Self {
        ReactiveLayer {
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<C: WaitClock> ReactiveLayer<C> {
    /// A layer over `limiter` (which other layers and clients may share).
    pub fn new(limiter: Arc<ReactiveLimiter<C>>) -> Self {
        ReactiveLayer { limiter }
    }
}

impl<S, C: WaitClock> Layer<S> for ReactiveLayer<C> {
    type Service = ReactiveService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        ReactiveService {
            inner,
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// The service [`ReactiveLayer`] makes.
#[derive(Debug)]
pub struct ReactiveService<S, C: WaitClock = RealClock> {
    inner: S,
    limiter: Arc<ReactiveLimiter<C>>,
}

impl<S: Clone, C: WaitClock> Clone for ReactiveService<S, C> {
    fn clone(&self) -> Self {
        ReactiveService {
            inner: self.inner.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// `host:port` of a request's URI.
fn key_of(uri: &http::Uri) -> String {
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    format!("{}:{port}", uri.host().unwrap_or(""))
}

impl<S, B, R, C> Service<http::Request<B>> for ReactiveService<S, C>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    C: WaitClock + Send + Sync + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    /// Always ready: the wait happens in the call, where the key is known,
    /// and the inner service's readiness is awaited there too.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let limiter = Arc::clone(&self.limiter);
        Box::pin(async move {
            let key = key_of(request.uri());
            let permit = limiter.until_ready(&key).await;
            let response = inner.oneshot(request).await?;
            permit.observe(response.status().as_u16(), response.headers());
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_host_and_port() {
        let key = |u: &str| key_of(&u.parse().unwrap_or_default());
        assert_eq!(key("https://api.example/x"), "api.example:443");
        assert_eq!(key("http://api.example/x"), "api.example:80");
        assert_eq!(key("http://127.0.0.1:9000/x"), "127.0.0.1:9000");
    }
}
