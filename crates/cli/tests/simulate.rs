//! `tollgate simulate` through the real binary: the worked examples of
//! SPEC §2, the trace format's errors, determinism and the plot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn simulate(args: &[&str], trace: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("simulate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tollgate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(trace.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs a trace that must succeed and returns its decisions.
fn decisions(args: &[&str], trace: &str) -> Vec<Value> {
    let out = simulate(args, trace);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A trace of unit requests for key "k" at the given instants.
fn trace(instants_ms: &[u64]) -> String {
    instants_ms
        .iter()
        .map(|t| format!("{{\"at_ms\": {t}, \"key\": \"k\"}}\n"))
        .collect()
}

fn allowed(d: &[Value]) -> Vec<bool> {
    d.iter().map(|v| v["allowed"].as_bool().unwrap()).collect()
}

fn field(d: &Value, name: &str) -> u64 {
    d[name].as_u64().unwrap()
}

#[test]
fn output_has_every_field_in_order_as_integers() {
    let out = simulate(&["--algorithm", "gcra", "--rate", "1/s"], &trace(&[7]));
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        line,
        "{\"at_ms\":7,\"key\":\"k\",\"allowed\":true,\"limit\":1,\"remaining\":0,\
         \"retry_after_ms\":0,\"reset_after_ms\":1000,\"delay_ms\":0}\n"
    );
}

#[test]
fn token_bucket_capacity_10_refill_2_per_second() {
    let mut at = vec![0; 5];
    at.extend([2_000; 4]);
    at.extend([3_000; 8]);
    let d = decisions(
        &[
            "--algorithm",
            "token_bucket",
            "--rate",
            "2/s",
            "--burst",
            "10",
        ],
        &trace(&at),
    );
    assert_eq!(field(&d[4], "remaining"), 5);
    assert_eq!(field(&d[8], "remaining"), 5, "9 − 4 = 5 left at t=2s");
    let last_second = allowed(&d[9..]);
    assert_eq!(last_second.iter().filter(|a| **a).count(), 7);
    assert!(!last_second[7], "the 8th at t=3s is rejected");
}

#[test]
fn token_bucket_capacity_4_refill_2_per_minute() {
    let d = decisions(
        &[
            "--algorithm",
            "token_bucket",
            "--rate",
            "2/min",
            "--burst",
            "4",
        ],
        &trace(&[0, 0, 0, 0, 0, 60_000, 60_000, 60_000]),
    );
    assert_eq!(
        allowed(&d),
        [true, true, true, true, false, true, true, false]
    );
    assert_eq!(field(&d[4], "retry_after_ms"), 30_000);
}

#[test]
fn fixed_window_three_per_second_and_the_boundary_weakness() {
    let d = decisions(
        &["--algorithm", "fixed_window", "--rate", "3/s"],
        &trace(&[0, 100, 200, 300, 1_000]),
    );
    assert_eq!(allowed(&d), [true, true, true, false, true]);
    assert_eq!(field(&d[3], "retry_after_ms"), 700);

    let two = 2 * 3_600_000;
    let at: Vec<u64> = (0..5)
        .map(|i| two + 30_000 + i * 7_000)
        .chain((0..5).map(|i| two + 60_000 + i * 7_000))
        .collect();
    let d = decisions(
        &["--algorithm", "fixed_window", "--rate", "5/min"],
        &trace(&at),
    );
    assert!(
        allowed(&d).iter().all(|a| *a),
        "10 inside one minute: the known weakness"
    );
}

#[test]
fn sliding_window_log_two_per_minute() {
    let hour = 3_600_000;
    let d = decisions(
        &["--algorithm", "sliding_window_log", "--rate", "2/min"],
        &trace(&[hour + 1_000, hour + 30_000, hour + 50_000, hour + 100_000]),
    );
    assert_eq!(allowed(&d), [true, true, false, true]);
}

#[test]
fn sliding_window_counter_seven_per_minute() {
    let prev: Vec<u64> = (0..5).map(|i| 60_000 + i * 1_000).collect();
    let curr = [120_000, 125_000, 130_000];
    let at: Vec<u64> = prev
        .iter()
        .chain(&curr)
        .copied()
        .chain([138_000, 138_000])
        .collect();
    let d = decisions(
        &["--algorithm", "sliding_window_counter", "--rate", "7/min"],
        &trace(&at),
    );
    assert!(allowed(&d[..8]).iter().all(|a| *a));
    assert_eq!(
        allowed(&d[8..]),
        [true, false],
        "3 + floor(5 × 0.7) = 6: one more passes"
    );
}

#[test]
fn stepped_window_ten_per_four_seconds_with_one_second_steps() {
    let mut at = vec![500; 3];
    at.extend([1_500; 3]);
    at.extend([2_500; 2]);
    at.extend([3_500; 2]);
    at.extend([3_900, 5_000]);
    let d = decisions(
        &[
            "--algorithm",
            "stepped_window",
            "--rate",
            "10/4s",
            "--step",
            "1s",
        ],
        &trace(&at),
    );
    assert!(allowed(&d[..10]).iter().all(|a| *a));
    assert!(!allowed(&d[10..11])[0]);
    assert_eq!(
        field(&d[10], "retry_after_ms"),
        1_100,
        "next slot at t=5.0s"
    );
    assert!(allowed(&d[11..])[0]);
    assert_eq!(
        field(&d[11], "remaining"),
        2,
        "7 still counted at t=5.0s, plus this one"
    );
}

#[test]
fn out_of_order_input_names_the_line() {
    let out = simulate(
        &["--algorithm", "gcra", "--rate", "1/s"],
        &trace(&[5, 9, 3]),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 3") && stderr.contains("at_ms 3"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        2,
        "earlier lines were answered"
    );
}

#[test]
fn bad_lines_and_impossible_costs_are_errors_naming_the_line() {
    let out = simulate(
        &["--algorithm", "gcra", "--rate", "1/s"],
        "{\"at_ms\": 1, \"key\": \"k\"}\n{\"at_ms\": \"x\"}\n",
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));

    let out = simulate(
        &["--algorithm", "gcra", "--rate", "1/s"],
        "{\"at_ms\": 1, \"key\": \"k\", \"cost\": 2}\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("line 1") && stderr.contains("cost 2"),
        "{stderr}"
    );
}

#[test]
fn bad_arguments_are_named() {
    for (args, needle) in [
        (["--algorithm", "leaky", "--rate", "1/s"], "\"leaky\""),
        (
            ["--algorithm", "gcra", "--rate", "1/fortnight"],
            "\"fortnight\"",
        ),
    ] {
        let out = simulate(&args, "");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{stderr}");
    }
}

#[test]
fn replays_are_deterministic_and_summarised() {
    let sample = include_str!("../../../examples/traces/three-clients.jsonl");
    let args = ["--algorithm", "sliding_window_counter", "--rate", "10/s"];
    let first = simulate(&args, sample);
    let second = simulate(&args, sample);
    assert!(first.status.success());
    assert_eq!(first.stdout, second.stdout);
    let stderr = String::from_utf8_lossy(&first.stderr);
    let lines = sample.lines().count();
    assert!(
        stderr.starts_with(&format!("{lines} requests:")),
        "{stderr}"
    );
    assert!(
        stderr.contains("alice:") && stderr.contains("bob:"),
        "{stderr}"
    );
}

#[test]
fn plot_draws_admitted_and_rejected_requests() {
    let dir = std::env::temp_dir().join(format!("tollgate-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plot.svg");
    let out = simulate(
        &[
            "--algorithm",
            "token_bucket",
            "--rate",
            "2/s",
            "--burst",
            "3",
            "--plot",
            path.to_str().unwrap(),
        ],
        &trace(&[0, 0, 0, 0, 500, 1_000]),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("rejected") && svg.contains("limit (3)"));
    assert!(svg.matches("<circle").count() > 1 && svg.matches("<path").count() > 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
