//! The Redis store as the async sync mode's [`Transport`]: a batch of
//! exchanges becomes one pipeline per server (per cluster slot on a
//! cluster): each key's usage recorded by the engine deciding now (the
//! module's or the script's `record`, each at its instant), then the key's
//! version-1 value read back with `HGET` (docs/redis-state.md). The
//! pipeline is not a transaction: another instance's writes may land
//! between a key's records and its read, and the read then includes them,
//! which is what the mode wants (the newest global state).

use redis::{RedisResult, Value};
use tollgate_core::{LimitKey, Moment, StoreError};
use tollgate_sync::{Exchange, Transport};

use crate::cells::Cell;
use crate::engine::{self, Running};
use crate::store::{script_error, unavailable, Connection, RedisStore};

/// What one exchange's pipeline holds: its cell, then how many record
/// calls precede its `HGET`.
struct Planned {
    cell: Cell,
    records: usize,
}

impl Transport for RedisStore {
    async fn exchange(
        &self,
        batch: &[Exchange<'_>],
    ) -> Result<Vec<Result<tollgate_sync::Value, StoreError>>, StoreError> {
        self.bounded(self.exchange_all(batch)).await
    }
}

impl RedisStore {
    async fn exchange_all(
        &self,
        batch: &[Exchange<'_>],
    ) -> Result<Vec<Result<tollgate_sync::Value, StoreError>>, StoreError> {
        let running = match self.inner.engine.current() {
            Some(running) => running,
            None => Box::pin(self.probe()).await?,
        };
        let mut answers: Vec<Result<tollgate_sync::Value, StoreError>> =
            Vec::with_capacity(batch.len());
        // Each exchange's cell, or its own error.
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
        // Groups of exchanges that one pipeline can carry.
        let mut groups: Vec<(Option<redis::cluster_routing::Slot>, Vec<usize>)> = Vec::new();
        for (i, planned) in planned.iter().enumerate() {
            let Some(planned) = planned else { continue };
            let slot = match self.inner.connection {
                Connection::Single(..) => None,
                Connection::Cluster(_) => {
                    Some(redis::cluster_routing::Slot::for_key(&planned.cell.key))
                }
            };
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        for (_, group) in &groups {
            let mut results = self.send(running, batch, &planned, group).await?;
            if running == Running::Lua {
                let (missing, ran) = no_script(&results, &planned, group);
                if missing > 0 {
                    // The server lost the script (a restart, a failover,
                    // SCRIPT FLUSH): a call it did not have ran nothing,
                    // so the group goes again once it has it. Some calls
                    // that ran would be counted twice: an outage instead.
                    if ran > 0 {
                        return Err(StoreError::Unavailable(
                            "tollgate: the script went missing in the middle of a sync batch"
                                .into(),
                        ));
                    }
                    self.load_script().await?;
                    results = self.send(running, batch, &planned, group).await?;
                }
            }
            let mut results = results.into_iter();
            for &i in group {
                let Some(planned) = &planned[i] else { continue };
                let mut failure = None;
                for record in results.by_ref().take(planned.records) {
                    if let Err(error) = record {
                        if engine::is_unknown_command(&error) {
                            // Failed over to a node without the module:
                            // look again, send again.
                            self.inner.engine.forget();
                            return Err(unavailable(error));
                        }
                        failure.get_or_insert(error);
                    }
                }
                let value = results.next().unwrap_or(Ok(Value::Nil));
                answers[i] = match (failure, value) {
                    (Some(error), _) => Err(script_error(error, &[&planned.cell])),
                    (None, Ok(Value::Nil)) => Ok(None),
                    (None, Ok(Value::BulkString(bytes))) => Ok(Some(bytes)),
                    (None, Ok(other)) => Err(StoreError::Unavailable(format!(
                        "tollgate: HGET of a state answered {other:?}"
                    ))),
                    (None, Err(error)) => Err(unavailable(error)),
                };
            }
        }
        Ok(answers)
    }

    /// One pipeline: each exchange of `group`, its records then its read.
    async fn send(
        &self,
        running: Running,
        batch: &[Exchange<'_>],
        planned: &[Option<Planned>],
        group: &[usize],
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
                pipeline
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)?
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

    async fn load_script(&self) -> Result<(), StoreError> {
        let script = &self.inner.script;
        match &self.inner.connection {
            Connection::Single(manager, _) => script
                .load_async(&mut manager.clone())
                .await
                .map(drop)
                .map_err(unavailable),
            Connection::Cluster(cluster) => {
                let mut connection = cluster.get().await?;
                script
                    .load_async(&mut connection)
                    .await
                    .map(drop)
                    .map_err(unavailable)
            }
        }
    }
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
