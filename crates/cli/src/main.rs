//! The `tollgate` binary.

use std::process::ExitCode;

use clap::Parser;
use mimalloc::MiMalloc;
use tollgate_cli::args::{Cli, Command};
use tollgate_cli::config_file::ConfigError;
use tollgate_rules::RulesError;

/// Small, short-lived allocations dominate a request; see the workspace
/// manifest for why this allocator.
#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // check-rules reports bad rules with status 1, as SPEC §11 says.
    let serves = matches!(cli.command, Command::Serve(_) | Command::Gateway(_));
    let result = match cli.command {
        Command::Simulate(args) => tollgate_cli::simulate::run(&args),
        Command::Serve(args) => tollgate_cli::serve::run(&args),
        Command::Gateway(args) => tollgate_cli::gateway::run(&args),
        Command::CheckRules(args) => tollgate_cli::check_rules::run(&args),
        Command::Pace(args) => return tollgate_cli::pace::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate: {err:#}");
            if serves {
                exit_code(&err)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The status of a server that did not start or stopped on an error: 64
/// (`EX_USAGE`) when its settings or rules cannot be used, so a supervisor
/// can tell a configuration to fix from a failure to retry; 1 otherwise.
fn exit_code(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<ConfigError>().is_some() || err.downcast_ref::<RulesError>().is_some() {
        ExitCode::from(64)
    } else {
        ExitCode::FAILURE
    }
}
