//! The Redis store as the async sync mode's [`Transport`]: a batch of
//! exchanges becomes one pipeline per server (per master on a cluster).
//! With the module, each key's usage is recorded at its instants and its
//! version-1 value (docs/redis-state.md) read back by `TOLLGATE.SYNCPACKED`,
//! a call per few hundred keys of one limit (per key on a cluster, where a
//! call's keys share a slot), the limit named once and the values answered
//! in one string; a module of an earlier release without it gets
//! `TOLLGATE.SYNC` calls (the limit per key, an array answered), and one
//! without that what the script gets. With the script, each usage is one `record`
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
use crate::store::{
    script_error, script_error_text, unavailable, Connection, LazyCluster, RedisStore,
};

/// What one exchange's pipeline holds: its limit (and a calendar limit's
/// windows), then how many record calls precede its `HGET`. Its Redis key
/// is written where it is needed ([`Planned::cell`], or straight into a
/// `TOLLGATE.SYNC` call), not kept per key.
struct Planned {
    limit: Arc<Prepared>,
    windows: Option<Box<str>>,
    records: usize,
}

impl Planned {
    /// The exchange's cell for `key` under `store`'s prefix, cost 0.
    fn cell(&self, store: &RedisStore, key: &[u8]) -> Cell {
        Cell {
            key: store.redis_key(key),
            limit: Arc::clone(&self.limit),
            cost: 0,
            windows: self.windows.clone(),
        }
    }

    /// The spec the engines take (as [`Cell::spec`]).
    fn spec(&self) -> std::borrow::Cow<'_, str> {
        match &self.windows {
            None => std::borrow::Cow::Borrowed(&self.limit.spec),
            Some(windows) => std::borrow::Cow::Owned(format!("{} {windows}", self.limit.spec)),
        }
    }
}

/// The module's command for a batch (`crates/redis-module/src/sync.rs`).
const SYNC_COMMAND: &str = "TOLLGATE.SYNC";

/// The module's command for a batch's keys of one limit, the limit named
/// once and the answers packed into one string
/// (`crates/redis-module/src/sync.rs`).
const PACKED_COMMAND: &str = "TOLLGATE.SYNCPACKED";

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
                limit: prepared,
                windows,
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
            if planned.is_none() {
                continue;
            }
            let slot = slot_of(&self.redis_key(batch[i].key));
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
        if running == Running::Module
            && self.inner.engine.sync_call()
            && self.inner.engine.packed_call()
        {
            match self.send_packed(batch, planned, group, slot).await? {
                Some(answers) => return Ok(answers),
                // A module of an earlier release: `TOLLGATE.SYNC` calls,
                // until the next probe.
                None => self.inner.engine.no_packed_call(),
            }
        }
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
                (Some(error), _) => Err(script_error(error, &[&planned.cell(self, batch[i].key)])),
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
        let prefix = self.config().key_prefix.as_str();
        for call in group.chunks(per_call) {
            let cells: Vec<(&Planned, &[u8], &[Usage])> = call
                .iter()
                .filter_map(|&i| {
                    planned[i]
                        .as_ref()
                        .map(|p| (p, batch[i].key, batch[i].usage))
                })
                .collect();
            // Sized for its words, so that it is written without growing.
            let bytes: usize = cells
                .iter()
                .map(|(p, key, usage)| {
                    prefix.len()
                        + 18
                        + key.len()
                        + p.limit.field.len()
                        + p.spec().len()
                        + 42 * usage.len()
                })
                .sum();
            let mut command = redis::Cmd::with_capacity(2 + 4 * cells.len(), bytes + 32);
            command.arg(SYNC_COMMAND);
            for (p, key, usage) in cells {
                words.clear();
                cells::write_redis_key(prefix, key, &mut words);
                command.arg(words.as_slice());
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
                    .arg(p.limit.field.as_bytes())
                    .arg(p.spec().as_bytes())
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
            let keys = call.iter().filter(|&&i| planned[i].is_some()).count();
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
                Ok(Value::Array(values)) if values.len() == keys => {
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
                                Err(script_error(error.into(), &[&p.cell(self, batch[i].key)]))
                            }
                            other => Err(StoreError::Unavailable(format!(
                                "tollgate: TOLLGATE.SYNC answered {other:?} for a key"
                            ))),
                        });
                    }
                }
                Ok(other) => {
                    return Err(StoreError::Unavailable(format!(
                        "tollgate: TOLLGATE.SYNC of {keys} keys answered {other:?}"
                    )))
                }
            }
        }
        Ok(Some(answers))
    }

    /// The exchanges of `group` as `TOLLGATE.SYNCPACKED` calls in one
    /// pipeline (on a cluster, to the master of `slot`), each call of at
    /// most [`SYNC_CALL_KEYS`] keys of one limit (one key on a cluster);
    /// each exchange's answer. `None` when the server does not know the
    /// command (then none of it ran).
    async fn send_packed(
        &self,
        batch: &[Exchange<'_>],
        planned: &[Option<Planned>],
        group: &[usize],
        slot: Option<u16>,
    ) -> Result<Option<Answers>, StoreError> {
        let per_call = if slot.is_some() { 1 } else { SYNC_CALL_KEYS };
        let prefix = self.config().key_prefix.as_str();
        let mut pipeline = redis::pipe();
        // Each call's exchanges, and whether it went (an exchange that was
        // not planned goes alone, in no call).
        let mut calls: Vec<(&[usize], bool)> = Vec::new();
        let mut words: Vec<u8> = Vec::with_capacity(64);
        let mut digits = itoa::Buffer::new();
        let mut start = 0;
        while start < group.len() {
            let Some(first) = &planned[group[start]] else {
                calls.push((&group[start..=start], false));
                start += 1;
                continue;
            };
            // The run of keys of the same limit (and windows) that follows.
            let mut end = start + 1;
            while end < group.len() && end - start < per_call {
                match &planned[group[end]] {
                    Some(p)
                        if Arc::ptr_eq(&p.limit, &first.limit) && p.windows == first.windows =>
                    {
                        end += 1
                    }
                    _ => break,
                }
            }
            let run = &group[start..end];
            let spec = first.spec();
            // Sized for its words, so that it is written without growing.
            let bytes: usize = run
                .iter()
                .map(|&i| prefix.len() + 18 + batch[i].key.len() + 42 * batch[i].usage.len())
                .sum();
            let mut command = redis::Cmd::with_capacity(
                4 + 2 * run.len(),
                bytes + first.limit.field.len() + spec.len() + 48,
            );
            command
                .arg(PACKED_COMMAND)
                .arg(first.limit.field.as_bytes())
                .arg(spec.as_bytes())
                .arg(self.inner.grace_ms.as_bytes());
            for &i in run {
                words.clear();
                cells::write_redis_key(prefix, batch[i].key, &mut words);
                command.arg(words.as_slice());
                words.clear();
                for (n, u) in batch[i].usage.iter().enumerate() {
                    if n > 0 {
                        words.push(b' ');
                    }
                    words.extend_from_slice(digits.format(u.at).as_bytes());
                    words.push(b' ');
                    words.extend_from_slice(digits.format(u.cost).as_bytes());
                }
                command.arg(words.as_slice());
            }
            pipeline.add_command(command);
            calls.push((run, true));
            start = end;
        }
        let sent = calls.iter().filter(|(_, sent)| *sent).count();
        let replies = self.query(pipeline, slot).await?;
        if replies.len() != sent {
            return Err(StoreError::Unavailable(format!(
                "tollgate: {} replies to a sync pipeline of {sent} calls",
                replies.len(),
            )));
        }
        let mut replies = replies.into_iter();
        let mut answers: Answers = Vec::with_capacity(group.len());
        for (call, sent) in calls {
            if !sent {
                answers.push(Ok(None));
                continue;
            }
            let Some(reply) = replies.next() else {
                return Err(StoreError::Unavailable(
                    "tollgate: a sync pipeline lost a reply".into(),
                ));
            };
            match reply {
                Err(error) if engine::is_unknown_packed_call(&error) => return Ok(None),
                Err(error) if engine::is_unknown_command(&error) => {
                    // Failed over to a node without the module: look
                    // again, send again.
                    self.inner.engine.forget();
                    return Err(unavailable(error));
                }
                Err(error) => {
                    let text = error.to_string();
                    answers.extend(
                        call.iter()
                            .map(|_| Err(StoreError::Unavailable(text.clone()))),
                    );
                }
                Ok(Value::BulkString(packed)) => {
                    let mut rest = packed.as_slice();
                    for &i in call {
                        let Some((answer, after)) = unpack(rest) else {
                            return Err(StoreError::Unavailable(format!(
                                "tollgate: TOLLGATE.SYNCPACKED of {} keys answered {} bytes that are not {0} answers",
                                call.len(),
                                packed.len()
                            )));
                        };
                        rest = after;
                        answers.push(match answer {
                            Unpacked::Value(bytes) => Ok(Some(bytes.to_vec())),
                            Unpacked::None => Ok(None),
                            Unpacked::Error(text) => {
                                let cell = planned[i].as_ref().map(|p| p.cell(self, batch[i].key));
                                Err(script_error_text(
                                    text,
                                    cell.iter().collect::<Vec<_>>().as_slice(),
                                ))
                            }
                        });
                    }
                    if !rest.is_empty() {
                        return Err(StoreError::Unavailable(format!(
                            "tollgate: TOLLGATE.SYNCPACKED of {} keys answered more than {0} answers",
                            call.len()
                        )));
                    }
                }
                Ok(other) => {
                    return Err(StoreError::Unavailable(format!(
                        "tollgate: TOLLGATE.SYNCPACKED of {} keys answered {other:?}",
                        call.len()
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
            let mut cell = planned.cell(self, batch[i].key);
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

/// One key's answer in a `TOLLGATE.SYNCPACKED` reply.
#[derive(Debug, PartialEq, Eq)]
enum Unpacked<'a> {
    /// Its value.
    Value(&'a [u8]),
    /// It holds none.
    None,
    /// Its own error's message.
    Error(String),
}

/// The first answer of a packed reply and the bytes after it: `n`, or a
/// tag (`v` a value, `e` an error), a length in decimal, `:` and that many
/// bytes. `None` when the bytes are not an answer.
fn unpack(bytes: &[u8]) -> Option<(Unpacked<'_>, &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    if tag == b'n' {
        return Some((Unpacked::None, rest));
    }
    let colon = rest.iter().take(21).position(|&b| b == b':')?;
    let digits = &rest[..colon];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let len: usize = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let body = rest.get(colon + 1..colon + 1 + len)?;
    let after = &rest[colon + 1 + len..];
    match tag {
        b'v' => Some((Unpacked::Value(body), after)),
        b'e' => Some((
            Unpacked::Error(String::from_utf8_lossy(body).into_owned()),
            after,
        )),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_reply_is_read_answer_by_answer_and_nothing_else_passes() {
        let packed = b"v3:1 2ne12:ERR tollgate:v0:";
        let (first, rest) = unpack(packed).unwrap();
        assert_eq!(first, Unpacked::Value(b"1 2"));
        let (second, rest) = unpack(rest).unwrap();
        assert_eq!(second, Unpacked::None);
        let (third, rest) = unpack(rest).unwrap();
        assert_eq!(third, Unpacked::Error("ERR tollgate".into()));
        assert_eq!(rest, b":v0:");
        assert!(unpack(rest).is_none());
        let (fourth, rest) = unpack(b"v0:").unwrap();
        assert_eq!(fourth, Unpacked::Value(b""));
        assert!(rest.is_empty());
        for bad in [
            &b""[..],
            b"v",
            b"v3",
            b"v3:12",
            b"v:1",
            b"v-1:",
            b"v+1:x",
            b"x1:a",
            b"v99999999999999999999999:",
        ] {
            assert!(unpack(bad).is_none(), "{bad:?}");
        }
    }
}
