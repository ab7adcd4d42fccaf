//! The Redis store as the async sync mode's [`Transport`]: a batch of
//! exchanges becomes one pipeline per server (per master on a cluster).
//! With the module, each key's usage is recorded at its instants and its
//! version-1 value (docs/redis-state.md) read back by `TOLLGATE.SYNC`, a
//! call per few hundred keys (per key on a cluster, where a call's keys
//! share a slot); a module of an earlier release without that command
//! gets what the script gets. With the script, each usage is one `record`
//! call and the value is read back with `HGET`. The pipeline is not a
//! transaction: another instance's writes may land between a key's records
//! and its read (between two calls), and the read then includes them,
//! which is what the mode wants (the newest global state).
//!
//! On a cluster the keys are grouped by the master serving their slot (the
//! `slots` module's map) and the masters' pipelines go at once, each within
//! the store's timeout: a master that fails (killed, not yet replaced by
//! its replica) fails its own keys only, which stay unsent and go with the
//! next batch, as in an outage; the batch is an outage only when every
//! master fails.

use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisResult, Value};
use std::sync::Arc;

use tollgate_core::{Limit, Moment, StoreError};
use tollgate_sync::{Exchange, Transport, Usage};

use crate::cells::{self, Cell};
use crate::engine::{self, Engine, Running};
use crate::limits::Prepared;
use crate::script::SOURCE;
use crate::slots::slot_of;
use crate::store::{script_error, unavailable, Connection, LazyCluster, RedisStore};

/// What one exchange's pipeline holds: its cell, then how many record
/// calls precede its `HGET`.
struct Planned {
    cell: Cell,
    records: usize,
}

/// The module's command for a batch (`crates/redis-module/src/sync.rs`).
const SYNC_COMMAND: &str = "TOLLGATE.SYNC";

/// The most keys one `TOLLGATE.SYNC` call carries: a call runs alone on
/// Redis's main thread, so a batch of many keys goes as several calls.
const SYNC_CALL_KEYS: usize = 256;

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
        // A batch holds each limit's keys one after another: its prepared
        // form is looked up once per run of them.
        let mut last: Option<(&Limit, Arc<Prepared>)> = None;
        for exchange in batch {
            let prepared = match &last {
                Some((limit, prepared))
                    if std::ptr::eq(*limit, exchange.limit) || **limit == *exchange.limit =>
                {
                    Ok(Arc::clone(prepared))
                }
                _ => self.inner.limits.get(exchange.limit),
            };
            let prepared = match prepared {
                Ok(prepared) => prepared,
                Err(error) => {
                    planned.push(None);
                    answers.push(Err(error));
                    continue;
                }
            };
            last = Some((exchange.limit, Arc::clone(&prepared)));
            // A calendar limit's windows around the latest usage (around
            // now when there is none), as `plan` has them.
            let windows = exchange.limit.calendar.map(|calendar| {
                let instant = exchange
                    .usage
                    .iter()
                    .map(|u| u.at)
                    .max()
                    .unwrap_or_else(system_now);
                cells::calendar_windows(&calendar, instant).into_boxed_str()
            });
            planned.push(Some(Planned {
                cell: Cell {
                    key: self.redis_key(exchange.key),
                    limit: prepared,
                    cost: 0,
                    windows,
                },
                records: exchange.usage.len(),
            }));
            answers.push(Ok(None));
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
        if running == Running::Module && self.inner.engine.sync_call() {
            match self.send_sync(batch, planned, group, slot).await? {
                Some(answers) => return Ok(answers),
                // A module of an earlier release: the calls below, until
                // the next probe.
                None => self.inner.engine.no_sync_call(),
            }
        }
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

    /// The exchanges of `group` as `TOLLGATE.SYNC` calls in one pipeline
    /// (on a cluster, to the master of `slot`), each call of at most
    /// [`SYNC_CALL_KEYS`] keys (one on a cluster, where a call's keys
    /// must share a slot); each exchange's answer. `None` when the server
    /// does not know the command (then none of it ran).
    async fn send_sync(
        &self,
        batch: &[Exchange<'_>],
        planned: &[Option<Planned>],
        group: &[usize],
        slot: Option<u16>,
    ) -> Result<Option<Answers>, StoreError> {
        let per_call = if slot.is_some() { 1 } else { SYNC_CALL_KEYS };
        let mut pipeline = redis::pipe();
        let mut calls: Vec<&[usize]> = Vec::with_capacity(group.len().div_ceil(per_call));
        let mut words: Vec<u8> = Vec::with_capacity(64);
        let mut digits = itoa::Buffer::new();
        for call in group.chunks(per_call) {
            let cells: Vec<(&Planned, &[Usage])> = call
                .iter()
                .filter_map(|&i| planned[i].as_ref().map(|p| (p, batch[i].usage)))
                .collect();
            // Sized for its words, so that it is written without growing.
            let bytes: usize = cells
                .iter()
                .map(|(p, usage)| {
                    p.cell.key.len()
                        + p.cell.limit.field.len()
                        + p.cell.spec().len()
                        + 42 * usage.len()
                })
                .sum();
            let mut command = redis::Cmd::with_capacity(2 + 4 * cells.len(), bytes + 32);
            command.arg(SYNC_COMMAND);
            for (p, usage) in cells {
                words.clear();
                for (n, u) in usage.iter().enumerate() {
                    if n > 0 {
                        words.push(b' ');
                    }
                    words.extend_from_slice(digits.format(u.at).as_bytes());
                    words.push(b' ');
                    words.extend_from_slice(digits.format(u.cost).as_bytes());
                }
                command
                    .arg(p.cell.key.as_slice())
                    .arg(p.cell.limit.field.as_bytes())
                    .arg(p.cell.spec().as_bytes())
                    .arg(words.as_slice());
            }
            command.arg(self.inner.grace_ms.as_bytes());
            pipeline.add_command(command);
            calls.push(call);
        }
        let replies = self.query(pipeline, slot).await?;
        if replies.len() != calls.len() {
            return Err(StoreError::Unavailable(format!(
                "tollgate: {} replies to a sync pipeline of {} calls",
                replies.len(),
                calls.len()
            )));
        }
        let mut answers: Answers = Vec::with_capacity(group.len());
        for (call, reply) in calls.into_iter().zip(replies) {
            let cells: Vec<&Cell> = call
                .iter()
                .filter_map(|&i| planned[i].as_ref().map(|p| &p.cell))
                .collect();
            match reply {
                Err(error) if engine::is_unknown_sync_call(&error) => return Ok(None),
                Err(error) if engine::is_unknown_command(&error) => {
                    // Failed over to a node without the module: look
                    // again, send again.
                    self.inner.engine.forget();
                    return Err(unavailable(error));
                }
                Err(error) => {
                    let text = error.to_string();
                    for &i in call {
                        answers.push(match &planned[i] {
                            Some(_) => Err(StoreError::Unavailable(text.clone())),
                            None => Ok(None),
                        });
                    }
                }
                Ok(Value::Array(values)) if values.len() == cells.len() => {
                    let mut values = values.into_iter();
                    for &i in call {
                        let Some(p) = &planned[i] else {
                            answers.push(Ok(None));
                            continue;
                        };
                        answers.push(match values.next() {
                            Some(Value::Nil) => Ok(None),
                            Some(Value::BulkString(bytes)) => Ok(Some(bytes)),
                            Some(Value::ServerError(error)) => {
                                Err(script_error(error.into(), &[&p.cell]))
                            }
                            other => Err(StoreError::Unavailable(format!(
                                "tollgate: TOLLGATE.SYNC answered {other:?} for a key"
                            ))),
                        });
                    }
                }
                Ok(other) => {
                    return Err(StoreError::Unavailable(format!(
                        "tollgate: TOLLGATE.SYNC of {} keys answered {other:?}",
                        cells.len()
                    )))
                }
            }
        }
        Ok(Some(answers))
    }

    /// One pipeline, to the server or, on a cluster, to the master of
    /// `slot`; each command's reply, errors each its own.
    async fn query(
        &self,
        mut pipeline: redis::Pipeline,
        slot: Option<u16>,
    ) -> Result<Vec<RedisResult<Value>>, StoreError> {
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
        Ok(results
            .into_iter()
            .map(|r| r.and_then(|v| v.extract_error()))
            .collect())
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
        let results = self.query(pipeline, slot).await?;
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
        Ok(results)
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

/// This process's clock in ns since the Unix epoch (a calendar limit's
/// windows for a plain read; Redis's clock is close to it).
fn system_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
