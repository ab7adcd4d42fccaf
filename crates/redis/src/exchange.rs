//! The Redis store as the async sync mode's [`Transport`]: a batch of
//! exchanges becomes one pipeline per server (per master on a cluster):
//! each key's usage recorded by the engine deciding now (the module's or
//! the script's `record`, each at its instant), then the key's version-1
//! value read back with `HGET` (docs/redis-state.md). The pipeline is not a
//! transaction: another instance's writes may land between a key's records
//! and its read, and the read then includes them, which is what the mode
//! wants (the newest global state).
//!
//! On a cluster the keys are grouped by the master serving their slot (the
//! `slots` module's map) and the masters' pipelines go at once, each within
//! the store's timeout: a master that fails (killed, not yet replaced by
//! its replica) fails its own keys only, which stay unsent and go with the
//! next batch, as in an outage; the batch is an outage only when every
//! master fails.

use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisResult, Value};
use tollgate_core::{LimitKey, Moment, StoreError};
use tollgate_sync::{Exchange, Transport};

use crate::cells::Cell;
use crate::engine::{self, Engine, Running};
use crate::script::SOURCE;
use crate::slots::slot_of;
use crate::store::{script_error, unavailable, Connection, LazyCluster, RedisStore};

/// What one exchange's pipeline holds: its cell, then how many record
/// calls precede its `HGET`.
struct Planned {
    cell: Cell,
    records: usize,
}

/// Each exchange's answer, in the batch's order.
type Answers = Vec<Result<tollgate_sync::Value, StoreError>>;

impl Transport for RedisStore {
    async fn exchange(&self, batch: &[Exchange<'_>]) -> Result<Answers, StoreError> {
        match &self.inner.connection {
            Connection::Single(..) => self.bounded(self.exchange_single(batch)).await,
            Connection::Cluster(cluster) => self.exchange_cluster(cluster, batch).await,
        }
    }
}

impl RedisStore {
    /// The engine deciding now, and each exchange's cell (or its own
    /// error, already in the answers).
    async fn prepare(
        &self,
        batch: &[Exchange<'_>],
    ) -> Result<(Running, Vec<Option<Planned>>, Answers), StoreError> {
        let running = match self.inner.engine.current() {
            Some(running) => running,
            None => match Box::pin(self.probe()).await {
                Ok(running) => running,
                // A cluster with a master down cannot be asked as a whole;
                // the script runs on every node and reads what the module
                // wrote, so the masters that answer are synced meanwhile.
                Err(_)
                    if matches!(self.inner.connection, Connection::Cluster(_))
                        && self.config().engine != Engine::Module =>
                {
                    Running::Lua
                }
                Err(error) => return Err(error),
            },
        };
        let mut answers: Answers = Vec::with_capacity(batch.len());
        let mut planned: Vec<Option<Planned>> = Vec::with_capacity(batch.len());
        for exchange in batch {
            let request = LimitKey {
                limit: exchange.limit,
                key: exchange.key,
            };
            // A calendar limit's windows around the latest usage (around
            // now when there is none).
            let latest = exchange.usage.iter().map(|u| u.at).max();
            match self.plan(&[request], 0, latest.map_or(Moment::Now, Moment::At)) {
                Ok(plan) => {
                    let cell = plan.cells.into_iter().next();
                    planned.push(cell.map(|cell| Planned {
                        cell,
                        records: exchange.usage.len(),
                    }));
                    answers.push(Ok(None));
                }
                Err(error) => {
                    planned.push(None);
                    answers.push(Err(error));
                }
            }
        }
        Ok((running, planned, answers))
    }

    /// One server: one pipeline; its failure is the batch's.
    async fn exchange_single(&self, batch: &[Exchange<'_>]) -> Result<Answers, StoreError> {
        let (running, planned, mut answers) = self.prepare(batch).await?;
        let group: Vec<usize> = (0..batch.len()).filter(|&i| planned[i].is_some()).collect();
        if group.is_empty() {
            return Ok(answers);
        }
        let values = self
            .exchange_group(running, batch, &planned, &group, None)
            .await?;
        for (i, value) in group.into_iter().zip(values) {
            answers[i] = value;
        }
        Ok(answers)
    }

    /// A cluster: one pipeline per master, all at once, each bounded by
    /// the timeout; a master's failure is its keys'.
    async fn exchange_cluster(
        &self,
        cluster: &LazyCluster,
        batch: &[Exchange<'_>],
    ) -> Result<Answers, StoreError> {
        // Not `bounded`, which takes any failure for a reason to look for
        // the engine again: with a master down, that look fails too.
        let timeout = self.config().timeout;
        let (running, planned, mut answers) = tokio::time::timeout(timeout, self.prepare(batch))
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)))?;
        let map = tokio::time::timeout(timeout, cluster.slot_map())
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)))?;
        // Per master (a slot no master serves: a group of its own, which
        // fails), the first key's slot, to route by, and its exchanges.
        let mut groups: Vec<(Option<usize>, u16, Vec<usize>)> = Vec::new();
        for (i, planned) in planned.iter().enumerate() {
            let Some(planned) = planned else { continue };
            let slot = slot_of(&planned.cell.key);
            let master = map.master_of(slot);
            match groups
                .iter_mut()
                .find(|(m, s, _)| *m == master && (master.is_some() || *s == slot))
            {
                Some((_, _, group)) => group.push(i),
                None => groups.push((master, slot, vec![i])),
            }
        }
        let sent = groups.iter().map(|(_, slot, group)| async {
            tokio::time::timeout(
                timeout,
                self.exchange_group(running, batch, &planned, group, Some(*slot)),
            )
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)))
        });
        let results = futures_util::future::join_all(sent).await;
        let mut failed: Option<StoreError> = None;
        let mut failures = 0;
        let mut redirected = false;
        for ((_, _, group), result) in groups.iter().zip(results) {
            match result {
                Ok(values) => {
                    for (&i, value) in group.iter().zip(values) {
                        redirected |= matches!(&value, Err(e) if moved(e));
                        answers[i] = value;
                    }
                }
                Err(error) => {
                    for &i in group {
                        answers[i] = Err(error.clone());
                    }
                    failed.get_or_insert(error);
                    failures += 1;
                }
            }
        }
        if failed.is_some() || redirected {
            // A master down or replaced, slots moved: read the map again,
            // and let the client start over from the seeds (it finds a
            // promoted replica; see `bounded`).
            cluster.slots_stale();
            cluster.forget();
        }
        match failed {
            // No master answered: an outage.
            Some(error) if failures == groups.len() => Err(error),
            _ => Ok(answers),
        }
    }

    /// The exchanges of `group` (indices into `batch`, each planned) in one
    /// pipeline, to the master of `slot` on a cluster; each one's answer.
    async fn exchange_group(
        &self,
        running: Running,
        batch: &[Exchange<'_>],
        planned: &[Option<Planned>],
        group: &[usize],
        slot: Option<u16>,
    ) -> Result<Answers, StoreError> {
        let mut results = self.send(running, batch, planned, group, slot).await?;
        if running == Running::Lua {
            let (missing, ran) = no_script(&results, planned, group);
            if missing > 0 {
                // The server lost the script (a restart, a failover,
                // SCRIPT FLUSH): a call it did not have ran nothing, so
                // the group goes again once it has it. Some calls that ran
                // would be counted twice: a failure instead.
                if ran > 0 {
                    return Err(StoreError::Unavailable(
                        "tollgate: the script went missing in the middle of a sync batch".into(),
                    ));
                }
                self.load_script(slot).await?;
                results = self.send(running, batch, planned, group, slot).await?;
            }
        }
        let mut results = results.into_iter();
        let mut answers: Answers = Vec::with_capacity(group.len());
        for &i in group {
            let Some(planned) = &planned[i] else {
                answers.push(Ok(None));
                continue;
            };
            let mut failure = None;
            for record in results.by_ref().take(planned.records) {
                if let Err(error) = record {
                    if engine::is_unknown_command(&error) {
                        // Failed over to a node without the module: look
                        // again, send again.
                        self.inner.engine.forget();
                        return Err(unavailable(error));
                    }
                    failure.get_or_insert(error);
                }
            }
            let value = results.next().unwrap_or(Ok(Value::Nil));
            answers.push(match (failure, value) {
                (Some(error), _) => Err(script_error(error, &[&planned.cell])),
                (None, Ok(Value::Nil)) => Ok(None),
                (None, Ok(Value::BulkString(bytes))) => Ok(Some(bytes)),
                (None, Ok(other)) => Err(StoreError::Unavailable(format!(
                    "tollgate: HGET of a state answered {other:?}"
                ))),
                (None, Err(error)) => Err(unavailable(error)),
            });
        }
        Ok(answers)
    }

    /// One pipeline: each exchange of `group`, its records then its read;
    /// on a cluster, to the master of `slot`.
    async fn send(
        &self,
        running: Running,
        batch: &[Exchange<'_>],
        planned: &[Option<Planned>],
        group: &[usize],
        slot: Option<u16>,
    ) -> Result<Vec<RedisResult<Value>>, StoreError> {
        let mut pipeline = redis::pipe();
        for &i in group {
            let Some(planned) = &planned[i] else { continue };
            let mut cell = planned.cell.clone();
            for usage in batch[i].usage {
                cell.cost = usage.cost;
                let at = Moment::At(usage.at);
                pipeline.add_command(match running {
                    Running::Module => self.module_command("record", &[&cell], at, ""),
                    Running::Lua => self.script_command("record", &[&cell], at, ""),
                });
            }
            pipeline
                .cmd("HGET")
                .arg(cell.key.as_slice())
                .arg(cell.limit.field.as_bytes());
        }
        // Each command's error stays its own.
        pipeline.ignore_errors();
        let results: Vec<RedisResult<Value>> = match &self.inner.connection {
            Connection::Single(manager, _) => pipeline
                .query_async(&mut manager.clone())
                .await
                .map_err(unavailable)?,
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                let count = pipeline.len();
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(
                    slot.unwrap_or_default(),
                    SlotAddr::Master,
                ));
                connection
                    .route_pipeline(pipeline, 0, count, route)
                    .await
                    .map_err(unavailable)?
                    .into_iter()
                    .map(Ok)
                    .collect()
            }
        };
        let expected: usize = group
            .iter()
            .filter_map(|&i| planned[i].as_ref())
            .map(|p| p.records + 1)
            .sum();
        if results.len() != expected {
            return Err(StoreError::Unavailable(format!(
                "tollgate: {} replies to a sync pipeline of {expected} commands",
                results.len()
            )));
        }
        Ok(results
            .into_iter()
            .map(|r| r.and_then(|v| v.extract_error()))
            .collect())
    }

    /// Loads the script on the server (on a cluster, on the master of
    /// `slot`).
    async fn load_script(&self, slot: Option<u16>) -> Result<(), StoreError> {
        match &self.inner.connection {
            Connection::Single(manager, _) => self
                .inner
                .script
                .load_async(&mut manager.clone())
                .await
                .map(drop)
                .map_err(unavailable),
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                let mut command = redis::cmd("SCRIPT");
                command.arg("LOAD").arg(SOURCE);
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(
                    slot.unwrap_or_default(),
                    SlotAddr::Master,
                ));
                connection
                    .route_command(
                        command,
                        redis::cluster_routing::RoutingInfo::SingleNode(route),
                    )
                    .await
                    .and_then(|v| v.extract_error())
                    .map(drop)
                    .map_err(unavailable)
            }
        }
    }
}

/// Whether a key's error says its slot is served elsewhere now.
fn moved(error: &StoreError) -> bool {
    let text = error.to_string();
    ["MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN"]
        .iter()
        .any(|word| text.contains(word))
}

/// Of the record calls among `results`, how many found no script and how
/// many ran.
fn no_script(
    results: &[RedisResult<Value>],
    planned: &[Option<Planned>],
    group: &[usize],
) -> (usize, usize) {
    let (mut missing, mut ran, mut at) = (0, 0, 0);
    for &i in group {
        let Some(planned) = &planned[i] else { continue };
        for result in results.iter().skip(at).take(planned.records) {
            match result {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    missing += 1
                }
                _ => ran += 1,
            }
        }
        at += planned.records + 1;
    }
    (missing, ran)
}
