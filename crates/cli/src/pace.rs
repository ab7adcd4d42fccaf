//! `tollgate pace`: book a slot on a tollgate service, sleep until it, then
//! run a command in place of this process.

use std::process::{Command, ExitCode};
use std::time::Duration;

use tollgate_client::remote::{InlineLimit, Quota, RemoteError, RemotePacer};

use crate::args::PaceArgs;

/// No slot within `--max-wait` (sysexits' EX_TEMPFAIL).
const EXIT_NO_SLOT: u8 = 75;
/// The service cannot be reached or refused the request (EX_UNAVAILABLE).
const EXIT_UNAVAILABLE: u8 = 69;
/// The command exists but cannot be run (the shells' convention).
const EXIT_CANNOT_RUN: u8 = 126;
/// The command was not found (the shells' convention).
const EXIT_NOT_FOUND: u8 = 127;
/// Bad arguments (clap's own code).
const EXIT_USAGE: u8 = 2;

/// Runs `tollgate pace`; returns only when the command could not replace
/// this process (or on platforms without `exec`, with its exit status).
pub fn run(args: &PaceArgs) -> ExitCode {
    let max_wait = match args
        .max_wait
        .as_deref()
        .map(tollgate_core::rate::parse_duration)
    {
        None => None,
        Some(Ok(wait)) => Some(wait),
        Some(Err(err)) => return fail(EXIT_USAGE, &format!("--max-wait: {err}")),
    };
    match wait_for_slot(args, max_wait) {
        Ok(()) => {}
        Err(err @ RemoteError::TooLong { .. }) => return fail(EXIT_NO_SLOT, &err.to_string()),
        Err(err @ RemoteError::InvalidServer(_)) => return fail(EXIT_USAGE, &err.to_string()),
        Err(err) => return fail(EXIT_UNAVAILABLE, &err.to_string()),
    }
    run_command(&args.command)
}

fn wait_for_slot(args: &PaceArgs, max_wait: Option<Duration>) -> Result<(), RemoteError> {
    let quota = Quota::Inline {
        key: args.key.clone(),
        limit: InlineLimit {
            algorithm: args.algorithm.clone(),
            rate: args.rate.clone(),
            burst: args.burst,
        },
    };
    let mut pacer = RemotePacer::new(&args.server, quota)?;
    if let Some(max_wait) = max_wait {
        pacer = pacer.with_max_wait(max_wait);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RemoteError::Unreachable(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(pacer.until_n_ready(args.cost))
}

#[cfg(unix)]
fn run_command(command: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let Some((program, rest)) = command.split_first() else {
        return fail(EXIT_USAGE, "no command given after --");
    };
    // Only returns when the program could not be started.
    let err = Command::new(program).args(rest).exec();
    cannot_run(program, &err)
}

#[cfg(not(unix))]
fn run_command(command: &[String]) -> ExitCode {
    let Some((program, rest)) = command.split_first() else {
        return fail(EXIT_USAGE, "no command given after --");
    };
    match Command::new(program).args(rest).status() {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| (c & 0xff) as u8)),
        Err(err) => cannot_run(program, &err),
    }
}

fn cannot_run(program: &str, err: &std::io::Error) -> ExitCode {
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_RUN
    };
    fail(code, &format!("cannot run {program:?}: {err}"))
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("tollgate pace: {message}");
    ExitCode::from(code)
}
