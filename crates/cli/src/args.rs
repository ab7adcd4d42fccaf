//! Command-line arguments of every subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// tollgate: a rate limiter with exact, tested semantics.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace of requests through one limit, deterministically.
    ///
    /// Reads one JSON object per line, `{"at_ms": <int>, "key": "<string>",
    /// "cost": <int, default 1>}`, in non-decreasing `at_ms` order, and writes
    /// one decision per line to stdout; a summary goes to stderr.
    Simulate(SimulateArgs),
}

/// `tollgate simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Algorithm: token_bucket, gcra, leaky_bucket, fixed_window,
    /// sliding_window_log, sliding_window_counter, stepped_window, concurrency.
    #[arg(long)]
    pub algorithm: String,
    /// The limit, e.g. `10/s`, `100/minute`, `5/15min`, `7 per hour`.
    #[arg(long)]
    pub rate: String,
    /// Bucket capacity (token_bucket, gcra, leaky_bucket); defaults to N.
    #[arg(long)]
    pub burst: Option<u64>,
    /// Step size of stepped_window, e.g. `1s`; defaults to the Databox table.
    #[arg(long)]
    pub step: Option<String>,
    /// Lease lifetime of concurrency, e.g. `30s`; defaults to 60s.
    #[arg(long)]
    pub lease_ttl: Option<String>,
    /// The trace file; standard input when absent.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Also draw admitted and rejected requests over time to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}
