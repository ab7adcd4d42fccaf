//! A real `tollgate serve` process for end-to-end tests: started on a free
//! loopback port (the server binds port 0 and prints the address it got),
//! talked to over HTTP, stopped with SIGTERM when dropped.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reqwest::blocking::{Client, Response};
use serde_json::Value;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

/// A gRPC client of the rate limit service for blocking tests, with the
/// single-threaded runtime that drives it.
pub(crate) struct GrpcClient {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: RateLimitServiceClient<Channel>,
}

/// How long a server may take to start or stop before a test fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// A running server.
pub(crate) struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// `http://127.0.0.1:PORT` of the gRPC API.
    pub(crate) grpc: String,
    client: Client,
}

impl Server {
    /// Starts `tollgate serve --http 127.0.0.1:0 ARGS…`.
    pub(crate) fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// Starts the server with extra environment variables.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            // A shared store's calls wait up to 5 s here, not the default
            // 250 ms: on a busy machine a call can take longer than that,
            // and a timeout turns an answer from Redis into the failure
            // policy's. A killed Redis refuses at once, so no outage test
            // waits for this; a test or its flags may still set another.
            .env("TOLLGATE_STORE_TIMEOUT_MS", "5000")
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tollgate serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut http, mut grpc) = (None, None);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("tollgate: listening on ") {
                    http = Some(addr.to_owned());
                }
                if let Some(addr) = line.strip_prefix("tollgate: grpc listening on ") {
                    grpc = Some(addr.to_owned());
                }
                if let (Some(h), Some(g)) = (&http, &grpc) {
                    let _ = tx.send((h.clone(), g.clone()));
                }
            }
        });
        let (base, grpc) = match rx.recv_timeout(PATIENCE) {
            Ok(addresses) => addresses,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tollgate serve did not report its addresses: {:?}",
                    child.wait()
                );
            }
        };
        Server {
            child: Some(child),
            base,
            grpc,
            client: Client::builder().timeout(PATIENCE).build().unwrap(),
        }
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .unwrap()
    }

    /// `POST path` with raw bytes.
    pub(crate) fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::blocking::Body>,
    ) -> Response {
        self.client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
    }

    /// `GET path`.
    pub(crate) fn get(&self, path: &str) -> Response {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .unwrap()
    }

    /// `DELETE path`, with a bearer token when given.
    pub(crate) fn delete(&self, path: &str, token: Option<&str>) -> Response {
        let mut request = self.client.delete(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().unwrap()
    }

    /// A request builder, for anything else.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// `POST path` and the status and JSON body.
    pub(crate) fn call(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self.post(path, body);
        let status = response.status().as_u16();
        (status, response.json().unwrap())
    }

    /// The value of the metric sample `name{labels}` (labels as written in
    /// the exposition, e.g. `domain="api",rule="api.user"`), 0 when absent.
    pub(crate) fn metric(&self, sample: &str) -> f64 {
        let text = self.get("/metrics").text().unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                (name == sample).then(|| value.parse().unwrap())
            })
            .unwrap_or(0.0)
    }

    /// Sends SIGTERM without waiting.
    pub(crate) fn send_term(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
    }

    /// A gRPC client connected to this server's rate limit service.
    pub(crate) fn grpc_client(&self) -> GrpcClient {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime
            .block_on(RateLimitServiceClient::connect(self.grpc.clone()))
            .unwrap();
        GrpcClient { runtime, client }
    }

    /// `host:port` of the server.
    pub(crate) fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub(crate) fn stop(mut self) -> ExitStatus {
        self.terminate().unwrap()
    }

    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let (tx, rx) = mpsc::channel();
        let id = child.id();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(PATIENCE) {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &id.to_string()])
                    .status();
                panic!("tollgate serve did not stop after SIGTERM");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes `text` to `path`.
pub(crate) fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}
