//! Runtime overrides kept in step through Redis (`sync_overrides`) on a
//! real Redis Cluster: a change written through one store arrives at a
//! process subscribed on another node as a pub/sub message (the cluster
//! passes classic `PUBLISH` messages to every node), not only by the
//! version poll, which these tests set an hour apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tollgate_redis::{sync_overrides, OverrideSink, RedisConfig, RedisStore};
use tollgate_testkit::RedisCluster;

/// How long a change may take to arrive before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// Far beyond any test: only the start's reads and pub/sub messages bring
/// changes.
const NO_POLL: Duration = Duration::from_secs(3600);

const TIER: &str = r#"{"rate_limit":{"requests_per_unit":5,"unit":"hour"}}"#;

fn patient() -> RedisConfig {
    RedisConfig {
        timeout: Duration::from_secs(5),
        ..RedisConfig::default()
    }
}

/// A process's table as the sync hands it over, counting how each change
/// came: one at a time (a message) or a whole domain read (a poll).
#[derive(Default)]
struct Recorded {
    table: Mutex<BTreeMap<(String, Vec<u8>), String>>,
    messages: AtomicUsize,
    reads: AtomicUsize,
    changed: Mutex<Option<watch::Sender<u64>>>,
}

impl Recorded {
    fn new() -> (Arc<Recorded>, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        let recorded = Recorded {
            changed: Mutex::new(Some(tx)),
            ..Recorded::default()
        };
        (Arc::new(recorded), rx)
    }

    fn bump(&self) {
        if let Some(tx) = &*self.changed.lock().unwrap() {
            tx.send_modify(|n| *n += 1);
        }
    }

    fn has(&self, key: &[u8]) -> bool {
        self.table
            .lock()
            .unwrap()
            .contains_key(&("api".to_owned(), key.to_vec()))
    }
}

impl OverrideSink for Recorded {
    fn apply(&self, domain: &str, key: &[u8], text: Option<&str>) {
        let mut table = self.table.lock().unwrap();
        let at = (domain.to_owned(), key.to_vec());
        match text {
            Some(text) => table.insert(at, text.to_owned()),
            None => table.remove(&at),
        };
        drop(table);
        self.messages.fetch_add(1, Ordering::SeqCst);
        self.bump();
    }

    fn replace_domain(&self, domain: &str, overrides: Vec<(Vec<u8>, String)>) {
        let mut table = self.table.lock().unwrap();
        table.retain(|(d, _), _| d != domain);
        for (key, text) in overrides {
            table.insert((domain.to_owned(), key), text);
        }
        drop(table);
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.bump();
    }

    fn domains(&self) -> Vec<String> {
        let table = self.table.lock().unwrap();
        let mut domains: Vec<String> = table.keys().map(|(d, _)| d.clone()).collect();
        domains.dedup();
        domains
    }
}

/// Until `done` holds for `recorded`, at most [`PATIENCE`].
async fn until(
    recorded: &Recorded,
    changes: &mut watch::Receiver<u64>,
    done: impl Fn(&Recorded) -> bool,
) {
    tokio::time::timeout(PATIENCE, async {
        while !done(recorded) {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("the change never arrived");
}

#[test]
fn on_a_cluster_changes_reach_a_process_subscribed_on_another_node_as_messages() {
    let cluster = RedisCluster::start(3, 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    // A store whose first seed is node `first`: its pub/sub connection is
    // on that node.
    let open_at = |first: usize| {
        RedisStore::open(&cluster.url_from(first).parse().unwrap(), patient()).unwrap()
    };
    // The node that runs the change script (and publishes); the process
    // that follows subscribes on another one.
    let owner = cluster.master_of("tollgate:{overrides}:versions");
    let writer = open_at(owner);
    let elsewhere = (owner + 1) % cluster.nodes.len();
    let follower = open_at(elsewhere);

    runtime.block_on(async {
        writer
            .put_override("api", b"4:user1:a", TIER)
            .await
            .unwrap();
        let (recorded, mut changes) = Recorded::new();
        let sink: Arc<dyn OverrideSink> = recorded.clone();
        let sync = tokio::spawn(sync_overrides(follower, sink, NO_POLL));
        // What was there before it started: read at the start.
        until(&recorded, &mut changes, |r| r.has(b"4:user1:a")).await;

        // The start reads everything twice at most (once subscribed, once
        // on the poll's first tick); so of two changes made one after the
        // other, at least one arrives as a message.
        writer
            .put_override("api", b"4:user1:b", TIER)
            .await
            .unwrap();
        until(&recorded, &mut changes, |r| r.has(b"4:user1:b")).await;
        writer
            .put_override("api", b"4:user1:c", TIER)
            .await
            .unwrap();
        until(&recorded, &mut changes, |r| r.has(b"4:user1:c")).await;
        assert!(
            recorded.messages.load(Ordering::SeqCst) >= 1,
            "no change came as a message"
        );
        assert!(recorded.reads.load(Ordering::SeqCst) <= 2);

        // A removal arrives the same way.
        assert!(writer.remove_override("api", b"4:user1:a").await.unwrap());
        until(&recorded, &mut changes, |r| !r.has(b"4:user1:a")).await;
        sync.abort();
    });
}
