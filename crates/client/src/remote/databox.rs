//! [`DataboxPacer`]: the Databox pair, `GET /delay` and `POST /increment`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::refused;
use super::{base_url, http_client, RemoteError, DEFAULT_TIMEOUT};

/// Paces with the Databox pair on the service's `stepped_window` limit of
/// `requests` per `interval` seconds for `id`.
///
/// [`until_ready`](DataboxPacer::until_ready) asks `/delay` until it says
/// "now"; the caller makes its call and then records it with
/// [`increment`](DataboxPacer::increment). Between the last `/delay` and the
/// `/increment`, other workers can be told "now" too, so several workers
/// may overshoot together; use [`RemotePacer`](super::RemotePacer) when
/// that matters.
#[derive(Debug, Clone)]
pub struct DataboxPacer {
    http: reqwest::Client,
    base: String,
    id: String,
    interval_secs: u64,
    requests: u64,
    step: Option<String>,
}

#[derive(Serialize)]
struct IncrementRequest<'a> {
    id: &'a str,
    interval: u64,
    requests: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a str>,
}

#[derive(Deserialize)]
struct Counted {
    count: u64,
}

#[derive(Deserialize)]
struct Delay {
    delay_ms: u64,
}

impl DataboxPacer {
    /// A pacer for quota `id`, `requests` per `interval_secs` seconds.
    pub fn new(
        server: &str,
        id: impl Into<String>,
        requests: u64,
        interval_secs: u64,
    ) -> Result<DataboxPacer, RemoteError> {
        Ok(DataboxPacer {
            http: http_client(DEFAULT_TIMEOUT)?,
            base: base_url(server)?,
            id: id.into(),
            interval_secs,
            requests,
            step: None,
        })
    }

    /// The window's step (e.g. `"1s"`) instead of the default step table.
    pub fn with_step(mut self, step: impl Into<String>) -> DataboxPacer {
        self.step = Some(step.into());
        self
    }

    /// How long until the next call may go (zero: now). Counts nothing.
    pub async fn delay(&self) -> Result<Duration, RemoteError> {
        let mut query = vec![
            ("id", self.id.clone()),
            ("interval", self.interval_secs.to_string()),
            ("requests", self.requests.to_string()),
        ];
        if let Some(step) = &self.step {
            query.push(("step", step.clone()));
        }
        let response = self
            .http
            .get(format!("{}/delay", self.base))
            .query(&query)
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(e.to_string()))?;
        let delay: Delay = decode(response).await?;
        Ok(Duration::from_millis(delay.delay_ms))
    }

    /// Asks `/delay` and sleeps until it answers "now".
    pub async fn until_ready(&self) -> Result<(), RemoteError> {
        loop {
            let delay = self.delay().await?;
            if delay.is_zero() {
                return Ok(());
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Records a call made now; returns the count now in the window.
    pub async fn increment(&self) -> Result<u64, RemoteError> {
        self.record(None).await
    }

    /// Records a call made at `at`.
    pub async fn increment_at(&self, at: SystemTime) -> Result<u64, RemoteError> {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.record(Some(ms)).await
    }

    async fn record(&self, timestamp: Option<u64>) -> Result<u64, RemoteError> {
        let request = IncrementRequest {
            id: &self.id,
            interval: self.interval_secs,
            requests: self.requests,
            timestamp,
            step: self.step.as_deref(),
        };
        let response = self
            .http
            .post(format!("{}/increment", self.base))
            .json(&request)
            .send()
            .await
            .map_err(|e| RemoteError::Unreachable(e.to_string()))?;
        let counted: Counted = decode(response).await?;
        Ok(counted.count)
    }
}

async fn decode<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, RemoteError> {
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|e| RemoteError::Unreachable(e.to_string()))?;
    if status != 200 {
        return Err(refused(status, &body));
    }
    serde_json::from_slice(&body).map_err(|e| RemoteError::BadAnswer(e.to_string()))
}
