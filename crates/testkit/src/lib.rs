//! Real Redis for tollgate's tests: [`RedisServer`] starts a `redis-server`
//! process on a free loopback port (plain TCP, TLS-only with certificates
//! from [`TestCertificates`], or a unix socket only), [`RedisCluster`] starts
//! several and joins them into a Redis Cluster with `redis-cli --cluster
//! create`. Each lives in its own temporary directory, keeps nothing on disk,
//! and is killed when dropped. No test uses a Redis it did not start.
//! [`sf_list_members`] reads rate-limit headers with a real Structured
//! Fields parser. [`redis_module`] builds tollgate's Redis module, which
//! [`RedisServer::start_with_module`] and [`RedisCluster::start_with_module`]
//! load. [`DownStore`] and [`ready`] serve tests of code above a store.
//!
//! The binaries come from Debian's `redis-server` package, which
//! `scripts/test` installs when it is missing. This crate is for tests only
//! and panics (with a message) when the environment cannot run Redis.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod module;
mod stores;
mod structured_fields;
mod tls;

pub use module::redis_module;
pub use stores::{ready, DownStore};

pub use structured_fields::sf_list_members;
pub use tls::TestCertificates;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many times a server is started on a new port (or, for a restart,
/// again on its own) when the process exits before it answers: a port
/// found free can be taken by another test's socket before the server
/// binds it.
const START_ATTEMPTS: usize = 5;

/// A cluster node also listens on its port plus this (the cluster bus).
const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A free port for a server started with `extra`: for a cluster node, one
/// whose bus port (port + 10000) exists and is free too. Ports come from
/// the kernel's ephemeral range, so a bus port can be another test's
/// client socket; a node that cannot bind it exits at once.
fn free_port_for(extra: &[String]) -> u16 {
    if !extra.iter().any(|a| a == "--cluster-enabled") {
        return free_port();
    }
    for _ in 0..1_000 {
        let port = free_port();
        let bus_free = port
            .checked_add(CLUSTER_BUS_OFFSET)
            .is_some_and(|bus| TcpListener::bind(("127.0.0.1", bus)).is_ok());
        if bus_free {
            return port;
        }
    }
    panic!("no free loopback port with a free cluster bus port");
}

/// Whether a TLS server requires clients to present a certificate
/// (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// Mutual TLS: a client without a certificate signed by the CA is
    /// refused.
    Required,
    /// Clients need only trust the server.
    NotRequested,
}

/// How clients reach a server.
enum Listener {
    /// `redis://127.0.0.1:PORT`.
    Tcp,
    /// `rediss://127.0.0.1:PORT` only (no plain port).
    Tls {
        certs: TestCertificates,
        clients: ClientCerts,
    },
    /// `unix:///…/redis.sock` only (no TCP port).
    Unix(PathBuf),
}

/// One `redis-server` process.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    listener: Listener,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra `redis-server` arguments (e.g. cluster mode).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_listening(|_| Listener::Tcp, extra)
    }

    /// A standalone server with tollgate's Redis module loaded
    /// (`--loadmodule`, built by [`redis_module`]).
    pub fn start_with_module() -> RedisServer {
        let module = redis_module().display().to_string();
        RedisServer::start_with(&["--loadmodule", &module])
    }

    /// A server that speaks TLS only, on a free port, with a certificate
    /// for `127.0.0.1` signed by a CA made for it ([`RedisServer::certificates`]).
    pub fn start_tls(clients: ClientCerts) -> RedisServer {
        RedisServer::start_listening(
            |dir| Listener::Tls {
                certs: TestCertificates::generate(dir),
                clients,
            },
            &[],
        )
    }

    /// A server that listens on a unix socket only (mode 700), in its
    /// directory.
    pub fn start_unix() -> RedisServer {
        RedisServer::start_listening(|dir| Listener::Unix(dir.join("redis.sock")), &[])
    }

    fn start_listening(
        listener: impl FnOnce(&std::path::Path) -> Listener,
        extra: &[&str],
    ) -> RedisServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let listener = listener(dir.path());
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra,
            listener,
        };
        let mut exits = Vec::new();
        for _ in 0..START_ATTEMPTS {
            if !matches!(server.listener, Listener::Unix(_)) {
                server.port = free_port_for(&server.extra);
            }
            match server.spawn() {
                Ok(()) => return server,
                Err(exit) => exits.push(exit),
            }
        }
        panic!("redis-server never started: {}", exits.join("; "));
    }

    /// The `redis-server` arguments that open the listener.
    fn listener_args(&self) -> Vec<String> {
        let port = self.port.to_string();
        let mut args: Vec<String> = match &self.listener {
            Listener::Tcp => vec!["--port".into(), port],
            Listener::Tls { certs, clients } => {
                let path = |p: &PathBuf| p.display().to_string();
                let auth = match clients {
                    ClientCerts::Required => "yes",
                    ClientCerts::NotRequested => "no",
                };
                vec![
                    "--port".into(),
                    "0".into(),
                    "--tls-port".into(),
                    port,
                    "--tls-cert-file".into(),
                    path(&certs.server_cert),
                    "--tls-key-file".into(),
                    path(&certs.server_key),
                    "--tls-ca-cert-file".into(),
                    path(&certs.ca),
                    "--tls-auth-clients".into(),
                    auth.into(),
                ]
            }
            Listener::Unix(socket) => vec![
                "--port".into(),
                "0".into(),
                "--unixsocket".into(),
                socket.display().to_string(),
                "--unixsocketperm".into(),
                "700".into(),
            ],
        };
        args.extend(["--bind".into(), "127.0.0.1".into()]);
        args
    }

    /// Starts the process and waits until it answers; `Err` (saying how it
    /// ended) when it exited first, e.g. because its port was taken.
    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(self.listener_args())
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (scripts/test installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.answers() {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("at {} it exited ({status})", self.url()));
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server at {} never answered",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Whether the server answers `PING`.
    pub fn answers(&self) -> bool {
        self.command("PING").is_some_and(|r| r.starts_with("+PONG"))
    }

    /// Sends one inline command and returns the raw reply (None when the
    /// server is unreachable). Over TLS the client trusts the server's CA
    /// and presents the client certificate.
    pub fn command(&self, command: &str) -> Option<String> {
        let request = format!("{command}\r\n");
        // Long enough for a server on a machine busy with other jobs; a server
        // that is down refuses the connection at once instead.
        let timeout = Some(Duration::from_secs(30));
        let reply = match &self.listener {
            Listener::Tcp => {
                let stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
                stream.set_read_timeout(timeout).ok()?;
                exchange(stream, request.as_bytes())?
            }
            Listener::Unix(socket) => {
                let stream = UnixStream::connect(socket).ok()?;
                stream.set_read_timeout(timeout).ok()?;
                exchange(stream, request.as_bytes())?
            }
            Listener::Tls { certs, .. } => tls::exchange(certs, self.port, request.as_bytes())?,
        };
        Some(String::from_utf8_lossy(&reply).into_owned())
    }

    /// Whether this process is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The TCP (or TLS) port; 0 for a unix-socket server.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL a client connects to: `redis://127.0.0.1:PORT`,
    /// `rediss://127.0.0.1:PORT` (TLS) or `unix:///…/redis.sock`.
    pub fn url(&self) -> String {
        match &self.listener {
            Listener::Tcp => format!("redis://127.0.0.1:{}", self.port),
            Listener::Tls { .. } => format!("rediss://127.0.0.1:{}", self.port),
            Listener::Unix(socket) => format!("unix://{}", socket.display()),
        }
    }

    /// The CA and certificates of a TLS server (None for the others).
    pub fn certificates(&self) -> Option<&TestCertificates> {
        match &self.listener {
            Listener::Tls { certs, .. } => Some(certs),
            _ => None,
        }
    }

    /// The socket of a unix-socket server (None for the others).
    pub fn socket(&self) -> Option<&std::path::Path> {
        match &self.listener {
            Listener::Unix(socket) => Some(socket),
            _ => None,
        }
    }

    /// Kills the process (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (trying
    /// again when the process exits at once: the port can be held
    /// briefly by a client's socket).
    pub fn restart(&mut self) {
        self.kill();
        let mut exits = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match self.spawn() {
                Ok(()) => return,
                Err(exit) => exits.push(exit),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("redis-server never restarted: {}", exits.join("; "));
    }

    /// The server's working directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }
}

/// Writes `request` and returns the first chunk of the answer.
fn exchange(mut stream: impl Read + Write, request: &[u8]) -> Option<Vec<u8>> {
    stream.write_all(request).ok()?;
    let mut reply = vec![0; 64 * 1024];
    let n = stream.read(&mut reply).ok()?;
    reply.truncate(n);
    Some(reply)
}

/// Whether a `CLUSTER NODES` line (`id addr flags master ping pong epoch
/// link slot…`) is a master's that serves `slot`, alone (`42`) or in a
/// range (`0-5460`); importing and migrating marks (`[…]`) do not count.
fn claims_slot(line: &str, slot: u16) -> bool {
    let mut words = line.split(' ');
    let is_master = words
        .nth(2)
        .is_some_and(|flags| flags.split(',').any(|f| f == "master"));
    is_master
        && words.skip(5).any(|range| {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            matches!(
                (start.parse::<u16>(), end.parse::<u16>()),
                (Ok(start), Ok(end)) if (start..=end).contains(&slot)
            )
        })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster.
pub struct RedisCluster {
    /// The nodes, in creation order (`redis-cli` makes the first ones
    /// masters and the rest their replicas).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, joined into one
    /// cluster, waiting until every node reports `cluster_state:ok`.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_loading(masters, replicas, &[])
    }

    /// [`start`](Self::start) with tollgate's Redis module loaded on every
    /// node.
    pub fn start_with_module(masters: usize, replicas: usize) -> RedisCluster {
        let module = redis_module().display().to_string();
        RedisCluster::start_loading(masters, replicas, &["--loadmodule", &module])
    }

    fn start_loading(masters: usize, replicas: usize, extra: &[&str]) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-require-full-coverage",
                    "no",
                ];
                args.extend_from_slice(extra);
                RedisServer::start_with(&args)
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok();
        cluster.wait_until_replicas_synced();
        cluster
    }

    /// Waits until every live replica has finished its first sync with its
    /// master (`master_link_status:up`). A replica that never synced is too
    /// stale to be promoted when its master dies.
    pub fn wait_until_replicas_synced(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let synced = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                n.command("INFO replication").is_some_and(|info| {
                    !info.contains("role:slave") || info.contains("master_link_status:up")
                })
            });
            if synced {
                return;
            }
            assert!(Instant::now() < deadline, "the replicas never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every live replica of node `master` has received
    /// everything the master had written when this was called.
    ///
    /// `WAIT` is no use here: it waits for the writes of the connection it
    /// runs on, and the writes under test come from the store's own
    /// connections, so on a fresh connection it returns at once. This
    /// compares replication offsets instead.
    pub fn wait_until_replicated(&self, master: usize) {
        fn field(info: &str, name: &str) -> Option<i64> {
            info.split("\r\n")
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse().ok())
        }
        let written = self.nodes[master]
            .command("INFO replication")
            .and_then(|info| field(&info, "master_repl_offset"))
            .expect("the master reports its replication offset");
        let port = self.nodes[master].port();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let replicas: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .filter_map(|n| n.command("INFO replication"))
                .filter(|info| field(info, "master_port") == Some(i64::from(port)))
                .collect();
            let caught_up = replicas
                .iter()
                .all(|info| field(info, "slave_repl_offset").is_some_and(|at| at >= written));
            if !replicas.is_empty() && caught_up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicas never caught up with offset {written}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until every live node reports `cluster_state:ok` and knows
    /// every live node.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                n.command("CLUSTER INFO")
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node serving `key`'s slot as a master now: the live node that
    /// says so of itself. Each node's own line in `CLUSTER NODES` (flag
    /// `myself`) is current the moment it changes, while its view of the
    /// other nodes follows by gossip: after a failover, a node asked about
    /// the others may still name the killed master for a while, however
    /// the promoted replica already serves the slot.
    pub fn master_of(&self, key: &str) -> usize {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .collect();
        let first = *live.first().expect("a live node");
        let reply = self.nodes[first]
            .command(&format!("CLUSTER KEYSLOT {key}"))
            .expect("CLUSTER KEYSLOT answers");
        let slot: u16 = reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .expect("a slot");
        let claims: Vec<usize> = live
            .into_iter()
            .filter(|&i| {
                let nodes = self.nodes[i]
                    .command("CLUSTER NODES")
                    .expect("CLUSTER NODES answers");
                nodes
                    .lines()
                    .find(|line| line.split(' ').nth(2).is_some_and(|f| f.contains("myself")))
                    .is_some_and(|line| claims_slot(line, slot))
            })
            .collect();
        match claims.as_slice() {
            [one] => *one,
            [] => panic!("no live master claims slot {slot}"),
            many => panic!("several live nodes claim slot {slot}: {many:?}"),
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`
    pub fn url(&self) -> String {
        self.url_from(0)
    }

    /// [`url`](Self::url) with node `first`'s address as the first seed
    /// (then the nodes after it, then those before): a client's first
    /// connection, and its pub/sub connection, go to that node.
    pub fn url_from(&self, first: usize) -> String {
        let mut seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        seeds.rotate_left(first);
        format!("redis+cluster://{}", seeds.join(","))
    }
}
