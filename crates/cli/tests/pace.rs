//! Client-side pacing through a real `tollgate serve`: workers in two
//! processes share a third-party API's quota through `RemotePacer` and never
//! see a `429`; the Databox pair; and the `tollgate pace` command.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use support::Server;
use tollgate_client::remote::{DataboxPacer, Quota, RemoteError, RemotePacer};

/// The fake provider's limit: 100 calls in any 4 s, an exact sliding window
/// `(t − 4 s, t]` over the calls' arrivals; calls over it get `429` and are
/// not counted.
const PROVIDER_LIMIT: usize = 100;
const PROVIDER_WINDOW: Duration = Duration::from_secs(4);
/// What the workers pace by: the provider's limit over a window 2 s longer.
/// The margin is for the lateness of calls, from the booked slot to the
/// arrival at the provider: only a call more than 2 s later than another
/// (a stalled process, not a busy one) could be refused, so the verdict
/// does not depend on how the machine schedules the processes.
const PACED_RATE: &str = "100/6s";
/// Tasks in each worker process, and the calls each task makes: 200 calls
/// in all, two windows of the paced quota.
const TASKS_PER_WORKER: usize = 4;
const CALLS_PER_TASK: usize = 25;
/// How long a worker process may run before it counts as hung (the run
/// takes one paced window, about 6 s).
const HANG_GUARD: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Provider {
    window: VecDeque<Instant>,
    served: Vec<Instant>,
    too_many: u64,
}

/// Starts the fake provider on a free port, on its own runtime thread.
fn start_provider() -> (SocketAddr, Arc<Mutex<Provider>>) {
    let provider = Arc::new(Mutex::new(Provider::default()));
    let state = Arc::clone(&provider);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/data",
                axum::routing::get(move || {
                    let state = Arc::clone(&state);
                    async move {
                        let now = Instant::now();
                        let mut p = state.lock().unwrap();
                        while p
                            .window
                            .front()
                            .is_some_and(|t| now.duration_since(*t) >= PROVIDER_WINDOW)
                        {
                            p.window.pop_front();
                        }
                        if p.window.len() >= PROVIDER_LIMIT {
                            p.too_many += 1;
                            axum::http::StatusCode::TOO_MANY_REQUESTS
                        } else {
                            p.window.push_back(now);
                            p.served.push(now);
                            axum::http::StatusCode::OK
                        }
                    }
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (address, provider)
}

/// The worker process: [`TASKS_PER_WORKER`] tasks, each pacing
/// [`CALLS_PER_TASK`] calls to the provider through the service given in the
/// environment; prints how many got `200` and how many `429`. Run by
/// `eight_workers_in_two_processes_never_exceed_the_provider_quota` as a
/// child process; in a normal test run (no environment) it does nothing.
#[test]
fn pace_worker_process() {
    let (Ok(server), Ok(api)) = (
        std::env::var("PACE_WORKER_SERVER"),
        std::env::var("PACE_WORKER_API"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let run = runtime.block_on(async {
        let pacer = RemotePacer::new(
            &server,
            Quota::inline("provider", "sliding_window_log", PACED_RATE),
        )
        .unwrap();
        let http = reqwest::Client::new();
        let tasks: Vec<_> = (0..TASKS_PER_WORKER)
            .map(|_| {
                let (pacer, http, api) = (pacer.clone(), http.clone(), api.clone());
                tokio::spawn(async move {
                    let (mut ok, mut too_many) = (0u64, 0u64);
                    for _ in 0..CALLS_PER_TASK {
                        pacer.until_ready().await.unwrap();
                        let status = http.get(&api).send().await.unwrap().status().as_u16();
                        match status {
                            200 => ok += 1,
                            429 => too_many += 1,
                            other => panic!("provider answered {other}"),
                        }
                    }
                    (ok, too_many)
                })
            })
            .collect();
        let all = async {
            let mut totals = (0, 0);
            for task in tasks {
                let (ok, too_many) = task.await.unwrap();
                totals = (totals.0 + ok, totals.1 + too_many);
            }
            totals
        };
        tokio::time::timeout(HANG_GUARD, all).await
    });
    let (ok, too_many) = run.expect("the worker's calls hung");
    println!("PACE_WORKER_RESULT {ok} {too_many}");
}

#[test]
fn eight_workers_in_two_processes_never_exceed_the_provider_quota() {
    let server = Server::start(&[]);
    let (address, provider) = start_provider();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "pace_worker_process", "--nocapture"])
                .env("PACE_WORKER_SERVER", &server.base)
                .env("PACE_WORKER_API", format!("http://{address}/data"))
                .stderr(std::process::Stdio::inherit())
                .spawn_output()
        })
        .collect();
    let (mut ok, mut too_many) = (0u64, 0u64);
    for worker in workers {
        let output = worker.join().unwrap();
        assert!(output.status.success(), "a worker process failed");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("PACE_WORKER_RESULT "))
            .unwrap_or_else(|| panic!("no result from a worker: {stdout}"));
        let mut numbers = line.split(' ').map(|n| n.parse::<u64>().unwrap());
        ok += numbers.next().unwrap();
        too_many += numbers.next().unwrap();
    }
    let provider = provider.lock().unwrap();
    assert_eq!(too_many, 0, "the workers saw 429s");
    assert_eq!(provider.too_many, 0, "the provider refused calls");
    let calls = (2 * TASKS_PER_WORKER * CALLS_PER_TASK) as u64;
    assert_eq!(ok, calls);
    assert_eq!(provider.served.len() as u64, calls);
    // The whole quota is used: the first 100 slots are free at once, the
    // next 100 a paced window later, so the calls come in two bursts of 100
    // and the longest pause between two arrivals follows the 100th.
    let pauses: Vec<Duration> = provider
        .served
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]))
        .collect();
    let longest = (0..pauses.len()).max_by_key(|&i| pauses[i]).unwrap();
    assert_eq!(longest + 1, PROVIDER_LIMIT, "the first burst's size");
}

/// `Command::output` on a thread, so both workers run at once.
trait SpawnOutput {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output>;
}

impl SpawnOutput for Command {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output> {
        let child = self
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the worker process starts");
        std::thread::spawn(move || child.wait_with_output().unwrap())
    }
}

#[test]
fn the_databox_pair_says_when_and_records_after_the_fact() {
    let server = Server::start(&[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pacer = DataboxPacer::new(&server.base, "crm", 3, 3600).unwrap();
        for n in 1..=3 {
            assert_eq!(pacer.delay().await.unwrap(), Duration::ZERO);
            assert_eq!(pacer.increment().await.unwrap(), n);
        }
        let delay = pacer.delay().await.unwrap();
        assert!(delay > Duration::from_secs(3000), "{delay:?}");
        // Recorded even when over: the call was already made.
        assert_eq!(pacer.increment_at(SystemTime::now()).await.unwrap(), 4);
        let bad = DataboxPacer::new(&server.base, "", 3, 3600).unwrap();
        assert!(
            matches!(
                bad.delay().await,
                Err(RemoteError::Refused { status: 400, .. })
            ),
            "an empty id is refused"
        );
    });
}

#[test]
fn reservations_are_consecutive_and_bounded_by_max_wait() {
    let server = Server::start(&[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pacer = RemotePacer::new(&server.base, Quota::inline("k", "gcra", "2/hour")).unwrap();
        // The waits are counted from the first booking, which happened
        // between `start` and the answer: however long the calls took, a
        // wait is its slot's distance from the first booking less at most
        // the time since `start` (the server rounds waits up to the ms).
        let start = Instant::now();
        assert_eq!(pacer.reserve(1).await.unwrap(), Duration::ZERO);
        assert_eq!(pacer.reserve(1).await.unwrap(), Duration::ZERO);
        // Half an hour after the first booking.
        let third = pacer.reserve(1).await.unwrap();
        let half_hour = Duration::from_secs(1800);
        assert!(
            (half_hour.saturating_sub(start.elapsed())..=half_hour).contains(&third),
            "{third:?}"
        );
        let bounded = pacer.clone().with_max_wait(Duration::from_secs(60));
        let result = bounded.reserve(1).await;
        let since_start = start.elapsed();
        match result {
            // The fourth slot is an hour away: within a minute of it in
            // 59 minutes.
            Err(RemoteError::TooLong { retry_after }) => {
                let in_59_minutes = Duration::from_secs(3540);
                assert!(
                    (in_59_minutes.saturating_sub(since_start)..=in_59_minutes)
                        .contains(&retry_after),
                    "{retry_after:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        let refused = RemotePacer::new(&server.base, Quota::inline("k", "gcra", "2/fortnight"))
            .unwrap()
            .reserve(1)
            .await;
        assert!(
            matches!(&refused, Err(RemoteError::Refused { status: 400, .. })),
            "{refused:?}"
        );
        let nobody = RemotePacer::new("http://127.0.0.1:1", Quota::inline("k", "gcra", "2/hour"))
            .unwrap()
            .reserve(1)
            .await;
        assert!(
            matches!(nobody, Err(RemoteError::Unreachable(_))),
            "{nobody:?}"
        );
    });
}

fn pace(server: &str, extra: &[&str], command: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["pace", "--server", server])
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

#[test]
fn pace_runs_the_command_in_its_slot_and_passes_its_exit_status() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let script = format!("echo run >> {}; exit 7", marker.display());
    let limit = ["--key", "script", "--rate", "2/hour", "--max-wait", "10s"];
    for _ in 0..2 {
        let output = pace(&server.base, &limit, &["sh", "-c", &script]);
        assert_eq!(output.status.code(), Some(7), "{output:?}");
    }
    // The third slot is half an hour away: refused, the command not run.
    let output = pace(&server.base, &limit, &["sh", "-c", &script]);
    assert_eq!(output.status.code(), Some(75), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no slot"));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "run\nrun\n");

    // The slots are the service's: a check sees both taken.
    let (status, body) = server.call(
        "/v1/check",
        &json!({"key": "script", "limit": {"algorithm": "sliding_window_log", "rate": "2/hour"}, "cost": 0}),
    );
    assert_eq!((status, body["remaining"].clone()), (200, Value::from(0)));

    let other = ["--key", "other", "--rate", "2/hour"];
    let output = pace(&server.base, &other, &["/nonexistent/program"]);
    assert_eq!(output.status.code(), Some(127), "{output:?}");
    let output = pace("http://127.0.0.1:1", &other, &["true"]);
    assert_eq!(output.status.code(), Some(69), "{output:?}");
    let output = pace(
        &server.base,
        &["--key", "k", "--rate", "nonsense"],
        &["true"],
    );
    assert_eq!(output.status.code(), Some(69), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("nonsense"));
    let output = pace(
        &server.base,
        &["--key", "k", "--rate", "1/s", "--max-wait", "soon"],
        &["true"],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}
