//! A real `tollgate gateway` process for end-to-end tests: started on a
//! free loopback port (it binds port 0 and prints the address it got), its
//! log lines watched, stopped with SIGTERM or killed when dropped; and the
//! HTTP clients the tests talk to it with.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::upstream::{TestBody, PATIENCE};

/// A running gateway.
pub(crate) struct Gateway {
    child: Option<Child>,
    /// `host:port` of the gateway.
    pub(crate) address: String,
    /// `host:port` of the admin port, when `--admin` was given.
    pub(crate) admin: Option<String>,
    logs: Mutex<mpsc::Receiver<String>>,
}

impl Gateway {
    /// Starts `tollgate gateway --listen 127.0.0.1:0 ARGS…`.
    pub(crate) fn start(args: &[&str]) -> Gateway {
        Gateway::start_with_env(args, &[])
    }

    /// Starts the gateway with extra environment variables.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Gateway {
        let mut child = gateway_command(args, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tollgate gateway");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (addresses, announced) = mpsc::channel();
        let wants_admin = args.contains(&"--admin");
        std::thread::spawn(move || {
            let (mut gateway, mut admin) = (None, None);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(a) = line.strip_prefix("tollgate: gateway listening on http://") {
                    gateway = Some(a.to_owned());
                }
                if let Some(a) = line.strip_prefix("tollgate: admin listening on http://") {
                    admin = Some(a.to_owned());
                }
                if let Some(g) = &gateway {
                    if admin.is_some() || !wants_admin {
                        let _ = addresses.send((g.clone(), admin.clone()));
                    }
                }
            }
        });
        let (log_lines, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[gateway] {line}");
                let _ = log_lines.send(line);
            }
        });
        let (address, admin) = match announced.recv_timeout(PATIENCE) {
            Ok(addresses) => addresses,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tollgate gateway did not report its address: {:?}",
                    child.wait()
                );
            }
        };
        Gateway {
            child: Some(child),
            address,
            admin,
            logs: Mutex::new(logs),
        }
    }

    /// `http://host:port/path` on the gateway.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `(VmRSS, VmHWM)` of the process, in bytes.
    pub(crate) fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| -> u64 {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in /proc/PID/status"));
            let kib: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap();
            kib * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Waits until the gateway logs a line containing `text`.
    pub(crate) fn wait_for_log(&self, text: &str) {
        let logs = self.logs.lock().unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match logs.recv_timeout(left) {
                Ok(line) if line.contains(text) => return,
                Ok(_) => {}
                Err(_) => panic!("the gateway never logged {text:?}"),
            }
        }
    }

    /// Sends SIGTERM without waiting.
    pub(crate) fn send_term(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
    }

    /// Waits for the process to exit (after [`Gateway::send_term`]).
    pub(crate) fn wait(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let id = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(PATIENCE) {
            Ok(status) => status.unwrap(),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &id.to_string()])
                    .status();
                panic!("tollgate gateway did not stop");
            }
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `tollgate gateway --listen 127.0.0.1:0 ARGS…` with `env`, not started.
pub(crate) fn gateway_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("gateway")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("TOLLGATE_UPSTREAM")
        .env_remove("TOLLGATE_CONFIG")
        .envs(env.iter().copied())
        .env("RUST_LOG", "info");
    command
}

/// Runs a gateway that is expected to exit at once (bad settings).
pub(crate) fn gateway_output(args: &[&str], env: &[(&str, &str)]) -> Output {
    gateway_command(args, env)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A pooled HTTP/1.1 client (a fresh pool per call site).
pub(crate) fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One HTTP/1.1 connection to `address`, for requests that must share it.
pub(crate) async fn http1_connection(
    address: &str,
) -> hyper::client::conn::http1::SendRequest<TestBody> {
    let stream = TcpStream::connect(address).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// One HTTP/2 connection (prior knowledge, cleartext) to `address`.
pub(crate) async fn http2_connection(
    address: &str,
) -> hyper::client::conn::http2::SendRequest<TestBody> {
    let stream = TcpStream::connect(address).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// The whole body of `response`, as text.
pub(crate) async fn text(response: http::Response<Incoming>) -> String {
    use http_body_util::BodyExt;
    let bytes = tokio::time::timeout(PATIENCE, response.into_body().collect())
        .await
        .expect("the body came in time")
        .unwrap()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A `GET` of `url` with no body.
pub(crate) fn get(url: &str) -> Request<TestBody> {
    Request::get(url).body(TestBody::empty()).unwrap()
}

/// Bytes in a frame, for bodies read frame by frame.
pub(crate) fn data(frame: hyper::body::Frame<Bytes>) -> Bytes {
    frame.into_data().unwrap_or_default()
}

/// How long tests give a transfer of a large body.
pub(crate) const TRANSFER: Duration = Duration::from_secs(300);
