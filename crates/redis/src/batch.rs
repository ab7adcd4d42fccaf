//! Commands of concurrent requests written to Redis together: [`Batcher`].
//!
//! redis-rs's multiplexed connection writes whatever its channel holds when
//! its task runs. Under tokio that task runs right after the request that
//! woke it (the scheduler's LIFO slot), so every decision was a `write(2)`
//! of its own, the largest part of what a decision on Redis cost tollgate
//! beyond one on the memory store (docs/benchmarks.md, "Redis store: through
//! tollgate serve"). Here each request queues its command and one task sends
//! the queue once every task that can run has run (`yield_now` defers it
//! until the scheduler has nothing else to do), as one redis-rs pipeline:
//! one write, one channel message and one response timer for all of them.
//! Each request still gets its own reply, or its own error.
//!
//! Everything else is redis-rs's: the connection, its reconnection, TLS, the
//! RESP encoding and parsing. A request that gives up (its timeout) drops its
//! receiver, and a command whose receiver is gone is not sent.

use std::sync::Arc;

use parking_lot::Mutex;
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;

/// Sends commands over `C` in batches.
pub(crate) struct Batcher<C> {
    connection: C,
    shared: Arc<Shared>,
    /// The task that sends the batches: started on first use, in the
    /// caller's runtime, again if that runtime has gone, and stopped when
    /// the batcher goes.
    task: Mutex<Option<AbortHandle>>,
}

struct Shared {
    queue: Mutex<Vec<Queued>>,
    /// Told when the queue stops being empty.
    filled: Notify,
}

struct Queued {
    command: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
}

impl<C> Batcher<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(connection: C) -> Batcher<C> {
        Batcher {
            connection,
            shared: Arc::new(Shared {
                queue: Mutex::new(Vec::new()),
                filled: Notify::new(),
            }),
            task: Mutex::new(None),
        }
    }

    /// `command`'s reply, sent with the other commands queued in the same
    /// scheduler pass. Must be called inside a tokio runtime.
    pub(crate) async fn query(&self, command: Cmd) -> RedisResult<Value> {
        {
            let mut task = self.task.lock();
            if task.as_ref().is_none_or(AbortHandle::is_finished) {
                let shared = Arc::clone(&self.shared);
                *task = Some(tokio::spawn(run(shared, self.connection.clone())).abort_handle());
            }
        }
        let (reply, answer) = oneshot::channel();
        let was_empty = {
            let mut queue = self.shared.queue.lock();
            queue.push(Queued { command, reply });
            queue.len() == 1
        };
        if was_empty {
            self.shared.filled.notify_one();
        }
        match answer.await {
            Ok(result) => result,
            // The task is gone (its runtime stopped) with the command.
            Err(_) => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "tollgate: the Redis batch task stopped",
            ))),
        }
    }
}

impl<C> Drop for Batcher<C> {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
    }
}

/// Takes the queue whenever it fills, once every runnable task has had its
/// turn, and sends it. Starts by taking what is queued (what a task before
/// it left).
async fn run<C>(shared: Arc<Shared>, connection: C)
where
    C: ConnectionLike + Clone + Send + 'static,
{
    loop {
        tokio::task::yield_now().await;
        let batch: Vec<Queued> = std::mem::take(&mut *shared.queue.lock())
            .into_iter()
            .filter(|queued| !queued.reply.is_closed())
            .collect();
        if !batch.is_empty() {
            // Its own task, so that the next batch need not wait for this
            // one's replies.
            tokio::spawn(send(connection.clone(), batch));
        }
        shared.filled.notified().await;
    }
}

/// Sends `batch` as one pipeline and hands each request its reply.
async fn send<C: ConnectionLike>(mut connection: C, batch: Vec<Queued>) {
    let mut pipeline = redis::Pipeline::with_capacity(batch.len());
    let mut replies = Vec::with_capacity(batch.len());
    for queued in batch {
        pipeline.add_command(queued.command);
        replies.push(queued.reply);
    }
    // Each command's error stays its own (a server error is one reply).
    pipeline.ignore_errors();
    match pipeline
        .query_async::<Vec<RedisResult<Value>>>(&mut connection)
        .await
    {
        Ok(results) if results.len() == replies.len() => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Ok(results) => {
            let error = redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "tollgate: a batch's replies do not match its commands",
                format!("{} replies to {} commands", results.len(), replies.len()),
            ));
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{Pipeline, RedisFuture};

    /// A connection that answers each command with its number in its
    /// batch, an error for `FAIL`, and records each batch's size.
    #[derive(Clone, Default)]
    struct Recorder {
        batches: Arc<Mutex<Vec<usize>>>,
    }

    impl ConnectionLike for Recorder {
        fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
            unreachable!("the batcher sends pipelines only")
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            pipeline: &'a Pipeline,
            _offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            self.batches.lock().push(count);
            let replies = pipeline
                .cmd_iter()
                .enumerate()
                .map(|(i, cmd)| match cmd.args_iter().next() {
                    Some(redis::Arg::Simple(b"FAIL")) => {
                        redis::parse_redis_value(b"-ERR no\r\n").unwrap()
                    }
                    _ => Value::Int(i as i64),
                })
                .collect();
            Box::pin(async move { Ok(replies) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_commands_of_one_pass_go_together_each_with_its_own_reply() {
        let recorder = Recorder::default();
        let batcher = Arc::new(Batcher::new(recorder.clone()));
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move {
                    let mut command = redis::cmd(if i == 7 { "FAIL" } else { "PING" });
                    command.arg(i);
                    batcher.query(command).await
                })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            match call.await.unwrap() {
                Ok(value) => assert_eq!(value, Value::Int(i as i64)),
                Err(error) => assert_eq!(i, 7, "{error}"),
            }
        }
        assert_eq!(*recorder.batches.lock(), [20]);
        // Later calls make batches of their own.
        assert_eq!(
            batcher.query(redis::cmd("PING")).await.unwrap(),
            Value::Int(0)
        );
        assert_eq!(*recorder.batches.lock(), [20, 1]);
    }

    #[test]
    fn a_batcher_outlives_the_runtime_that_started_its_task() {
        let recorder = Recorder::default();
        let batcher = Batcher::new(recorder.clone());
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let reply = runtime.block_on(batcher.query(redis::cmd("PING")));
            assert_eq!(reply.unwrap(), Value::Int(0));
        }
        assert_eq!(*recorder.batches.lock(), [1, 1]);
    }
}
