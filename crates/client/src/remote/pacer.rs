//! [`RemotePacer`]: book a slot on the service, then sleep until it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::refused;
use super::{base_url, http_client, Quota, RemoteError, DEFAULT_TIMEOUT};

/// Paces calls through the tollgate service's `POST /v1/reserve`.
///
/// Every worker, in any process, that paces through the same service with
/// the same [`Quota`] shares its limit: each [`until_ready`] books the
/// earliest free slot atomically and sleeps until it, so no slot is taken
/// twice and nobody polls. Cheap to clone (one connection pool).
///
/// A future dropped after its slot was booked (during the sleep) leaves
/// that slot unused: the quota is under-used, never exceeded.
///
/// [`until_ready`]: RemotePacer::until_ready
#[derive(Debug, Clone)]
pub struct RemotePacer {
    http: reqwest::Client,
    reserve_url: String,
    quota: Quota,
    max_wait: Option<Duration>,
}

#[derive(Serialize)]
struct ReserveRequest<'a> {
    #[serde(flatten)]
    quota: &'a Quota,
    cost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_wait_ms: Option<u64>,
}

#[derive(Deserialize)]
struct Booked {
    wait_ms: u64,
}

#[derive(Deserialize)]
struct NotBooked {
    retry_after_ms: u64,
}

impl RemotePacer {
    /// A pacer on the service at `server` (`http://host:port`).
    pub fn new(server: &str, quota: Quota) -> Result<RemotePacer, RemoteError> {
        Ok(RemotePacer {
            http: http_client(DEFAULT_TIMEOUT)?,
            reserve_url: format!("{}/v1/reserve", base_url(server)?),
            quota,
            max_wait: None,
        })
    }

    /// Refuse slots further than `max_wait` ([`RemoteError::TooLong`],
    /// nothing booked). No bound by default.
    pub fn with_max_wait(mut self, max_wait: Duration) -> RemotePacer {
        self.max_wait = Some(max_wait);
        self
    }

    /// How long one call to the service may take (5 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<RemotePacer, RemoteError> {
        self.http = http_client(timeout)?;
        Ok(self)
    }

    /// Waits until one call may go.
    pub async fn until_ready(&self) -> Result<(), RemoteError> {
        self.until_n_ready(1).await
    }

    /// Waits until a call of weight `cost` may go.
    pub async fn until_n_ready(&self, cost: u64) -> Result<(), RemoteError> {
        let wait = self.reserve(cost).await?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Books the earliest slot for `cost` and returns how long to wait for
    /// it, without waiting.
    pub async fn reserve(&self, cost: u64) -> Result<Duration, RemoteError> {
        let request = ReserveRequest {
            quota: &self.quota,
            cost,
            max_wait_ms: self
                .max_wait
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        let response = self
            .http
            .post(&self.reserve_url)
            .json(&request)
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| RemoteError::Unreachable(e.to_string()))?;
        let bad = |e: serde_json::Error| RemoteError::BadAnswer(e.to_string());
        match status {
            200 => {
                let booked: Booked = serde_json::from_slice(&body).map_err(bad)?;
                Ok(Duration::from_millis(booked.wait_ms))
            }
            429 => {
                let not: NotBooked = serde_json::from_slice(&body).map_err(bad)?;
                Err(RemoteError::TooLong {
                    retry_after: Duration::from_millis(not.retry_after_ms),
                })
            }
            _ => Err(refused(status, &body)),
        }
    }
}
