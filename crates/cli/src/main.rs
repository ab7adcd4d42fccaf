//! The `tollgate` binary.

use std::process::ExitCode;

use clap::Parser;
use mimalloc::MiMalloc;
use tollgate_cli::args::{Cli, Command};

/// Small, short-lived allocations dominate a request; see the workspace
/// manifest for why this allocator.
#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => tollgate_cli::simulate::run(&args),
        Command::Serve(args) => tollgate_cli::serve::run(&args),
        Command::CheckRules(args) => tollgate_cli::check_rules::run(&args),
        Command::Pace(args) => return tollgate_cli::pace::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate: {err:#}");
            ExitCode::FAILURE
        }
    }
}
