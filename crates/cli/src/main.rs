//! The `tollgate` binary.

use std::process::ExitCode;

use clap::Parser;
use tollgate_cli::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => tollgate_cli::simulate::run(&args),
        Command::Serve(args) => tollgate_cli::serve::run(&args),
        Command::CheckRules(args) => tollgate_cli::check_rules::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate: {err:#}");
            ExitCode::FAILURE
        }
    }
}
