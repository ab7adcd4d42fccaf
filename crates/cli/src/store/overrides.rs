//! Runtime overrides on a shared Redis store: the process's table kept in
//! step with Redis (`tollgate_redis::sync_overrides`), and changes made
//! through the API written to Redis first.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tollgate_redis::{OverrideSink, RedisStore};
use tollgate_rules::overrides::OverrideTable;
use tollgate_server::override_store::{BackendFuture, OverrideBackend};

/// How often an instance reads the overrides' versions from Redis, besides
/// the pub/sub messages: the longest a change can take to arrive when a
/// message is lost.
pub const POLL: Duration = Duration::from_secs(1);

/// The process's table, fed by the sync.
struct TableSink(Arc<OverrideTable>);

impl OverrideSink for TableSink {
    fn apply(&self, domain: &str, key: &[u8], text: Option<&str>) {
        match text {
            Some(text) => {
                if let Err(error) = self.0.put_key(domain, key, text) {
                    tracing::warn!(domain, %error, "an override in Redis is not valid here; left out");
                }
            }
            None => {
                self.0.remove_key(domain, key);
            }
        }
    }

    fn replace_domain(&self, domain: &str, overrides: Vec<(Vec<u8>, String)>) {
        for error in self.0.replace_domain(domain, overrides) {
            tracing::warn!(domain, %error, "an override in Redis is not valid here; left out");
        }
    }

    fn domains(&self) -> Vec<String> {
        self.0.domains().into_iter().map(|(d, _)| d).collect()
    }
}

/// Redis as the overrides' home.
pub struct RedisBackend(pub RedisStore);

impl OverrideBackend for RedisBackend {
    fn put<'a>(&'a self, domain: &'a str, key: &'a [u8], text: &'a str) -> BackendFuture<'a, bool> {
        Box::pin(async move {
            let (_, replaced) = self.0.put_override(domain, key, text).await?;
            Ok(replaced)
        })
    }

    fn remove<'a>(&'a self, domain: &'a str, key: &'a [u8]) -> BackendFuture<'a, bool> {
        Box::pin(self.0.remove_override(domain, key))
    }
}

/// Starts keeping `table` in step with `redis`, for the life of the
/// process.
pub fn sync(redis: RedisStore, table: Arc<OverrideTable>) -> JoinHandle<()> {
    tokio::spawn(tollgate_redis::sync_overrides(
        redis,
        Arc::new(TableSink(table)),
        POLL,
    ))
}
