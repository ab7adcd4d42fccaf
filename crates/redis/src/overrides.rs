//! Runtime overrides kept in Redis, so that every tollgate instance on one
//! Redis (or Redis Cluster) sees a change at once.
//!
//! # Layout
//!
//! Under the store's key prefix `P` (default `tollgate:`), all in one hash
//! slot (the `{overrides}` tag), so a change is one atomic script on a
//! cluster too:
//!
//! - `P{overrides}:d:DOMAIN`: a hash per domain, the descriptor's key
//!   (each entry's key and value, length-prefixed) to the limit's text;
//! - `P{overrides}:versions`: a hash, each domain to a number that every
//!   change of the domain raises by one;
//! - the channel `P{overrides}:changes`: one message per change,
//!   `len:VERSION` `len:DOMAIN` then the descriptor's key.
//!
//! A change (`HSET` or `HDEL`, `HINCRBY` of the domain's version and
//! `PUBLISH`) is one script: no instance can see the data without the
//! version, or miss a version's message while the data is older.
//!
//! # Keeping an instance in step
//!
//! [`sync_overrides`] runs for the life of an instance. It subscribes to
//! the channel, then reads every domain (each with its version read first,
//! so that any change after the read also arrives as a message), and hands
//! each to an [`OverrideSink`] (the process's table). A message whose
//! version follows the one it knows is applied on its own (the field read
//! back with `HGET`: absent means removed); a gap (a message lost while the
//! subscription was down) reads the whole domain again. Besides, every
//! `poll` it reads the versions hash and reads again each domain whose
//! version differs, so a change is seen within `poll` even when pub/sub
//! fails; a lost connection is made again. Applying a change twice is
//! harmless: the instance that made it applies it at once, then again from
//! its own message.
//!
//! Overrides are configuration: their keys never expire.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tollgate_core::StoreError;

use crate::store::RedisStore;

/// Where a shared store's overrides go in a process: the table that
/// decisions read.
pub trait OverrideSink: Send + Sync + 'static {
    /// Sets `domain`'s override for the descriptor `key` to `text`, or
    /// removes it (`None`).
    fn apply(&self, domain: &str, key: &[u8], text: Option<&str>);
    /// Replaces every override of `domain`.
    fn replace_domain(&self, domain: &str, overrides: Vec<(Vec<u8>, String)>);
    /// The domains that have overrides here.
    fn domains(&self) -> Vec<String>;
}

/// The change script: `KEYS[1]` the domain's hash, `KEYS[2]` the versions
/// hash; `ARGV` the domain, the descriptor's key, the channel, and the
/// limit's text (absent: remove). Returns the domain's new version (or
/// the old one when a removal found nothing), whether anything changed,
/// and whether a put replaced an override (1) or added one (0).
const CHANGE: &str = r"
local changed, replaced = true, 0
if ARGV[4] then
  replaced = 1 - redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
else
  changed = redis.call('HDEL', KEYS[1], ARGV[2]) == 1
end
if not changed then
  return {tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0'), 0, 0}
end
local version = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
local v = tostring(version)
redis.call('PUBLISH', ARGV[3], #v .. ':' .. v .. #ARGV[1] .. ':' .. ARGV[1] .. ARGV[2])
return {version, 1, replaced}
";

/// Reads a domain's version and every override it has, in pages of this
/// many fields (`HSCAN`), so that a million overrides never make one
/// reply that blocks Redis.
const SCAN_COUNT: usize = 1_000;

impl RedisStore {
    fn overrides_key(&self, part: &str) -> String {
        format!("{}{{overrides}}:{part}", self.config().key_prefix)
    }

    fn domain_key(&self, domain: &str) -> Vec<u8> {
        let mut key = self.overrides_key("d:").into_bytes();
        key.extend_from_slice(domain.as_bytes());
        key
    }

    /// The channel every change is published on.
    pub fn overrides_channel(&self) -> String {
        self.overrides_key("changes")
    }

    /// Sets `domain`'s override for the descriptor `key` to the limit
    /// `text`, for every instance; the domain's new version, and whether
    /// it replaced an override (as Redis holds it, whatever this
    /// instance's copy of the table has seen yet).
    pub async fn put_override(
        &self,
        domain: &str,
        key: &[u8],
        text: &str,
    ) -> Result<(u64, bool), StoreError> {
        self.change_override(domain, key, Some(text))
            .await
            .map(|(v, _, replaced)| (v, replaced))
    }

    /// Removes `domain`'s override for the descriptor `key`, for every
    /// instance; whether there was one.
    pub async fn remove_override(&self, domain: &str, key: &[u8]) -> Result<bool, StoreError> {
        self.change_override(domain, key, None)
            .await
            .map(|(_, changed, _)| changed)
    }

    async fn change_override(
        &self,
        domain: &str,
        key: &[u8],
        text: Option<&str>,
    ) -> Result<(u64, bool, bool), StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CHANGE)
            .arg(2)
            .arg(self.domain_key(domain))
            .arg(self.overrides_key("versions"))
            .arg(domain)
            .arg(key)
            .arg(self.overrides_channel());
        if let Some(text) = text {
            cmd.arg(text);
        }
        let (version, changed, replaced): (u64, u8, u8) = self.bounded(self.command(cmd)).await?;
        Ok((version, changed == 1, replaced == 1))
    }

    /// Every domain's version.
    pub async fn override_versions(&self) -> Result<HashMap<String, u64>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.overrides_key("versions"));
        self.bounded(self.command(cmd)).await
    }

    /// `domain`'s override for the descriptor `key`, if any.
    pub async fn get_override(
        &self,
        domain: &str,
        key: &[u8],
    ) -> Result<Option<String>, StoreError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.domain_key(domain)).arg(key);
        self.bounded(self.command(cmd)).await
    }

    /// Every override of `domain`, read a page at a time.
    pub async fn domain_overrides(
        &self,
        domain: &str,
    ) -> Result<Vec<(Vec<u8>, String)>, StoreError> {
        let key = self.domain_key(domain);
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut cmd = redis::cmd("HSCAN");
            cmd.arg(&key).arg(cursor).arg("COUNT").arg(SCAN_COUNT);
            let (next, fields): (u64, Vec<(Vec<u8>, String)>) =
                self.bounded(self.command(cmd)).await?;
            out.extend(fields);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // HSCAN may return a field twice: the last one wins.
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        Ok(out)
    }
}

/// One message of the changes channel: version, domain, descriptor key.
fn parse_message(payload: &[u8]) -> Option<(u64, String, Vec<u8>)> {
    let (version, rest) = part(payload)?;
    let version = std::str::from_utf8(version).ok()?.parse().ok()?;
    let (domain, key) = part(rest)?;
    Some((
        version,
        String::from_utf8(domain.to_vec()).ok()?,
        key.to_vec(),
    ))
}

/// `len:bytes` off the front of `input`, and the rest.
fn part(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = input.iter().position(|&b| b == b':')?;
    let len: usize = std::str::from_utf8(&input[..colon]).ok()?.parse().ok()?;
    let body = input.get(colon + 1..colon + 1 + len)?;
    Some((body, &input[colon + 1 + len..]))
}

/// What an instance knows of each domain: the version its overrides are
/// at.
struct Known {
    versions: HashMap<String, u64>,
}

impl Known {
    /// Reads `domain` whole and hands it to `sink`; its version read
    /// first, so later changes still arrive as messages.
    async fn resync(
        &mut self,
        store: &RedisStore,
        sink: &dyn OverrideSink,
        domain: &str,
        version: u64,
    ) -> Result<(), StoreError> {
        let overrides = store.domain_overrides(domain).await?;
        sink.replace_domain(domain, overrides);
        self.versions.insert(domain.to_owned(), version);
        Ok(())
    }

    /// Reads every domain whose version differs from the one known (and
    /// clears those Redis no longer has).
    async fn poll(
        &mut self,
        store: &RedisStore,
        sink: &dyn OverrideSink,
    ) -> Result<(), StoreError> {
        let remote = store.override_versions().await?;
        for (domain, version) in &remote {
            if self.versions.get(domain) != Some(version) {
                self.resync(store, sink, domain, *version).await?;
            }
        }
        let mut local: Vec<String> = sink.domains();
        local.extend(self.versions.keys().cloned());
        for domain in local {
            if !remote.contains_key(&domain) {
                sink.replace_domain(&domain, Vec::new());
                self.versions.remove(&domain);
            }
        }
        Ok(())
    }

    /// One message: applied on its own when it follows the version known,
    /// otherwise the domain read again.
    async fn message(
        &mut self,
        store: &RedisStore,
        sink: &dyn OverrideSink,
        payload: &[u8],
    ) -> Result<(), StoreError> {
        let Some((version, domain, key)) = parse_message(payload) else {
            tracing::warn!("an override change message that does not parse; ignored");
            return Ok(());
        };
        let known = self.versions.get(&domain).copied().unwrap_or(0);
        if version <= known {
            return Ok(());
        }
        if version == known + 1 {
            let text = store.get_override(&domain, &key).await?;
            sink.apply(&domain, &key, text.as_deref());
            self.versions.insert(domain, version);
            return Ok(());
        }
        // A gap: read the version first, then the domain.
        let remote = store.override_versions().await?;
        let now = remote.get(&domain).copied().unwrap_or(version);
        self.resync(store, sink, &domain, now).await
    }
}

/// Keeps `sink` in step with the overrides in `store`'s Redis, until the
/// task is dropped: subscribed to their changes, and reading the versions
/// every `poll` (see the module's documentation). Failures are logged and
/// retried every `poll`; they never end the task.
pub async fn sync_overrides(store: RedisStore, sink: Arc<dyn OverrideSink>, poll: Duration) {
    let mut known = Known {
        versions: HashMap::new(),
    };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let subscription = match store.override_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(store.overrides_channel()).await {
                Ok(()) => Some(pubsub),
                Err(error) => {
                    tracing::warn!(%error, "overrides: subscribing failed; polling");
                    None
                }
            },
            Err(error) => {
                tracing::warn!(%error, "overrides: no pub/sub connection; polling");
                None
            }
        };
        // Subscribed first, then read: nothing falls between the two.
        if let Err(error) = known.poll(&store, sink.as_ref()).await {
            tracing::warn!(%error, "overrides: reading them from Redis failed");
        }
        let Some(pubsub) = subscription else {
            tick.tick().await;
            continue;
        };
        let mut messages = pubsub.into_on_message();
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { break };
                    if let Err(error) = known.message(&store, sink.as_ref(), message.get_payload_bytes()).await {
                        tracing::warn!(%error, "overrides: applying a change failed; the next poll reads it");
                    }
                }
                _ = tick.tick() => {
                    if let Err(error) = known.poll(&store, sink.as_ref()).await {
                        tracing::warn!(%error, "overrides: polling Redis failed");
                    }
                }
            }
        }
        tracing::warn!("overrides: the pub/sub connection closed; connecting again");
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_and_bad_ones_do_not() {
        assert_eq!(
            parse_message(b"1:73:api4:user2:42"),
            Some((7, "api".to_owned(), b"4:user2:42".to_vec()))
        );
        for bad in [&b""[..], b"x:7", b"1:x3:api", b"1:79:api"] {
            assert_eq!(parse_message(bad), None, "{bad:?}");
        }
    }
}
